#include "scheduler/scheduler.h"

#include <algorithm>
#include <fmt/format.h>

#include "base/error.h"

namespace deepinfer {

Scheduler::Scheduler(SchedulerConfig config, cache::StateCacheManager& cache)
    : config_(std::move(config)), cache_(cache) {}

Scheduler::Sequence& Scheduler::Get(SeqId id) {
  auto it = seqs_.find(id);
  DI_CHECK(it != seqs_.end(), "unknown sequence {}", id);
  return *it->second;
}

void Scheduler::Add(SequenceSpec spec) {
  DI_CHECK(!spec.prompt.empty(), "sequence {} has an empty prompt", spec.seq_id);
  DI_CHECK(!seqs_.count(spec.seq_id), "sequence {} added twice", spec.seq_id);
  auto s = std::make_unique<Sequence>();
  s->tokens = spec.prompt;
  s->prompt_len = static_cast<int64_t>(spec.prompt.size());
  s->cache.salt = cache_.SaltFor(spec.cache_salt);
  s->spec = std::move(spec);
  const SeqId id = s->spec.seq_id;
  seqs_.emplace(id, std::move(s));
  waiting_.push_back(id);
}

void Scheduler::MarkFinished(Sequence& s, FinishReason reason) {
  s.finish = reason;
  if (s.status == Status::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), s.spec.seq_id));
  } else if (s.status == Status::kWaiting) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s.spec.seq_id));
  }
  s.status = Status::kFinished;
  if (!s.release_pending) {
    s.release_pending = true;
    releasing_.push_back(s.spec.seq_id);
  }
}

bool Scheduler::Abort(SeqId seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end() || it->second->finish != FinishReason::kNone) return false;
  MarkFinished(*it->second, FinishReason::kAbort);
  return true;
}

void Scheduler::SaveEndPacks(SchedulerOutput& out) {
  // A resume pack at the end of a finished sequence: the next turn of a conversation resends
  // it as its prefix. Saved by the first step after the finish (its copy runs after every step
  // in flight), so a request arriving right away can already restore it in this step.
  for (SeqId id : releasing_) {
    Sequence& s = Get(id);
    if (!s.end_pack_pending) continue;
    s.end_pack_pending = false;
    if (s.cache.slot < 0 || s.num_computed <= 0 || s.num_computed > static_cast<int64_t>(s.tokens.size())) continue;
    cache_.CacheFullBlocks(s.cache, s.tokens, s.num_computed);
    if (auto pk = cache_.ReservePack(s.cache, s.tokens, s.num_computed, out.step_id)) {
      PackCopy copy{s.cache.slot, cache_.pack_slot(pk->pack), 0, pk->block};
      if (pk->block != cache::kNullBlock) copy.from_block = s.cache.blocks.at(s.num_computed / cache_.config().block_size);
      out.pre_copies.push_back(copy);
      pending_commits_.push_back({out.step_id, pk->pack});
    }
  }
}

void Scheduler::Release(Sequence& s, SchedulerOutput& out) {
  if (s.cache.slot >= 0) {
    cache_.CacheFullBlocks(s.cache, s.tokens, s.num_computed);
    std::vector<cache::BlockId> freed;
    cache_.Release(s.cache, config_.poison_released_blocks ? &freed : nullptr);
    out.poison_blocks.insert(out.poison_blocks.end(), freed.begin(), freed.end());
  }
  if (s.known_to_runner) out.finished_seq_ids.push_back(s.spec.seq_id);
  s.known_to_runner = false;
  s.runner_blocks = 0;
  s.release_pending = false;
  if (s.status == Status::kPreempted) {
    // Back to the front of the queue; everything is recomputed (or hit in the prefix cache).
    s.status = Status::kWaiting;
    s.num_computed = 0;
    waiting_.push_front(s.spec.seq_id);
  } else {
    seqs_.erase(s.spec.seq_id);
  }
}

void Scheduler::ReleaseReady(SchedulerOutput& out) {
  std::vector<SeqId> still;
  for (SeqId id : releasing_) {
    Sequence& s = Get(id);
    if (s.last_step < 0 || static_cast<uint64_t>(s.last_step) <= completed_step_) {
      Release(s, out);
    } else {
      still.push_back(id);
    }
  }
  releasing_.swap(still);
}

