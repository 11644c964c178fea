#include "engine/engine_core.h"

#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <utility>
#include <fmt/format.h>

#include "base/logging.h"
#include "base/math.h"
#include "base/timer.h"

namespace deepinfer {

namespace {
constexpr SeqId kSeqsPerRequest = 32;  // > kMaxN
SeqId SeqIdOf(RequestId r, int32_t index) { return r * kSeqsPerRequest + static_cast<SeqId>(index); }
RequestId RequestOf(SeqId s) { return s / kSeqsPerRequest; }
int32_t IndexOf(SeqId s) { return static_cast<int32_t>(s % kSeqsPerRequest); }
}  // namespace

EngineCore::EngineCore(EngineOptions options) : options_(std::move(options)) {
  loaded_ = LoadModel(options_.model_dir, options_.load);
  const ModelConfig& c = loaded_.model->config();
  if (options_.max_model_len <= 0) options_.max_model_len = std::min<int64_t>(c.max_position_embeddings, 16384);
  if (options_.num_packs <= 0) options_.num_packs = options_.enable_prefix_caching ? 2 * options_.max_num_seqs : 0;
  const int64_t block_bytes = static_cast<int64_t>(loaded_.model->BytesPerBlock(options_.block_size));
  const int64_t slot_bytes = static_cast<int64_t>(loaded_.model->BytesPerSlot(options_.block_size));
  const int64_t min_blocks = DivCeil<int64_t>(options_.max_model_len, options_.block_size) + options_.num_packs + 2;
  if (options_.num_blocks <= 0) {
    const int64_t budget = options_.cache_memory_mb * (1 << 20) - slot_bytes * (options_.max_num_seqs + options_.num_packs);
    options_.num_blocks = static_cast<int32_t>(std::max<int64_t>(budget / std::max<int64_t>(block_bytes, 1), 0));
  }
  if (options_.num_blocks < min_blocks) {
    DI_THROW("state cache too small: {} blocks of {} tokens, but one {}-token sequence plus {} resume packs "
             "need {}; raise the cache memory or lower --max-model-len",
             options_.num_blocks, options_.block_size, options_.max_model_len, options_.num_packs, min_blocks);
  }

  cache::CacheConfig cc;
  cc.num_blocks = options_.num_blocks;
  cc.block_size = options_.block_size;
  cc.num_slots = options_.max_num_seqs;
  cc.num_packs = options_.num_packs;
  cc.enable_prefix_caching = options_.enable_prefix_caching;
  const std::string salt_text = c.architecture + "|" + c.source + "|" + options_.load.load_format;
  cc.model_salt = XXH3_64bits(salt_text.data(), salt_text.size());
  cache_ = std::make_unique<cache::StateCacheManager>(cc);

  SchedulerConfig sc;
  sc.max_num_seqs = options_.max_num_seqs;
  sc.max_num_batched_tokens = options_.max_num_batched_tokens;
  sc.max_model_len = options_.max_model_len;
  sc.pack_interval_blocks = options_.pack_interval_blocks;
  sc.eos_token_ids = c.eos_token_ids;
  sc.poison_released_blocks = options_.poison_released_blocks;
  sc.preempt_every_n_steps = options_.preempt_every_n_steps;
  scheduler_ = std::make_unique<Scheduler>(sc, *cache_);

  RunnerOptions ro;
  ro.num_slots = options_.max_num_seqs;
  ro.num_pack_slots = options_.num_packs;
  ro.num_blocks = options_.num_blocks;
  ro.block_size = options_.block_size;
  ro.max_step_tokens = std::max(options_.max_num_batched_tokens, options_.max_num_seqs);
  ro.eos_token_ids = c.eos_token_ids;
  ro.sampleable_vocab = options_.sampleable_vocab;
  ro.cuda_graphs = options_.cuda_graphs;
  ro.max_model_len = options_.max_model_len;
  runner_ = std::make_unique<ModelRunner>(*loaded_.model, ro);

  info_.model_dir = options_.model_dir;
  info_.model_name = !options_.served_model_name.empty()
                         ? options_.served_model_name
                         : std::filesystem::path(options_.model_dir).filename().string();
  if (info_.model_name.empty()) info_.model_name = std::filesystem::path(options_.model_dir).parent_path().filename().string();
  info_.max_model_len = options_.max_model_len;
  info_.vocab_size = c.vocab_size;
  info_.eos_token_ids = c.eos_token_ids;
  info_.block_size = options_.block_size;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.num_blocks_total = options_.num_blocks - 1;
    stats_.num_slots_total = options_.max_num_seqs;
  }
  DI_LOG_INFO("engine: {} ({} mode), {} blocks x {} tokens, {} slots, {} packs, state {:.1f} MiB",
              info_.model_name, options_.async_scheduling ? "overlapped" : "synchronous", options_.num_blocks,
              options_.block_size, options_.max_num_seqs, options_.num_packs,
              static_cast<double>(runner_->state_bytes()) / (1 << 20));
  thread_ = std::thread([this] { Loop(); });
}

