// Server-side counters and histograms, rendered with the engine's EngineStats as Prometheus text
// (GET /metrics). Thread-safe: every method may be called from any io thread.
//
// What adds up (checked by the load test):
//   sum over code of deepinfer_http_requests_total{endpoint, code}  = HTTP requests answered
//   deepinfer_generations_started_total = sum over outcome of deepinfer_generations_total
//     + deepinfer_generations_running
//   outcome "completed": the response was fully sent; "client_disconnect": the client went
//   away and the request was aborted; "error": the engine failed the request mid-way.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/thread_annotations.h"
#include "engine/engine_client.h"

namespace deepinfer::server {

// A Prometheus histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  // Appends the _bucket/_sum/_count series of `name`.
  void Render(std::string_view name, std::string_view help, std::string& out) const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<int64_t> counts_ DI_GUARDED_BY(mu_);  // per bucket (not cumulative), +Inf last
  double sum_ DI_GUARDED_BY(mu_) = 0;
  int64_t count_ DI_GUARDED_BY(mu_) = 0;
};

enum class GenerationOutcome { kCompleted, kClientDisconnect, kError };

class ServerMetrics {
 public:
  ServerMetrics();

  // One answered HTTP request (counted when its status line is decided).
  void CountHttp(std::string_view endpoint, int status);

  void GenerationStarted();
  void GenerationEnded(GenerationOutcome outcome);

  // Per finished generation (seconds): arrival at the server -> first token written,
  // mean time per output token after the first, arrival -> last byte, and the server's own
  // share of the first-token latency (time to first byte minus engine TTFT).
  void ObserveTtft(double seconds) { ttft_.Observe(seconds); }
  void ObserveTpot(double seconds) { tpot_.Observe(seconds); }
  void ObserveE2e(double seconds) { e2e_.Observe(seconds); }
  void ObserveServerOverhead(double seconds) { overhead_.Observe(seconds); }

  // Token counts of requests this server submitted.
  void AddTokens(int64_t prompt, int64_t cached, int64_t completion);

  void ConnectionOpened() { connections_.fetch_add(1); }
  void ConnectionClosed() { connections_.fetch_sub(1); }

  std::string Render(const EngineStats& stats, const EngineInfo& info) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> http_ DI_GUARDED_BY(mu_);
  std::atomic<int64_t> started_{0};
  std::atomic<int64_t> running_{0};
  std::array<std::atomic<int64_t>, 3> outcomes_{};
  std::atomic<int64_t> prompt_tokens_{0};
  std::atomic<int64_t> cached_tokens_{0};
  std::atomic<int64_t> completion_tokens_{0};
  std::atomic<int64_t> connections_{0};
  Histogram ttft_;
  Histogram tpot_;
  Histogram e2e_;
  Histogram overhead_;
};

}  // namespace deepinfer::server
