#include "server/metrics.h"

#include <fmt/format.h>

namespace deepinfer::server {
namespace {

std::vector<double> LatencyBounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

std::vector<double> OverheadBounds() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5};
}

constexpr std::array<const char*, 3> kOutcomeNames = {"completed", "client_disconnect", "error"};

void Gauge(std::string& out, std::string_view name, std::string_view help, double value) {
  fmt::format_to(std::back_inserter(out), "# HELP {0} {1}\n# TYPE {0} gauge\n{0} {2}\n", name,
                 help, value);
}

void Counter(std::string& out, std::string_view name, std::string_view help, int64_t value) {
  fmt::format_to(std::back_inserter(out), "# HELP {0} {1}\n# TYPE {0} counter\n{0} {2}\n", name,
                 help, value);
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t bucket = 0;
  while (bucket < bounds_.size() && value > bounds_[bucket]) ++bucket;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

void Histogram::Render(std::string_view name, std::string_view help, std::string& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::back_inserter(out);
  fmt::format_to(it, "# HELP {0} {1}\n# TYPE {0} histogram\n", name, help);
  int64_t cumulative = 0;
  for (size_t k = 0; k < bounds_.size(); ++k) {
    cumulative += counts_[k];
    fmt::format_to(it, "{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[k], cumulative);
  }
  cumulative += counts_.back();
  fmt::format_to(it, "{0}_bucket{{le=\"+Inf\"}} {1}\n{0}_sum {2}\n{0}_count {3}\n", name,
                 cumulative, sum_, count_);
}

ServerMetrics::ServerMetrics()
    : ttft_(LatencyBounds()), tpot_(LatencyBounds()), e2e_(LatencyBounds()),
      overhead_(OverheadBounds()) {}

void ServerMetrics::CountHttp(std::string_view endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++http_[{std::string(endpoint), status}];
}

void ServerMetrics::GenerationStarted() {
  started_.fetch_add(1);
  running_.fetch_add(1);
}

void ServerMetrics::GenerationEnded(GenerationOutcome outcome) {
  outcomes_[static_cast<size_t>(outcome)].fetch_add(1);
  running_.fetch_sub(1);
}

void ServerMetrics::AddTokens(int64_t prompt, int64_t cached, int64_t completion) {
  prompt_tokens_.fetch_add(prompt);
  cached_tokens_.fetch_add(cached);
  completion_tokens_.fetch_add(completion);
}

std::string ServerMetrics::Render(const EngineStats& stats, const EngineInfo& info) const {
  std::string out;
  auto it = std::back_inserter(out);
  out += "# HELP deepinfer_http_requests_total HTTP requests answered, by endpoint and status code\n"
         "# TYPE deepinfer_http_requests_total counter\n";
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, count] : http_) {
      fmt::format_to(it, "deepinfer_http_requests_total{{endpoint=\"{}\",code=\"{}\"}} {}\n",
                     key.first, key.second, count);
    }
  }
  Counter(out, "deepinfer_generations_started_total", "generation requests submitted to the engine",
          started_.load());
  out += "# HELP deepinfer_generations_total generation requests ended, by outcome\n"
         "# TYPE deepinfer_generations_total counter\n";
  for (size_t k = 0; k < kOutcomeNames.size(); ++k) {
    fmt::format_to(it, "deepinfer_generations_total{{outcome=\"{}\"}} {}\n", kOutcomeNames[k],
                   outcomes_[k].load());
  }
  Gauge(out, "deepinfer_generations_running", "generations in flight in the server", running_.load());
  Gauge(out, "deepinfer_http_connections", "open HTTP connections", connections_.load());
  Counter(out, "deepinfer_server_prompt_tokens_total", "prompt tokens of this server's requests",
          prompt_tokens_.load());
  Counter(out, "deepinfer_server_cached_prompt_tokens_total",
          "prompt tokens of this server's requests served from the prefix cache", cached_tokens_.load());
  Counter(out, "deepinfer_server_completion_tokens_total",
          "completion tokens sent (up to a stop), this server's requests", completion_tokens_.load());

  Gauge(out, "deepinfer_num_requests_running", "requests running in the engine", stats.num_running);
  Gauge(out, "deepinfer_num_requests_waiting", "requests waiting in the engine", stats.num_waiting);
  const double usage = stats.num_blocks_total > 0
                           ? static_cast<double>(stats.num_blocks_used) / stats.num_blocks_total
                           : 0.0;
  Gauge(out, "deepinfer_cache_usage_ratio", "state-cache blocks referenced by requests / all blocks",
        usage);
  Gauge(out, "deepinfer_cache_blocks_used", "state-cache blocks referenced by requests",
        stats.num_blocks_used);
  Gauge(out, "deepinfer_cache_blocks_total", "state-cache blocks", stats.num_blocks_total);
  Gauge(out, "deepinfer_cache_blocks_cached_free", "free blocks holding prefix-cache content",
        stats.num_blocks_cached_free);
  Gauge(out, "deepinfer_cache_packs", "ready resume packs of the prefix cache (each may hold one block)",
        stats.num_packs);
  Gauge(out, "deepinfer_cache_slots_used", "per-sequence state slots in use", stats.num_slots_used);
  Gauge(out, "deepinfer_cache_slots_total", "per-sequence state slots", stats.num_slots_total);
  const double hit_rate = stats.prompt_tokens_total > 0
                              ? static_cast<double>(stats.prompt_tokens_cached) / stats.prompt_tokens_total
                              : 0.0;
  Gauge(out, "deepinfer_prefix_cache_hit_rate", "prompt tokens served from the prefix cache / prompt tokens",
        hit_rate);
  Counter(out, "deepinfer_prompt_tokens_total", "prompt tokens (engine)", stats.prompt_tokens_total);
  Counter(out, "deepinfer_prompt_tokens_cached_total", "prompt tokens served from the prefix cache (engine)",
          stats.prompt_tokens_cached);
  Counter(out, "deepinfer_generation_tokens_total", "generated tokens (engine)",
          stats.generation_tokens_total);
  Counter(out, "deepinfer_engine_requests_finished_total", "engine requests finished",
          stats.requests_finished);
  Counter(out, "deepinfer_engine_requests_aborted_total", "engine requests aborted",
          stats.requests_aborted);
  Counter(out, "deepinfer_engine_preemptions_total", "preemptions", stats.num_preemptions);
  Counter(out, "deepinfer_engine_steps_total", "engine steps", stats.steps);
  Gauge(out, "deepinfer_engine_step_time_avg_seconds", "mean wall time per engine step",
        stats.step_time_avg_s);
  Gauge(out, "deepinfer_max_model_len", "context length per sequence", info.max_model_len);

  ttft_.Render("deepinfer_time_to_first_token_seconds",
               "request arrival -> first token written to the client", out);
  tpot_.Render("deepinfer_time_per_output_token_seconds",
               "mean time between output tokens after the first", out);
  e2e_.Render("deepinfer_e2e_request_latency_seconds", "request arrival -> last byte", out);
  overhead_.Render("deepinfer_server_added_latency_seconds",
                   "time to first byte minus engine TTFT (parsing, encoding, queue hand-off, writing)",
                   out);
  return out;
}

}  // namespace deepinfer::server