EngineCore::~EngineCore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
    abort_all_ = true;
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Result<std::shared_ptr<RequestStream>> EngineCore::Submit(GenerationRequest request) {
  if (Status s = request.sampling.Validate(); !s.ok()) return s;
  if (request.prompt.empty()) return InvalidArgument("the prompt is empty");
  for (TokenId t : request.prompt) {
    if (t < 0 || t >= info_.vocab_size) {
      return InvalidArgument(fmt::format("prompt token id {} is outside the vocabulary [0, {})", t, info_.vocab_size));
    }
  }
  const int64_t needed = static_cast<int64_t>(request.prompt.size()) + request.sampling.max_tokens;
  if (needed > info_.max_model_len) {
    return OutOfRange(fmt::format("this model's maximum context length is {} tokens; the prompt has {} tokens "
                                  "and max_tokens is {} ({} in all)",
                                  info_.max_model_len, request.prompt.size(), request.sampling.max_tokens, needed));
  }
  auto req = std::make_shared<Request>();
  req->n = request.sampling.n;
  req->seq_done.assign(static_cast<size_t>(req->n), false);
  req->usage.prompt_tokens = static_cast<int64_t>(request.prompt.size());
  req->arrival = NowSeconds();
  req->want_logprobs = request.sampling.logprobs >= 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_) return Status(StatusCode::kUnavailable, "the engine is shutting down");
    if (num_queued_ >= options_.max_waiting_requests) {
      return ResourceExhausted(fmt::format("too many requests in flight ({}); retry later", num_queued_));
    }
    req->id = next_id_++;
    req->stream = std::make_shared<RequestStream>(req->id);
    ++num_queued_;
    idle_ = false;
    new_requests_.emplace_back(req, std::move(request));
  }
  cv_.notify_all();
  return req->stream;
}

void EngineCore::Abort(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.push_back(id);
  }
  cv_.notify_all();
}

void EngineCore::TakeIntake() {
  std::deque<std::pair<std::shared_ptr<Request>, GenerationRequest>> fresh;
  std::vector<RequestId> aborts;
  bool abort_all = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fresh.swap(new_requests_);
    aborts.swap(aborts_);
    abort_all = std::exchange(abort_all_, false);
  }
  for (auto& [req, gen] : fresh) {
    requests_[req->id] = req;
    for (int32_t i = 0; i < req->n; ++i) {
      SequenceSpec spec;
      spec.seq_id = SeqIdOf(req->id, i);
      spec.prompt = gen.prompt;
      spec.sampling = gen.sampling;
      spec.cache_salt = gen.cache_salt;
      const uint64_t base = gen.sampling.seed ? *gen.sampling.seed
                                              : XXH3_64bits_withSeed(&req->id, sizeof(req->id), static_cast<uint64_t>(NowNanos()));
      spec.rng_seed = base + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
      if (i > 0) spec.same_prompt_as = SeqIdOf(req->id, 0);
      scheduler_->Add(std::move(spec));
    }
  }
  if (abort_all) {
    for (const auto& [id, _] : requests_) aborts.push_back(id);
  }
  for (RequestId id : aborts) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    Request& r = *it->second;
    StreamEvent event;
    for (int32_t i = 0; i < r.n; ++i) {
      if (r.seq_done[i]) continue;
      if (r.usage.cached_prompt_tokens == 0 && i == 0) {
        r.usage.cached_prompt_tokens = scheduler_->CachedPromptTokens(SeqIdOf(r.id, 0));
      }
      scheduler_->Abort(SeqIdOf(r.id, i));
      FinishSequence(r, i, FinishReason::kAbort, event);
    }
    PushAndMaybeClose(r, std::move(event));
  }
}