int64_t Scheduler::ChunkLength(const Sequence& s, int64_t budget) const {
  const int64_t total = static_cast<int64_t>(s.tokens.size()) + s.placeholders;
  int64_t n = std::min(total - s.num_computed, budget);
  // Prefill chunks stop at resume-pack points inside the prompt.
  const int64_t interval = static_cast<int64_t>(config_.pack_interval_blocks) * cache_.config().block_size;
  if (interval > 0 && cache_.config().enable_prefix_caching && s.num_computed < s.prompt_len) {
    const int64_t next_point = (s.num_computed / interval + 1) * interval;
    if (next_point < s.prompt_len) n = std::min(n, next_point - s.num_computed);
  }
  return n;
}

void Scheduler::AddChunk(Sequence& s, int64_t n, SchedulerOutput& out) {
  const int64_t total = static_cast<int64_t>(s.tokens.size()) + s.placeholders;
  ScheduledChunk c;
  c.seq_id = s.spec.seq_id;
  c.start_pos = s.num_computed;
  c.num_tokens = n;
  c.sample = s.num_computed + n == total;
  c.prompt_end = s.prompt_len;
  out.chunks.push_back(c);
  s.num_computed += n;
  if (c.sample) ++s.placeholders;
  s.last_step = static_cast<int64_t>(out.step_id);
  if (s.known_to_runner && s.cache.blocks.size() > s.runner_blocks) {
    out.diffs.push_back({s.spec.seq_id, std::vector<int32_t>(s.cache.blocks.begin() + s.runner_blocks, s.cache.blocks.end())});
  }
  s.runner_blocks = s.cache.blocks.size();
  cache_.CacheFullBlocks(s.cache, s.tokens, s.num_computed);
  // Packs at the prompt end and at the interval points the chunk was cut to.
  const int64_t interval = static_cast<int64_t>(config_.pack_interval_blocks) * cache_.config().block_size;
  const int64_t end = s.num_computed;
  const bool prompt_end = end == s.prompt_len && c.start_pos < s.prompt_len;
  if (prompt_end) s.prompt_done_step = static_cast<int64_t>(out.step_id);
  const bool interval_point = interval > 0 && end < s.prompt_len && end % interval == 0;
  if ((prompt_end || interval_point) && end <= static_cast<int64_t>(s.tokens.size())) {
    // A prompt-end pack also keeps the logits this chunk computes for its last token, so an
    // identical prompt can resume at the very end.
    const bool with_logits = prompt_end && c.sample;
    if (auto pk = cache_.ReservePack(s.cache, s.tokens, end, out.step_id + 1, with_logits)) {
      PackCopy copy{s.cache.slot, cache_.pack_slot(pk->pack), 0, pk->block};
      if (with_logits) copy.logits_of = s.spec.seq_id;
      if (pk->block != cache::kNullBlock) copy.from_block = s.cache.blocks.at(end / cache_.config().block_size);
      out.post_copies.push_back(copy);
      pending_commits_.push_back({out.step_id, pk->pack});
    }
  }
}

Scheduler::Sequence* Scheduler::Preempt(SchedulerOutput& out) {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    Sequence& v = Get(*it);
    if (v.last_step == static_cast<int64_t>(out.step_id)) continue;  // already in this step
    running_.erase(std::next(it).base());
    v.status = Status::kPreempted;
    v.prompt_done_step = -1;
    v.release_pending = true;
    releasing_.push_back(v.spec.seq_id);
    ++stats_.num_preemptions;
    // Released now if no step in flight touches it, else once that step completes.
    ReleaseReady(out);
    return &v;
  }
  return nullptr;
}

bool Scheduler::ScheduleRunning(Sequence& s, SchedulerOutput& out, int64_t& budget) {
  if (s.num_outputs + s.placeholders >= s.spec.sampling.max_tokens) return true;  // covered
  const int64_t n = ChunkLength(s, budget);
  if (n <= 0) return true;
  if (!cache_.EnsureBlocks(s.cache, s.num_computed + n)) {
    // One victim per shortage, the newest running sequence (possibly this one): with steps in
    // flight its blocks come back only once they complete, and preempting more now would not
    // help this step.
    const Sequence* victim = Preempt(out);
    if (victim == &s) return true;
    if (victim == nullptr || !cache_.EnsureBlocks(s.cache, s.num_computed + n)) return false;
  }
  AddChunk(s, n, out);
  budget -= n;
  return true;
}

