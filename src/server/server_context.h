// Server options and what request handlers share (engine, tokenizer, chat rules, metrics).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine_client.h"
#include "recipe/encoding_rules.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0: any free port (Server::port() tells which)
  std::string api_key;   // empty: no authentication
  // Names clients may use in "model"; the first is reported. Empty: the engine's model name.
  std::vector<std::string> served_model_names;
  size_t max_body_bytes = 8u << 20;     // larger bodies get 413
  size_t max_header_bytes = 64u << 10;  // larger headers get 413
  int max_json_depth = 64;              // deeper nesting gets 400
  int io_threads = 2;
  std::chrono::milliseconds keepalive_interval{15000};  // SSE comment/ping when idle
  std::chrono::milliseconds idle_timeout{120000};       // keep-alive connection, no request
  std::chrono::milliseconds write_timeout{60000};       // a client that stops reading
  std::chrono::milliseconds drain_timeout{30000};       // SIGTERM: running requests may finish
  bool handle_signals = true;                           // SIGTERM/SIGINT start the drain
};

struct ServerContext {
  EngineClient& engine;
  const Tokenizer& tokenizer;
  const recipe::EncodingRules& rules;
  const ServerOptions& options;
  ServerMetrics& metrics;

  // The reported model name.
  const std::string& model_name() const {
    return options.served_model_names.empty() ? engine.info().model_name
                                              : options.served_model_names.front();
  }
  bool IsServedModel(const std::string& name) const {
    if (name == model_name()) return true;
    for (const auto& served : options.served_model_names) {
      if (served == name) return true;
    }
    return false;
  }
};

}  // namespace deepinfer::server
