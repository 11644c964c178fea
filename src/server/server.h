// The OpenAI- and Anthropic-compatible HTTP server (docs/server.md).
//
// Routes: POST /v1/chat/completions, /v1/completions, /v1/messages,
// /v1/messages/count_tokens (each also without the /v1 prefix); GET /v1/models,
// /v1/models/{id}, /health, /metrics. --api-key protects the /v1 routes (Authorization:
// Bearer or x-api-key); /health and /metrics stay open.
//
// Lifecycle: Start() binds and serves on io threads; Shutdown() (or SIGTERM/SIGINT when
// options.handle_signals) stops accepting, answers new requests 503, drains the engine
// (EngineClient::Drain with options.drain_timeout: running requests finish, the rest are
// aborted), lets the last responses flush, then stops; Wait() returns after that.
//
// The engine, tokenizer and rules must outlive the Server.
#pragma once

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "engine/engine_client.h"
#include "recipe/encoding_rules.h"
#include "server/metrics.h"
#include "server/server_context.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

class Server {
 public:
  Server(ServerOptions options, EngineClient& engine, const Tokenizer& tokenizer,
         const recipe::EncodingRules& rules);
  ~Server();  // Shutdown() and Wait() if still running
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port and starts serving. Throws deepinfer::Error when it cannot bind.
  void Start();
  uint16_t port() const { return port_; }
  // Thread-safe; idempotent. Begins the drain described above.
  void Shutdown();
  // Blocks until the server has stopped.
  void Wait();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
};

}  // namespace deepinfer::server
