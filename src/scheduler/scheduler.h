// Token-budget scheduler (vLLM style) with in-flight bookkeeping for the overlapped step loop
// (ARCHITECTURE.md §3, §5).
//
// Every sequence's computed tokens chase its tokens (prompt + outputs + in-flight
// placeholders) under a per-step token budget and a cap on running sequences: running
// sequences first (decodes, unfinished prefills), then waiting ones; long prompts are chunked,
// and chunks end at resume-pack points (every pack_interval_blocks blocks and the prompt end).
// When blocks run out the newest running sequence is preempted (its state freed, recomputed
// later).
//
// Overlap: Schedule(N+1) may run before Update(N). A sequence scheduled to sample in step N
// holds a placeholder until N's token arrives; step N+1 already feeds that token (the runner
// reads it on its side). Stops found in Update(N) finish the sequence one step late: the token
// its step N+1 samples is discarded. A finished, aborted or preempted sequence's slot and
// blocks are released only once every step that touches it has completed (OnStepCompleted).
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/state_cache.h"
#include "core/scheduler_output.h"
#include "core/finish_reason.h"

namespace deepinfer {

struct SchedulerConfig {
  int32_t max_num_seqs = 64;
  int32_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 4096;
  int32_t pack_interval_blocks = 16;  // a resume pack every K full blocks of a prefill (0: off)
  std::vector<TokenId> eos_token_ids;
  bool poison_released_blocks = false;  // debug: the runner overwrites released blocks
  int32_t preempt_every_n_steps = 0;    // debug: force a preemption every N steps (0: off)
};

// A sequence to schedule (one of a request's n).
struct SequenceSpec {
  SeqId seq_id = 0;
  TokenIds prompt;
  SamplingParams sampling;
  uint64_t rng_seed = 0;
  std::string cache_salt;
  // Another sequence with the same prompt (sibling 0 of an n > 1 request), or 0. With prefix
  // caching this one waits until that one's prompt is computed, then restores its pack
  // instead of computing the prompt again.
  SeqId same_prompt_as = 0;
};

// What Update reports per sampled token.
struct SequenceUpdate {
  SeqId seq_id = 0;
  SampledToken sampled;
  FinishReason finish = FinishReason::kNone;
};

struct SchedulerStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  int64_t num_preemptions = 0;
  int64_t prompt_tokens = 0;         // over admitted sequences (first admission)
  int64_t cached_prompt_tokens = 0;  // of those, served from the prefix cache
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, cache::StateCacheManager& cache);

  void Add(SequenceSpec spec);
  // Finishes a sequence with FinishReason::kAbort now; its state is released once no step in
  // flight uses it. Returns false if the sequence is unknown or already finished.
  bool Abort(SeqId seq_id);

  SchedulerOutput Schedule();
  std::vector<SequenceUpdate> Update(const SchedulerOutput& out, const StepResult& result);
  // Every effect of `step_id` (its copies and forward) is done.
  void OnStepCompleted(uint64_t step_id);

  bool HasUnfinished() const;   // waiting or running sequences
  bool HasPendingRelease() const;
  // Tokens of the prompt served from the prefix cache on the sequence's first admission.
  int64_t CachedPromptTokens(SeqId seq_id) const;
  int64_t NumOutputTokens(SeqId seq_id) const;
  SchedulerStats Stats() const;
  const cache::StateCacheManager& cache() const { return cache_; }

  // Recounts sequences, slots and blocks; "" if consistent.
  std::string CheckIntegrity() const;

 private:
  enum class Status { kWaiting, kRunning, kPreempted, kFinished };
  struct Sequence {
    SequenceSpec spec;
    TokenIds tokens;             // prompt + confirmed outputs
    int64_t prompt_len = 0;
    int64_t num_outputs = 0;     // confirmed
    int32_t placeholders = 0;    // sampled in flight, not yet confirmed
    int64_t num_computed = 0;    // tokens the state covers once scheduled steps complete
    cache::SequenceCache cache;
    Status status = Status::kWaiting;
    FinishReason finish = FinishReason::kNone;
    bool known_to_runner = false;
    size_t runner_blocks = 0;    // block-table entries the runner has
    int64_t last_step = -1;      // last step that includes it
    bool admitted_once = false;
    int64_t cached_prompt_tokens = 0;
    bool release_pending = false;
    bool end_pack_pending = false;  // finished normally: save a pack at its end
    int64_t prompt_done_step = -1;  // step of its last prefill chunk (-1: not yet)
  };
  struct PendingPack {
    uint64_t step = 0;
    int32_t pack = -1;
  };

  Sequence& Get(SeqId id);
  void SaveEndPacks(SchedulerOutput& out);
  void ReleaseReady(SchedulerOutput& out);
  void Release(Sequence& s, SchedulerOutput& out);
  bool ScheduleRunning(Sequence& s, SchedulerOutput& out, int64_t& budget);
  bool Admit(Sequence& s, SchedulerOutput& out, int64_t& budget);
  bool WaitsForSibling(const Sequence& s, uint64_t step) const;
  int64_t ChunkLength(const Sequence& s, int64_t budget) const;
  void AddChunk(Sequence& s, int64_t n, SchedulerOutput& out);
  // Preempts the newest running sequence not already in this step; returns it (or null).
  Sequence* Preempt(SchedulerOutput& out);
  void MarkFinished(Sequence& s, FinishReason reason);
  FinishReason StopReason(const Sequence& s, TokenId token) const;

  SchedulerConfig config_;
  cache::StateCacheManager& cache_;
  std::unordered_map<SeqId, std::unique_ptr<Sequence>> seqs_;
  std::deque<SeqId> waiting_;
  std::vector<SeqId> running_;       // admission order; preemption takes from the back
  std::vector<SeqId> releasing_;     // finished/preempted, waiting for their steps
  std::vector<PendingPack> pending_commits_;
  std::vector<PendingPack> pending_pack_refs_;
  uint64_t next_step_ = 1;
  uint64_t completed_step_ = 0;
  SchedulerStats stats_;
};

}  // namespace deepinfer
