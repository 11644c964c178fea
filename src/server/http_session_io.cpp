// HttpSession, second half: running a generation (stream / collect), writing replies and SSE
// chunks, the disconnect watch, latency metrics.
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/write.hpp>
#include <fmt/format.h>

#include "base/timer.h"
#include "server/http_session.h"
#include "server/json_out.h"

namespace deepinfer::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using net::use_awaitable;

namespace {

constexpr size_t kWatchBytes = 4096;
constexpr size_t kMaxPipelinedBytes = 1u << 20;
constexpr size_t kMaxDiscardBytes = 64u << 20;
constexpr std::chrono::seconds kLingerTimeout{5};
constexpr std::chrono::milliseconds kWatchStopPoll{1000};

}  // namespace

// ---- generation loops ---------------------------------------------------------------------

net::awaitable<GenerationOutcome> HttpSession::StreamGeneration(const Request& request, ApiKind api,
                                                                Generation& gen, ResponseWriter& writer) {
  const ServerOptions& options = shared_.ctx.options;
  bool header_sent = false;
  // Sends `bytes`, preceded by the headers and the stream opening the first time.
  auto send = [&](std::string bytes) -> net::awaitable<bool> {
    if (!header_sent) {
      header_sent = true;
      if (!co_await WriteStreamHeader()) co_return false;
      bytes = writer.StreamOpen() + bytes;
    }
    co_return co_await WriteStreamBytes(bytes);
  };
  for (;;) {
    if (peer_closed_) {
      gen.Abort();
      co_return GenerationOutcome::kClientDisconnect;
    }
    std::vector<ChoiceUpdate> updates = gen.Poll();
    if (const ChoiceFinish* failure = FindFailure(updates)) {
      gen.Abort();
      const ApiError error{shared_.draining.load() ? ErrorKind::kOverloaded : ErrorKind::kInternal, failure->error};
      keep_alive_ = false;
      if (!header_sent) co_await WriteError(api, error);
      else if (co_await WriteStreamBytes(writer.StreamError(error))) co_await WriteStreamEnd();
      co_return GenerationOutcome::kError;
    }
    const bool first_token = t_first_token_ < 0 && gen.any_token();
    std::string bytes = updates.empty() ? std::string() : writer.StreamUpdates(updates);
    if (!bytes.empty() || first_token) {
      if (!co_await send(std::move(bytes))) {
        gen.Abort();
        co_return GenerationOutcome::kClientDisconnect;
      }
      if (first_token) t_first_token_ = NowSeconds();
    }
    if (gen.done()) {
      std::string tail;
      if (request.count("x-deepinfer-timing") > 0 && t_first_token_ >= 0) {
        const double ttfb = t_first_token_ - t_arrival_;
        tail = fmt::format(": timing {{\"ttfb_s\":{:.6f},\"engine_ttft_s\":{:.6f},\"server_added_s\":{:.6f}}}\n\n",
                           ttfb, gen.engine_ttft_s(), ttfb - gen.engine_ttft_s());
      }
      tail += writer.StreamEnd(gen.usage());
      if (!co_await send(std::move(tail)) || !co_await WriteStreamEnd()) co_return GenerationOutcome::kClientDisconnect;
      co_return GenerationOutcome::kCompleted;
    }
    if (!co_await wake_->Wait(options.keepalive_interval)) {
      if (!co_await send(writer.KeepAlive())) {
        gen.Abort();
        co_return GenerationOutcome::kClientDisconnect;
      }
    }
  }
}

net::awaitable<GenerationOutcome> HttpSession::CollectGeneration(ApiKind api, Generation& gen, ResponseWriter& writer) {
  const ServerOptions& options = shared_.ctx.options;
  for (;;) {
    if (peer_closed_) {
      gen.Abort();
      co_return GenerationOutcome::kClientDisconnect;
    }
    std::vector<ChoiceUpdate> updates = gen.Poll();
    if (const ChoiceFinish* failure = FindFailure(updates)) {
      gen.Abort();
      keep_alive_ = false;
      co_await WriteError(api, {shared_.draining.load() ? ErrorKind::kOverloaded : ErrorKind::kInternal,
                                failure->error});
      co_return GenerationOutcome::kError;
    }
    if (t_first_token_ < 0 && gen.any_token()) t_first_token_ = NowSeconds();
    writer.Collect(updates);
    if (gen.done()) break;
    co_await wake_->Wait(options.keepalive_interval);
  }
  if (!co_await Write({200, "application/json", writer.Body(gen.usage())})) {
    co_return GenerationOutcome::kClientDisconnect;
  }
  co_return GenerationOutcome::kCompleted;
}

void HttpSession::RecordLatency(const Generation& gen, bool stream) {
  ServerMetrics& metrics = shared_.ctx.metrics;
  const double now = NowSeconds();
  metrics.ObserveE2e(now - t_arrival_);
  if (t_first_token_ < 0) return;
  const double ttft = t_first_token_ - t_arrival_;
  metrics.ObserveTtft(ttft);
  const int64_t tokens = gen.usage().completion_tokens;
  if (tokens > 1) metrics.ObserveTpot((now - t_first_token_) / static_cast<double>(tokens - 1));
  if (stream && gen.engine_ttft_s() >= 0) metrics.ObserveServerOverhead(std::max(0.0, ttft - gen.engine_ttft_s()));
}