bool Scheduler::Admit(Sequence& s, SchedulerOutput& out, int64_t& budget) {
  const int64_t known = static_cast<int64_t>(s.tokens.size());
  const auto hit = cache_.Admit(s.cache, s.tokens, out.step_id);
  if (!hit) return false;
  s.num_computed = hit->num_tokens;
  s.placeholders = 0;
  const bool whole = hit->num_tokens == known;  // sampled from the pack's logits, no forward
  const int64_t n = whole ? 0 : ChunkLength(s, budget);
  if (!cache_.EnsureBlocks(s.cache, s.num_computed + n)) {
    if (hit->pack >= 0) cache_.ReleasePackRef(hit->pack);
    cache_.Release(s.cache);
    s.num_computed = 0;
    return false;
  }
  if (!s.admitted_once) {
    s.admitted_once = true;
    s.cached_prompt_tokens = std::min(hit->num_tokens, s.prompt_len);
    stats_.prompt_tokens += s.prompt_len;
    stats_.cached_prompt_tokens += s.cached_prompt_tokens;
  }
  NewSequence ns;
  ns.seq_id = s.spec.seq_id;
  ns.tokens = s.tokens;
  ns.prompt_len = s.prompt_len;
  ns.sampling = s.spec.sampling;
  ns.rng_seed = s.spec.rng_seed;
  ns.slot = s.cache.slot;
  ns.block_ids.assign(s.cache.blocks.begin(), s.cache.blocks.end());
  ns.num_computed_tokens = hit->num_tokens;
  if (hit->pack >= 0) {
    ns.reset_slot = false;
    ns.restore = {cache_.pack_slot(hit->pack), s.cache.slot, hit->pack_block, hit->target_block};
    pending_pack_refs_.push_back({out.step_id, hit->pack});
  }
  out.new_seqs.push_back(std::move(ns));
  s.known_to_runner = true;
  s.runner_blocks = s.cache.blocks.size();
  s.status = Status::kRunning;
  running_.push_back(s.spec.seq_id);
  if (whole) {
    out.pack_samples.push_back({s.spec.seq_id, cache_.pack_slot(hit->pack)});
    ++s.placeholders;
    s.last_step = static_cast<int64_t>(out.step_id);
    return true;
  }
  AddChunk(s, n, out);
  budget -= n;
  return true;
}

bool Scheduler::WaitsForSibling(const Sequence& s, uint64_t step) const {
  if (s.spec.same_prompt_as == 0 || !cache_.config().enable_prefix_caching || s.admitted_once) return false;
  auto it = seqs_.find(s.spec.same_prompt_as);
  if (it == seqs_.end()) return false;
  // The sibling's prompt-end pack is restorable from the step after its last prefill chunk.
  const int64_t done = it->second->prompt_done_step;
  return done < 0 || static_cast<uint64_t>(done) >= step;
}

SchedulerOutput Scheduler::Schedule() {
  SchedulerOutput out;
  out.step_id = next_step_++;
  SaveEndPacks(out);
  ReleaseReady(out);
  if (config_.preempt_every_n_steps > 0 && out.step_id % config_.preempt_every_n_steps == 0 &&
      running_.size() > 1) {
    Preempt(out);
  }
  int64_t budget = config_.max_num_batched_tokens;
  const std::vector<SeqId> running = running_;  // preemption may shrink running_
  for (SeqId id : running) {
    if (budget <= 0) break;
    auto it = seqs_.find(id);
    if (it == seqs_.end() || it->second->status != Status::kRunning) continue;
    if (!ScheduleRunning(*it->second, out, budget)) break;
  }
  for (size_t i = 0; i < waiting_.size() && budget > 0 &&
                     static_cast<int32_t>(running_.size()) < config_.max_num_seqs;) {
    Sequence& s = Get(waiting_[i]);
    if (WaitsForSibling(s, out.step_id)) {
      ++i;
      continue;
    }
    if (!Admit(s, out, budget)) break;
    waiting_.erase(waiting_.begin() + static_cast<long>(i));
  }
  for (cache::BlockId b : cache_.TakeEvicted()) {
    if (config_.poison_released_blocks) out.poison_blocks.push_back(b);
  }
  return out;
}

