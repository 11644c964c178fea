// ModelRunner: turns SchedulerOutputs into forwards and sampled tokens on one device.
//
// Steps run strictly in launch order on the runner's own thread (the CPU backend's "stream"),
// so Launch(N+1) returns at once while step N may still run, and step N+1's inputs can use the
// tokens step N sampled without a round trip through the scheduler: the runner keeps a mirror
// of every sequence (tokens, sampling parameters, slot, block table), built from the full data
// of NewSequence and the diffs after it, and appends each token it samples to that mirror.
//
// On a CUDA device the runner's thread only queues work: step N's forward and sampling go on the
// device's stream, its sampled ids are copied to page-locked memory on a side stream, and the
// thread queues step N+1 (whose inputs take step N's tokens from device memory) before it waits
// for step N's ids. Two steps are in flight at most; the only waits are for the step whose
// results are being returned (and, when a sequence with repetition/presence/frequency penalties
// needs its full history on the host, for the step before).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
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
  // CUDA: decode steps (every sequence one token) run as CUDA graphs, captured when the runner
  // starts, one per batch bucket (powers of two up to num_slots) and step parity; a batch is
  // padded to its bucket with sequences on a reserved slot and block. Other steps run eagerly.
  bool cuda_graphs = false;
  int64_t max_model_len = 0;  // with cuda_graphs: the context bound the graphs are captured for
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
    // CUDA: tokens sampled on the device whose steps have not finished yet (appended to `tokens`
    // when they do); the newest is row `last_row` of the sampled ids of device step `last_step`.
    int32_t pending = 0;
    int32_t last_row = -1;
    uint64_t last_step = 0;
    uint64_t generation = 0;  // distinct per NewSequence: results of older steps skip a re-added id
  };
  // A step queued on the device whose results have not been read back yet.
  struct DeviceStep {
    StepResult result;
    uint64_t number = 0;             // queue order, from 1
    uint64_t callback = 0;           // index of its host callback (device_steps_landed_ reaches it)
    std::vector<SeqId> rows;         // the sequence of each sampled row
    std::vector<uint64_t> generations;  // and its mirror's generation
    std::vector<int32_t> logprobs;   // per row: SamplingParams::logprobs
  };
  struct DeviceIo;  // the CUDA path's buffers (model_runner_device.cpp)
  struct Outcome {
    StepResult result;
    std::exception_ptr error;
  };

  void WorkerLoop();
  void Post(uint64_t step_id, Outcome outcome);
  // Mirror bookkeeping at the start of a step: finished sequences, pre-step copies, poisoned
  // blocks, new sequences, block-table diffs.
  void BeginStep(const SchedulerOutput& out);
  // The forward's view of chunk `c` of sequence `m`, its tokens at `token_offset` of the step's;
  // checks that the runner knows (or has in flight on the device) every token the chunk covers.
  static SequenceChunk ChunkFor(const ScheduledChunk& c, const SequenceMirror& m, int64_t token_offset);
  StepResult Execute(const SchedulerOutput& out);
  // The CUDA path (model_runner_device.cpp).
  void DeviceWorkerLoop();
  DeviceStep Enqueue(const SchedulerOutput& out, const std::function<void()>& finish_previous);
  StepResult Finish(DeviceStep& step);
  float* DevicePackLogits(int32_t pack_slot);
  static void OnDeviceStepLanded(void* runner);
  // CUDA graphs: pads a decode batch of `ids.size()` sequences to `bucket` with sequences at
  // position 0 on the reserved slot and block, and fixes its launch shapes (static_max_context).
  void PadDecodeBatch(ForwardBatch& batch, std::vector<int32_t>& ids, int64_t bucket) const;
  // CUDA graphs: per batch bucket (powers of two up to num_slots) and parity, one eager decode step
  // of padding sequences (the workspace takes its final shape), then the same step captured.
  void CaptureDecodeGraphs();
  void ApplyCopies(const std::vector<PackCopy>& copies);
  SampledToken SampleFor(SeqId id, float* logits);
  float* PackLogits(int32_t pack_slot);

  const Model& model_;
  RunnerOptions options_;
  std::unique_ptr<DeviceStepTimer> device_timer_;  // GPU models only (worker thread)
  std::unique_ptr<ModelState> state_;
  std::unique_ptr<DeviceIo> device_io_;  // CUDA models only (used by the worker thread)
  std::unordered_map<SeqId, SequenceMirror> seqs_;  // worker thread only
  uint64_t next_generation_ = 1;                     // worker thread only
  int32_t padding_block_ = 0;  // CUDA graphs: the block of the sequences that pad decode batches
  // Logits of the last position of prompt-end packs, [num_pack_slots, vocab] (worker only).
  std::vector<float> pack_logits_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SchedulerOutput> queue_ DI_GUARDED_BY(mu_);
  std::map<uint64_t, Outcome> done_ DI_GUARDED_BY(mu_);
  bool stop_ DI_GUARDED_BY(mu_) = false;
  uint64_t device_steps_landed_ DI_GUARDED_BY(mu_) = 0;  // CUDA: steps whose results reached the host
  std::thread worker_;
};

}  // namespace deepinfer