// ---- writing ------------------------------------------------------------------------------

net::awaitable<bool> HttpSession::Write(Reply reply) {
  http::response<http::string_body> response{static_cast<http::status>(reply.status), http10_ ? 10 : 11};
  response.set(http::field::server, "deepinfer");
  response.set(http::field::content_type, reply.content_type);
  if (!reply.allow.empty()) response.set(http::field::allow, reply.allow);
  if (reply.status == 429 || reply.status == 503) response.set(http::field::retry_after, "1");
  const bool keep_alive = keep_alive_ && reply.status < 500 && !shared_.draining.load();
  response.keep_alive(keep_alive);
  response.body() = std::move(reply.body);
  response.prepare_payload();
  shared_.ctx.metrics.CountHttp(endpoint_, reply.status);
  beast::error_code ec;
  stream_.expires_after(shared_.ctx.options.write_timeout);
  co_await http::async_write(stream_, response, net::redirect_error(use_awaitable, ec));
  co_return !ec && keep_alive;
}

net::awaitable<bool> HttpSession::WriteError(ApiKind api, const ApiError& error) {
  co_return co_await Write({error.http_status(), "application/json", ErrorBody(api, error)});
}

net::awaitable<bool> HttpSession::WriteStreamHeader() {
  http::response<http::empty_body> response{http::status::ok, http10_ ? 10 : 11};
  response.set(http::field::server, "deepinfer");
  response.set(http::field::content_type, "text/event-stream; charset=utf-8");
  response.set(http::field::cache_control, "no-cache");
  response.set("x-accel-buffering", "no");
  if (http10_) {
    response.keep_alive(false);
  } else {
    response.keep_alive(keep_alive_ && !shared_.draining.load());
    response.chunked(true);
  }
  shared_.ctx.metrics.CountHttp(endpoint_, 200);
  http::response_serializer<http::empty_body> serializer{response};
  beast::error_code ec;
  stream_.expires_after(shared_.ctx.options.write_timeout);
  co_await http::async_write_header(stream_, serializer, net::redirect_error(use_awaitable, ec));
  co_return !ec;
}

net::awaitable<bool> HttpSession::WriteStreamBytes(const std::string& bytes) {
  if (bytes.empty()) co_return !peer_closed_;
  beast::error_code ec;
  stream_.expires_after(shared_.ctx.options.write_timeout);
  if (http10_) {
    co_await net::async_write(stream_, net::buffer(bytes), net::redirect_error(use_awaitable, ec));
  } else {
    co_await net::async_write(stream_, http::make_chunk(net::buffer(bytes)), net::redirect_error(use_awaitable, ec));
  }
  co_return !ec;
}

net::awaitable<bool> HttpSession::WriteStreamEnd() {
  if (http10_) {
    keep_alive_ = false;
    co_return true;
  }
  beast::error_code ec;
  stream_.expires_after(shared_.ctx.options.write_timeout);
  co_await net::async_write(stream_, http::make_chunk_last(), net::redirect_error(use_awaitable, ec));
  co_return !ec;
}

net::awaitable<void> HttpSession::LingeringClose() {
  beast::error_code ec;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_send, ec);
  std::vector<char> scratch(64 * 1024);
  size_t discarded = 0;
  stream_.expires_after(kLingerTimeout);
  while (!ec && discarded < kMaxDiscardBytes) {
    discarded += co_await stream_.async_read_some(net::buffer(scratch), net::redirect_error(use_awaitable, ec));
  }
}

// ---- disconnect watch ---------------------------------------------------------------------

void HttpSession::StartWatch() {
  watch_stopping_ = false;
  ArmWatch();
}

void HttpSession::ArmWatch() {
  if (watching_ || peer_closed_ || watch_stopping_) return;
  watching_ = true;
  stream_.expires_never();
  stream_.async_read_some(
      buffer_.prepare(kWatchBytes),
      [self = shared_from_this()](beast::error_code ec, size_t n) {
        self->watching_ = false;
        if (!ec) {
          self->buffer_.commit(n);  // a pipelined request: kept for the next read
          if (self->buffer_.size() < kMaxPipelinedBytes && !self->watch_stopping_) {
            self->ArmWatch();
            return;
          }
        } else if (ec != net::error::operation_aborted) {
          self->peer_closed_ = true;
        }
        self->wake_->Notify();
      });
}

net::awaitable<void> HttpSession::StopWatch() {
  watch_stopping_ = true;
  if (!watching_) co_return;
  beast::error_code ec;
  stream_.socket().cancel(ec);
  while (watching_) co_await wake_->Wait(kWatchStopPoll);
}

}  // namespace deepinfer::server
