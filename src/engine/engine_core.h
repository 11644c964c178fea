// EngineCore: the step loop (ARCHITECTURE.md §3). One thread owns the scheduler, the state
// cache and the runner:
//
//   overlapped (default)                    synchronous (debugging, baseline)
//   out[N+1] = scheduler.Schedule()          out[N] = scheduler.Schedule()
//   runner.Launch(out[N+1])                  runner.Launch(out[N])
//   res[N] = runner.Wait(N)                  res[N] = runner.Wait(N)
//   scheduler.Update(out[N], res[N])         scheduler.Update(out[N], res[N])
//   emit, OnStepCompleted(N)                 emit, OnStepCompleted(N)
//
// In the overlapped loop the host work of step N (results, stops, stream events, scheduling
// N+2) happens while the runner computes N+1.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "cache/state_cache.h"
#include "engine/engine_client.h"
#include "model/model.h"
#include "runner/model_runner.h"
#include "scheduler/scheduler.h"

namespace deepinfer {

struct EngineOptions {
  std::string model_dir;
  std::string served_model_name;        // default: the model dir's last component
  LoadOptions load;
  int32_t max_num_seqs = 32;
  int32_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 0;            // 0: min(max_position_embeddings, 16384)
  int32_t block_size = 128;
  int32_t num_blocks = 0;               // 0: from cache_memory_mb
  int64_t cache_memory_mb = 256;        // slots, packs and paged blocks, when num_blocks is 0
  int32_t num_packs = 0;                // resume packs; 0: 2·max_num_seqs
  bool enable_prefix_caching = true;
  int32_t pack_interval_blocks = 16;
  bool async_scheduling = true;         // overlapped loop (false: synchronous)
  bool cuda_graphs = false;             // CUDA: decode steps as CUDA graphs (RunnerOptions)
  int32_t max_waiting_requests = 4096;  // Submit fails with kResourceExhausted beyond this
  int64_t sampleable_vocab = 0;         // 0: the model's vocab
  // Debugging.
  bool poison_released_blocks = false;
  bool check_integrity_every_step = false;
  int32_t preempt_every_n_steps = 0;
};

// Host timing of the loop, for the overlap benchmark.
struct LoopTiming {
  int64_t steps = 0;
  double loop_seconds = 0;       // wall time of all iterations that launched a step
  double host_seconds = 0;       // schedule + update + emit
  double runner_seconds = 0;     // runner busy time (copies + forward + sampling)
  double exposed_seconds = 0;    // wall time the runner sat idle between consecutive steps
  // GPU only, from events on the device's timeline: its busy time in steps and its idle time
  // between consecutive steps (0 on the CPU).
  double device_busy_seconds = 0;
  double device_idle_seconds = 0;
  // The same restricted to decode steps (every chunk one token): their count and device time.
  int64_t decode_steps = 0;
  double decode_device_busy_seconds = 0;
};

class EngineCore : public EngineClient {
 public:
  // Loads the model from options.model_dir and starts the loop thread.
  explicit EngineCore(EngineOptions options);
  ~EngineCore() override;

  Result<std::shared_ptr<RequestStream>> Submit(GenerationRequest request) override;
  void Abort(RequestId id) override;
  EngineStats Stats() const override;
  const EngineInfo& info() const override { return info_; }
  void Drain(std::chrono::milliseconds timeout) override;

  // Waits until the loop has nothing to do: every request finished and every release,
  // pack commit and step done (stats then show the idle cache). False on timeout.
  bool WaitIdle(std::chrono::milliseconds timeout);

  LoopTiming timing() const;
  const EngineOptions& options() const { return options_; }
  const Model& model() const { return *loaded_.model; }
  // Debug: the scheduler's and cache's integrity (only valid while idle).
  std::string CheckIntegrity() const;

 private:
  struct Request {
    RequestId id = 0;
    std::shared_ptr<RequestStream> stream;
    int32_t n = 1;
    int32_t finished = 0;
    std::vector<bool> seq_done;
    RequestUsage usage;
    double arrival = 0;
    bool first_token_sent = false;
    bool want_logprobs = false;
    bool aborted = false;
  };

  void Loop();
  void TakeIntake();
  void RunOneIteration();
  void Emit(const std::vector<SequenceUpdate>& updates);
  void FinishSequence(Request& r, int32_t index, FinishReason reason, StreamEvent& event);
  void PushAndMaybeClose(Request& r, StreamEvent event);
  void UpdateStats(double host_seconds, bool launched, double t0);

  EngineOptions options_;
  EngineInfo info_;
  LoadedModel loaded_;
  std::unique_ptr<cache::StateCacheManager> cache_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;

  // Intake, shared with client threads.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<Request>, GenerationRequest>> new_requests_ DI_GUARDED_BY(mu_);
  std::vector<RequestId> aborts_ DI_GUARDED_BY(mu_);
  int64_t num_queued_ DI_GUARDED_BY(mu_) = 0;  // submitted, not finished
  bool stop_ DI_GUARDED_BY(mu_) = false;
  bool draining_ DI_GUARDED_BY(mu_) = false;
  bool idle_ DI_GUARDED_BY(mu_) = true;
  bool abort_all_ DI_GUARDED_BY(mu_) = false;  // abort every request the loop knows
  RequestId next_id_ DI_GUARDED_BY(mu_) = 1;
  EngineStats stats_ DI_GUARDED_BY(mu_);
  LoopTiming timing_ DI_GUARDED_BY(mu_);

  // Loop thread only.
  std::unordered_map<RequestId, std::shared_ptr<Request>> requests_;
  std::deque<SchedulerOutput> in_flight_;
  double last_runner_finish_ = -1;
  std::thread thread_;
};

}  // namespace deepinfer