FinishReason Scheduler::StopReason(const Sequence& s, TokenId token) const {
  const SamplingParams& p = s.spec.sampling;
  const bool may_stop = s.num_outputs >= p.min_tokens;
  if (may_stop && !p.ignore_eos &&
      std::find(config_.eos_token_ids.begin(), config_.eos_token_ids.end(), token) != config_.eos_token_ids.end()) {
    return FinishReason::kStop;
  }
  if (may_stop && std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end()) {
    return FinishReason::kStop;
  }
  if (s.num_outputs >= p.max_tokens) return FinishReason::kLength;
  if (static_cast<int64_t>(s.tokens.size()) >= config_.max_model_len) return FinishReason::kLength;
  return FinishReason::kNone;
}

std::vector<SequenceUpdate> Scheduler::Update(const SchedulerOutput& out, const StepResult& result) {
  DI_CHECK(out.step_id == result.step_id, "update of step {} with the result of step {}", out.step_id, result.step_id);
  std::vector<SequenceUpdate> updates;
  for (const SampledToken& st : result.sampled) {
    auto it = seqs_.find(st.seq_id);
    if (it == seqs_.end()) continue;  // released already (cannot happen while in flight)
    Sequence& s = *it->second;
    if (s.placeholders > 0) --s.placeholders;
    if (s.status == Status::kFinished) continue;  // the token after a stop: discarded
    s.tokens.push_back(st.token);
    ++s.num_outputs;
    SequenceUpdate u;
    u.seq_id = st.seq_id;
    u.sampled = st;
    u.finish = StopReason(s, st.token);
    if (u.finish != FinishReason::kNone) {
      MarkFinished(s, u.finish);
      s.end_pack_pending = true;
    }
    updates.push_back(std::move(u));
  }
  return updates;
}

void Scheduler::OnStepCompleted(uint64_t step_id) {
  completed_step_ = std::max(completed_step_, step_id);
  auto drain = [&](std::vector<PendingPack>& list, bool commit) {
    std::vector<PendingPack> keep;
    for (const PendingPack& p : list) {
      if (p.step > completed_step_) {
        keep.push_back(p);
      } else if (commit) {
        cache_.CommitPack(p.pack);
      } else {
        cache_.ReleasePackRef(p.pack);
      }
    }
    list.swap(keep);
  };
  drain(pending_commits_, true);
  drain(pending_pack_refs_, false);
}

bool Scheduler::HasUnfinished() const { return !waiting_.empty() || !running_.empty(); }
bool Scheduler::HasPendingRelease() const {
  return !releasing_.empty() || !pending_commits_.empty() || !pending_pack_refs_.empty();
}

int64_t Scheduler::CachedPromptTokens(SeqId seq_id) const {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? 0 : it->second->cached_prompt_tokens;
}

int64_t Scheduler::NumOutputTokens(SeqId seq_id) const {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? 0 : it->second->num_outputs;
}

SchedulerStats Scheduler::Stats() const {
  SchedulerStats s = stats_;
  s.num_running = static_cast<int64_t>(running_.size());
  s.num_waiting = static_cast<int64_t>(waiting_.size());
  return s;
}

std::string Scheduler::CheckIntegrity() const {
  std::vector<const cache::SequenceCache*> live;
  for (const auto& [id, s] : seqs_) {
    live.push_back(&s->cache);
    if (s->placeholders < 0) return fmt::format("sequence {} has negative placeholders", id);
    const int64_t total = static_cast<int64_t>(s->tokens.size()) + s->placeholders;
    if (s->num_computed > total) return fmt::format("sequence {} computed {} of {} tokens", id, s->num_computed, total);
    const bool holds_state = s->cache.slot >= 0;
    if (s->status == Status::kRunning && !holds_state) return fmt::format("running sequence {} has no slot", id);
    if (s->status == Status::kWaiting && holds_state) return fmt::format("waiting sequence {} holds state", id);
    if (holds_state && cache_.BlocksFor(s->num_computed) > static_cast<int32_t>(s->cache.blocks.size())) {
      return fmt::format("sequence {} covers {} tokens with {} blocks", id, s->num_computed, s->cache.blocks.size());
    }
  }
  if (static_cast<int32_t>(running_.size()) > config_.max_num_seqs) return "too many running sequences";
  for (SeqId id : running_) {
    if (!seqs_.count(id) || seqs_.at(id)->status != Status::kRunning) return fmt::format("running list holds {}", id);
  }
  for (SeqId id : waiting_) {
    if (!seqs_.count(id) || seqs_.at(id)->status != Status::kWaiting) return fmt::format("waiting list holds {}", id);
  }
  return cache_.CheckIntegrity(live);
}

}  // namespace deepinfer
