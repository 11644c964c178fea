// What the scheduler hands the runner each step, and what the runner hands back. Plain data:
// full sequence data the first time the runner sees a sequence, then only diffs.
#pragma once

#include <cstdint>
#include <vector>

#include "core/sampling_params.h"
#include "core/types.h"

namespace deepinfer {

using SeqId = uint64_t;  // one of a request's n sequences

// Copies the runner performs around a step's forward, on the sequence state it owns.
struct PackCopy {
  int32_t from_slot = -1;   // state slot (sequence or pack) copied from
  int32_t to_slot = -1;
  int32_t from_block = 0;   // partial block copied along (0: none)
  int32_t to_block = 0;
  // Saves only: also keep the logits this step computed for sequence `logits_of` (0: none),
  // so a later identical prompt can sample its first token without recomputing the last one.
  SeqId logits_of = 0;
};

// A sequence whose whole prompt was restored from a pack that carries logits: its first token
// is sampled from those logits (after the restore), with no forward for it.
struct PackSample {
  SeqId seq_id = 0;
  int32_t pack_slot = -1;
};

struct NewSequence {
  SeqId seq_id = 0;
  TokenIds tokens;              // every token id known now (prompt + confirmed outputs)
  int64_t prompt_len = 0;
  SamplingParams sampling;
  uint64_t rng_seed = 0;        // counter-based: draw i of this sequence uses (rng_seed, i)
  int32_t slot = -1;
  std::vector<int32_t> block_ids;
  int64_t num_computed_tokens = 0;  // state already covers this many tokens (prefix hit)
  bool reset_slot = true;           // clear the slot before use (false when restored)
  PackCopy restore;                 // from a pack (from_slot >= 0), applied before the step
};

struct SequenceDiff {
  SeqId seq_id = 0;
  std::vector<int32_t> new_block_ids;  // appended to the block table
};

struct ScheduledChunk {
  SeqId seq_id = 0;
  int64_t start_pos = 0;
  int64_t num_tokens = 0;
  bool sample = false;        // the chunk ends at the sequence's last known/in-flight token
  int64_t prompt_end = 0;     // the sequence's prompt length (SequenceChunk::prompt_end)
};

struct SchedulerOutput {
  uint64_t step_id = 0;
  std::vector<SeqId> finished_seq_ids;  // the runner forgets these before anything else
  std::vector<PackCopy> pre_copies;     // before the forward (saves of finished sequences)
  std::vector<int32_t> poison_blocks;   // debug: blocks just released, overwritten with NaN
  std::vector<NewSequence> new_seqs;
  std::vector<SequenceDiff> diffs;
  std::vector<ScheduledChunk> chunks;   // batch order
  std::vector<PackSample> pack_samples;
  std::vector<PackCopy> post_copies;    // after the forward (packs at prompt ends, every K blocks)

  int64_t num_tokens() const {
    int64_t n = 0;
    for (const auto& c : chunks) n += c.num_tokens;
    return n;
  }
  bool has_work() const { return !chunks.empty() || !pack_samples.empty(); }
  bool empty() const {
    return chunks.empty() && pack_samples.empty() && finished_seq_ids.empty() && pre_copies.empty() &&
           new_seqs.empty() && poison_blocks.empty() && post_copies.empty();
  }
};

struct TopToken {
  TokenId token = 0;
  float logprob = 0.f;
};

struct SampledToken {
  SeqId seq_id = 0;
  TokenId token = 0;
  float logprob = 0.f;            // of the sampled token (raw model distribution)
  std::vector<TopToken> top;      // when the sequence asked for logprobs
};

struct StepResult {
  uint64_t step_id = 0;
  std::vector<SampledToken> sampled;
  double forward_seconds = 0;     // runner time for the step (copies + forward + sampling)
  double started_at = 0;          // NowSeconds() when the runner began the step
  double finished_at = 0;
  // On a GPU, from events on the device's timeline (negative: not measured): the step's device
  // time, and the device's idle time between the previous step's end and this step's start.
  double device_busy_seconds = -1;
  double device_idle_before_seconds = -1;
  bool cuda_graph = false;  // the forward ran as a replayed CUDA graph
};

}  // namespace deepinfer
