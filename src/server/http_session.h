// One HTTP/1.1 connection: reads requests (size limits, Expect: 100-continue, keep-alive),
// authenticates, routes, and runs generations, streaming them as SSE with chunked encoding.
//
// While a generation runs, the session keeps a read pending on the socket: EOF or an error
// there means the client went away, and the engine request is aborted at once (the engine
// frees its state within one step). Bytes that arrive instead (a pipelined request) are kept.
#pragma once

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/message.hpp>

#include <atomic>
#include <memory>
#include <string>

#include "server/api_error.h"
#include "server/generation.h"
#include "server/openai_chat.h"
#include "server/request_checks.h"
#include "server/server_context.h"
#include "server/wake.h"

namespace deepinfer::server {

// State every session shares, owned by the Server.
struct ServerShared {
  ServerContext ctx;
  std::atomic<bool> draining{false};
  std::atomic<int> active_generations{0};
};

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(boost::asio::ip::tcp::socket socket, ServerShared& shared);
  ~HttpSession();
  boost::asio::awaitable<void> Run();

 private:
  using Request = boost::beast::http::request<boost::beast::http::string_body>;

  struct Reply {
    Reply(int s, std::string type, std::string b) : status(s), content_type(std::move(type)), body(std::move(b)) {}
    int status = 200;
    std::string content_type;
    std::string body;
    std::string allow;  // 405: the Allow header
  };

  // Reads one request; false when the connection should close (the reply, if any, was sent).
  boost::asio::awaitable<bool> ReadRequest(Request& request);
  // Routes and answers one request; false when the connection should close.
  boost::asio::awaitable<bool> Dispatch(Request& request);
  boost::asio::awaitable<bool> HandleGeneration(Request& request, Endpoint endpoint);
  boost::asio::awaitable<bool> RunGeneration(const Request& request, ApiKind api, GenerationPlan plan);
  boost::asio::awaitable<GenerationOutcome> StreamGeneration(const Request& request, ApiKind api,
                                                             Generation& gen, ResponseWriter& writer);
  boost::asio::awaitable<GenerationOutcome> CollectGeneration(ApiKind api, Generation& gen,
                                                              ResponseWriter& writer);

  boost::asio::awaitable<bool> Write(Reply reply);
  boost::asio::awaitable<bool> WriteError(ApiKind api, const ApiError& error);
  // Streaming: headers once, then chunks (HTTP/1.1 chunked; HTTP/1.0: raw bytes, then close).
  boost::asio::awaitable<bool> WriteStreamHeader();
  boost::asio::awaitable<bool> WriteStreamBytes(const std::string& bytes);
  boost::asio::awaitable<bool> WriteStreamEnd();
  // After an error that leaves unread request bytes: close our side, discard until EOF.
  boost::asio::awaitable<void> LingeringClose();
  // 413 for a body over the limit (only its header was read), then LingeringClose().
  boost::asio::awaitable<void> RejectTooLarge(const Request& header);

  // The watch runs from StartWatch() until StopWatch() returns; a read that completes with data
  // after StopWatch() cancelled it keeps the bytes but does not re-arm.
  void StartWatch();
  void ArmWatch();
  boost::asio::awaitable<void> StopWatch();
  bool Authorized(const Request& request) const;
  void RecordLatency(const Generation& gen, bool stream);

  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  ServerShared& shared_;
  std::shared_ptr<Wake> wake_;
  bool watching_ = false;     // a disconnect-watch read is pending
  bool watch_stopping_ = false;  // StopWatch() is waiting for the pending read to end
  bool peer_closed_ = false;  // the watch saw EOF / an error
  bool keep_alive_ = true;    // of the current request
  bool http10_ = false;       // of the current request
  std::string endpoint_;      // metrics label of the current request
  double t_arrival_ = 0;      // request header read (seconds, monotonic)
  double t_first_token_ = -1; // first token written (stream) / received (non-stream)
};

}  // namespace deepinfer::server
