// ModelRunner: turns SchedulerOutputs into forwards and sampled tokens on one device.
//
// Steps run strictly in launch order on the runner's own thread (the CPU backend's "stream"),
// so Launch(N+1) returns at once while step N may still run, and step N+1's inputs can use the
// tokens step N sampled without a round trip through the scheduler: the runner keeps a mirror
// of every sequence (tokens, sampling parameters, slot, block table), built from the full data
// of NewSequence and the diffs after it, and appends each token it samples to that mirror.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/thread_annotations.h"
#include "core/scheduler_output.h"
#include "model/model.h"
#include "runner/device_step_timer.h"

namespace deepinfer {

struct RunnerOptions {
  int32_t num_slots = 0;       // running sequences
  int32_t num_pack_slots = 0;  // resume packs (slots num_slots ...)
  int32_t num_blocks = 0;      // including the null block
  int32_t block_size = 128;
  int32_t max_step_tokens = 0;  // tokens one step may carry (sizes the model's per-step state rows)
  std::vector<TokenId> eos_token_ids;
  int64_t sampleable_vocab = 0;  // ids at or above are never sampled (0: the model's vocab)
};

class ModelRunner {
 public:
  ModelRunner(const Model& model, RunnerOptions options);
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  // Queues a step; returns immediately.
  void Launch(SchedulerOutput out);
  // Blocks until step `step_id` (launched) has finished. A step that failed rethrows here.
  StepResult Wait(uint64_t step_id);

  size_t state_bytes() const { return state_->bytes(); }
  const ModelState& state() const { return *state_; }

 private:
  struct SequenceMirror {
    TokenIds tokens;
    int64_t prompt_len = 0;
    SamplingParams sampling;
    uint64_t rng_seed = 0;
    int32_t slot = -1;
    std::vector<int32_t> blocks;
  };
  struct Outcome {
    StepResult result;
    std::exception_ptr error;
  };

  void WorkerLoop();
  StepResult Execute(const SchedulerOutput& out);
  void ApplyCopies(const std::vector<PackCopy>& copies);
  SampledToken SampleFor(SeqId id, float* logits);
  float* PackLogits(int32_t pack_slot);

  const Model& model_;
  RunnerOptions options_;
  std::unique_ptr<DeviceStepTimer> device_timer_;  // GPU models only (worker thread)
  std::unique_ptr<ModelState> state_;
  std::unordered_map<SeqId, SequenceMirror> seqs_;  // worker thread only
  // Logits of the last position of prompt-end packs, [num_pack_slots, vocab] (worker only).
  std::vector<float> pack_logits_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SchedulerOutput> queue_ DI_GUARDED_BY(mu_);
  std::map<uint64_t, Outcome> done_ DI_GUARDED_BY(mu_);
  bool stop_ DI_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace deepinfer