void EngineCore::FinishSequence(Request& r, int32_t index, FinishReason reason, StreamEvent& event) {
  if (r.seq_done[index]) return;
  r.seq_done[index] = true;
  ++r.finished;
  auto it = std::find_if(event.deltas.begin(), event.deltas.end(), [&](const SequenceDelta& d) { return d.index == index; });
  if (it == event.deltas.end()) {
    event.deltas.push_back(SequenceDelta{});
    it = std::prev(event.deltas.end());
    it->index = index;
  }
  it->finish = reason;
  r.aborted |= reason == FinishReason::kAbort;
}

void EngineCore::PushAndMaybeClose(Request& r, StreamEvent event) {
  if (r.finished == r.n) {
    event.done = true;
    event.usage = r.usage;
  }
  const bool done = event.done;
  if (!event.deltas.empty() || done) r.stream->Push(std::move(event));
  if (done) {
    const RequestId id = r.id;
    const bool aborted = r.aborted;
    std::lock_guard<std::mutex> lock(mu_);
    --num_queued_;
    ++stats_.requests_finished;
    if (aborted) ++stats_.requests_aborted;
    cv_.notify_all();
    requests_.erase(id);  // last: `r` is owned by the map
  }
}

void EngineCore::Emit(const std::vector<SequenceUpdate>& updates) {
  std::unordered_map<RequestId, StreamEvent> events;
  const double now = NowSeconds();
  int64_t generated = 0;
  for (const SequenceUpdate& u : updates) {
    auto it = requests_.find(RequestOf(u.seq_id));
    if (it == requests_.end()) continue;
    Request& r = *it->second;
    const int32_t index = IndexOf(u.seq_id);
    if (r.seq_done[index]) continue;
    StreamEvent& event = events[r.id];
    auto d = std::find_if(event.deltas.begin(), event.deltas.end(), [&](const SequenceDelta& x) { return x.index == index; });
    if (d == event.deltas.end()) {
      event.deltas.push_back(SequenceDelta{});
      d = std::prev(event.deltas.end());
      d->index = index;
    }
    d->tokens.push_back(u.sampled.token);
    if (r.want_logprobs) {
      TokenLogprob lp;
      lp.token = u.sampled.token;
      lp.logprob = u.sampled.logprob;
      for (const TopToken& t : u.sampled.top) lp.top.push_back({t.token, t.logprob});
      d->logprobs.push_back(std::move(lp));
    }
    ++r.usage.completion_tokens;
    ++generated;
    if (index == 0 && r.usage.cached_prompt_tokens == 0) {
      r.usage.cached_prompt_tokens = scheduler_->CachedPromptTokens(u.seq_id);
    }
    if (!r.first_token_sent) {
      r.first_token_sent = true;
      event.engine_ttft_s = now - r.arrival;
    }
    if (u.finish != FinishReason::kNone) FinishSequence(r, index, u.finish, event);
  }
  for (auto& [id, event] : events) {
    auto it = requests_.find(id);
    if (it != requests_.end()) PushAndMaybeClose(*it->second, std::move(event));
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.generation_tokens_total += generated;
}

void EngineCore::RunOneIteration() {
  const double t0 = NowSeconds();
  SchedulerOutput out = scheduler_->Schedule();
  double host = NowSeconds() - t0;
  const bool launched = !out.empty();
  if (launched) {
    runner_->Launch(out);
    in_flight_.push_back(std::move(out));
  }
  const bool must_wait = !in_flight_.empty() &&
                         (!options_.async_scheduling || in_flight_.size() >= 2 || !launched);
  if (must_wait) {
    SchedulerOutput& front = in_flight_.front();
    StepResult res;
    try {
      res = runner_->Wait(front.step_id);
    } catch (const std::exception& e) {
      DI_LOG_ERROR("step {} failed: {}", front.step_id, e.what());
      throw;
    }
    const double t1 = NowSeconds();
    Emit(scheduler_->Update(front, res));
    scheduler_->OnStepCompleted(front.step_id);
    if (options_.check_integrity_every_step) {
      const std::string err = scheduler_->CheckIntegrity();
      DI_CHECK(err.empty(), "state cache integrity after step {}: {}", front.step_id, err);
    }
    // What the timing below needs of the step, read before it leaves the deque.
    const bool had_work = front.has_work();
    const bool decode_only = !front.chunks.empty() && front.num_tokens() == static_cast<int64_t>(front.chunks.size());
    in_flight_.pop_front();
    host += NowSeconds() - t1;
    std::lock_guard<std::mutex> lock(mu_);
    if (res.cuda_graph) ++stats_.cuda_graph_steps;
    if (had_work || !res.sampled.empty()) {
      timing_.runner_seconds += res.forward_seconds;
      if (last_runner_finish_ >= 0) timing_.exposed_seconds += std::max(0.0, res.started_at - last_runner_finish_);
      if (res.device_busy_seconds >= 0) {
        timing_.device_busy_seconds += res.device_busy_seconds;
        if (decode_only) {
          ++timing_.decode_steps;
          timing_.decode_device_busy_seconds += res.device_busy_seconds;
        }
      }
      if (last_runner_finish_ >= 0 && res.device_idle_before_seconds >= 0) {
        timing_.device_idle_seconds += res.device_idle_before_seconds;
      }
      last_runner_finish_ = res.finished_at;
    }
  } else if (!launched && scheduler_->HasUnfinished()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // waiting for resources to free
  }
  UpdateStats(host, launched, t0);
}

void EngineCore::UpdateStats(double host, bool launched, double t0) {
  const SchedulerStats ss = scheduler_->Stats();
  const cache::BlockPool& pool = scheduler_->cache().pool();
  std::lock_guard<std::mutex> lock(mu_);
  if (launched) {
    ++timing_.steps;
    timing_.loop_seconds += NowSeconds() - t0;
    ++stats_.steps;
  }
  timing_.host_seconds += host;
  stats_.num_running = ss.num_running;
  stats_.num_waiting = ss.num_waiting + static_cast<int64_t>(new_requests_.size());
  stats_.num_blocks_in_packs = scheduler_->cache().num_pack_blocks();
  stats_.num_blocks_used = pool.num_used() - stats_.num_blocks_in_packs;
  stats_.num_blocks_cached_free = pool.num_cached();
  stats_.num_slots_used = options_.max_num_seqs - scheduler_->cache().num_free_slots();
  stats_.num_packs = scheduler_->cache().num_ready_packs();
  stats_.prompt_tokens_total = ss.prompt_tokens;
  stats_.prompt_tokens_cached = ss.cached_prompt_tokens;
  stats_.num_preemptions = ss.num_preemptions;
  stats_.step_time_avg_s = timing_.steps ? timing_.loop_seconds / static_cast<double>(timing_.steps) : 0;
  stats_.schedule_time_avg_s = timing_.steps ? timing_.host_seconds / static_cast<double>(timing_.steps) : 0;
}

void EngineCore::Loop() {
  for (;;) {
    TakeIntake();
    const bool idle = !scheduler_->HasUnfinished() && !scheduler_->HasPendingRelease() && in_flight_.empty();
    if (idle) {
      UpdateStats(0, false, 0);
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_ && new_requests_.empty() && aborts_.empty() && !abort_all_) return;
      last_runner_finish_ = -1;  // an idle gap is not loop overhead
      idle_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return stop_ || abort_all_ || !new_requests_.empty() || !aborts_.empty(); });
      idle_ = false;
      continue;
    }
    RunOneIteration();
  }
}

EngineStats EngineCore::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

LoopTiming EngineCore::timing() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timing_;
}

void EngineCore::Drain(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  draining_ = true;
  if (!cv_.wait_for(lock, timeout, [&] { return num_queued_ == 0; })) {
    abort_all_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return num_queued_ == 0; });
  }
}

bool EngineCore::WaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return idle_ && new_requests_.empty() && aborts_.empty(); });
}

std::string EngineCore::CheckIntegrity() const { return scheduler_->CheckIntegrity(); }

// ---- RequestStream --------------------------------------------------------------------------

std::vector<StreamEvent> RequestStream::Drain() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<StreamEvent> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

bool RequestStream::WaitFor(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
}

void RequestStream::SetNotifier(std::function<void()> notifier) {
  std::lock_guard<std::mutex> lock(mu_);
  notifier_ = std::move(notifier);
}

void RequestStream::Push(StreamEvent event) {
  std::function<void()> notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
    notify = notifier_;
  }
  cv_.notify_all();
  if (notify) notify();
}

}  // namespace deepinfer
