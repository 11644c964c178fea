// The engine as its clients (the offline LLM API, the HTTP server) see it: submit token-level
// requests, receive per-request streams of token deltas, abort. Thread-safe. Text, chat
// templates, stop strings and API shapes live above this line (recipe/, server/).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "core/finish_reason.h"
#include "core/sampling_params.h"
#include "core/types.h"

namespace deepinfer {



struct TopLogprob {
  TokenId token = 0;
  float logprob = 0.f;
};

struct TokenLogprob {
  TokenId token = 0;
  float logprob = 0.f;              // log-softmax of the model's logits (before sampling transforms)
  std::vector<TopLogprob> top;      // the `logprobs` most likely tokens, best first
};

// New tokens of one of the request's n sequences.
struct SequenceDelta {
  int32_t index = 0;                   // which of the n completions
  std::vector<TokenId> tokens;         // appended tokens (a finishing EOS/stop token included)
  std::vector<TokenLogprob> logprobs;  // parallel to tokens when logprobs >= 0 was asked
  FinishReason finish = FinishReason::kNone;
};

struct RequestUsage {
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens served from the prefix cache (per request)
  int64_t completion_tokens = 0;     // over all n sequences
};

struct StreamEvent {
  std::vector<SequenceDelta> deltas;
  bool done = false;          // the last event of the request: every sequence has finished
  RequestUsage usage;         // filled on the last event
  Status error;               // non-ok when the request failed
  double engine_ttft_s = -1;  // on the event carrying the first token: arrival -> first token
};

// Per-request event queue filled by the engine thread and drained by the client.
class RequestStream {
 public:
  explicit RequestStream(RequestId id) : id_(id) {}
  RequestId id() const { return id_; }

  // Everything queued so far (possibly nothing). Never blocks.
  std::vector<StreamEvent> Drain();
  // Waits until an event is queued or `timeout` passes; true if one is available.
  bool WaitFor(std::chrono::milliseconds timeout);
  // Called from the engine thread after events are queued. Must be cheap and must not block
  // (post to an event loop). Replaces any earlier notifier; set it before events can arrive.
  void SetNotifier(std::function<void()> notifier);

  // Engine side.
  void Push(StreamEvent event);

 private:
  const RequestId id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_ DI_GUARDED_BY(mu_);
  std::function<void()> notifier_ DI_GUARDED_BY(mu_);
};

struct GenerationRequest {
  TokenIds prompt;
  SamplingParams sampling;
  std::string cache_salt;  // requests share prefix-cache entries only with the same salt
};

struct EngineInfo {
  std::string model_name;        // served model name
  std::string model_dir;
  int64_t max_model_len = 0;     // prompt + completion tokens per sequence
  int64_t vocab_size = 0;
  std::vector<TokenId> eos_token_ids;
  int64_t block_size = 0;
};

struct EngineStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  int64_t num_blocks_total = 0;
  int64_t num_blocks_used = 0;        // referenced by running sequences (0 when idle)
  int64_t num_blocks_in_packs = 0;    // held by resume packs (the prefix cache's own copies)
  int64_t num_blocks_cached_free = 0; // free but holding prefix-cache content
  int64_t num_slots_total = 0;
  int64_t num_slots_used = 0;
  int64_t num_packs = 0;
  int64_t prompt_tokens_total = 0;
  int64_t prompt_tokens_cached = 0;   // served from the prefix cache
  int64_t generation_tokens_total = 0;
  int64_t requests_finished = 0;
  int64_t requests_aborted = 0;
  int64_t num_preemptions = 0;
  int64_t steps = 0;
  int64_t cuda_graph_steps = 0;       // steps whose forward replayed a CUDA graph
  double step_time_avg_s = 0;         // wall time per step
  double schedule_time_avg_s = 0;     // host time per step spent scheduling and bookkeeping
};

class EngineClient {
 public:
  virtual ~EngineClient() = default;
  // Queues a request. Errors (as Status, nothing is queued): kInvalidArgument for bad sampling
  // values or token ids, kOutOfRange when prompt + max_tokens exceeds max_model_len,
  // kResourceExhausted when the waiting queue is full, kUnavailable while shutting down.
  virtual Result<std::shared_ptr<RequestStream>> Submit(GenerationRequest request) = 0;
  // Aborts a request at any time (no-op if it is unknown or done). Its stream receives a final
  // event with FinishReason::kAbort within one engine step; its cache state is then freed.
  virtual void Abort(RequestId id) = 0;
  virtual EngineStats Stats() const = 0;
  virtual const EngineInfo& info() const = 0;
  // Stops accepting requests; returns once running and waiting requests finished or `timeout`
  // passed (the rest are aborted).
  virtual void Drain(std::chrono::milliseconds timeout) = 0;
};

}  // namespace deepinfer
