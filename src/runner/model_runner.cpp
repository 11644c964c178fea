#include "runner/model_runner.h"

#include <algorithm>

#include "base/error.h"
#include "base/timer.h"
#include "runner/device_io.h"
#include "sampling/sampler.h"

namespace deepinfer {

ModelRunner::ModelRunner(const Model& model, RunnerOptions options)
    : model_(model), options_(std::move(options)) {
  const bool graphs = options_.cuda_graphs && !model_.device().is_cpu();
  DI_CHECK(!graphs || options_.max_model_len > 0, "CUDA graphs need the context bound (max_model_len)");
  padding_block_ = options_.num_blocks;
  // Graphs pad decode batches with sequences on one more slot and block (ids past the cache's).
  // The rows a static-shape step needs past its tokens are the model's to reserve (CreateState).
  state_ = model_.CreateState(options_.num_slots + options_.num_pack_slots + (graphs ? 1 : 0),
                              options_.num_blocks + (graphs ? 1 : 0), options_.block_size, options_.max_step_tokens);
  if (model_.device().is_cpu()) {
    worker_ = std::thread([this] { WorkerLoop(); });
  } else {
    // The runner's own compute stream; what loading and CreateState queued elsewhere is done.
    device_io_ = std::make_unique<DeviceIo>(model_.device());
    state_->SetStream(device_io_->op.stream);
    if (graphs) CaptureDecodeGraphs();
    device_timer_ = DeviceStepTimer::Create(model_.device(), device_io_->op.stream);
    worker_ = std::thread([this] { DeviceWorkerLoop(); });
  }
}

ModelRunner::~ModelRunner() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void ModelRunner::Launch(SchedulerOutput out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(out));
  }
  cv_.notify_all();
}

StepResult ModelRunner::Wait(uint64_t step_id) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_.count(step_id) > 0; });
  Outcome outcome = std::move(done_.at(step_id));
  done_.erase(step_id);
  if (outcome.error) std::rethrow_exception(outcome.error);
  return std::move(outcome.result);
}

void ModelRunner::WorkerLoop() {
  for (;;) {
    SchedulerOutput out;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      out = std::move(queue_.front());
      queue_.pop_front();
    }
    Outcome outcome;
    try {
      outcome.result = Execute(out);
    } catch (...) {
      outcome.error = std::current_exception();
      outcome.result.step_id = out.step_id;
    }
    Post(out.step_id, std::move(outcome));
  }
}

void ModelRunner::Post(uint64_t step_id, Outcome outcome) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_.emplace(step_id, std::move(outcome));
  }
  cv_.notify_all();
}

float* ModelRunner::PackLogits(int32_t pack_slot) {
  const int64_t vocab = model_.config().vocab_size;
  const int32_t pack = pack_slot - options_.num_slots;
  DI_CHECK(pack >= 0 && pack < options_.num_pack_slots, "slot {} is not a pack slot", pack_slot);
  if (pack_logits_.empty()) pack_logits_.resize(static_cast<size_t>(options_.num_pack_slots * vocab));
  return pack_logits_.data() + static_cast<int64_t>(pack) * vocab;
}

SampledToken ModelRunner::SampleFor(SeqId id, float* logits) {
  SequenceMirror& m = seqs_.at(id);
  sampling::SequenceContext ctx;
  ctx.params = &m.sampling;
  ctx.tokens = &m.tokens;
  ctx.prompt_len = m.prompt_len;
  ctx.rng_seed = m.rng_seed;
  ctx.eos_token_ids = &options_.eos_token_ids;
  ctx.sampleable_vocab = options_.sampleable_vocab;
  SampledToken st = sampling::Sample(logits, model_.config().vocab_size, ctx);
  st.seq_id = id;
  m.tokens.push_back(st.token);
  return st;
}

void ModelRunner::ApplyCopies(const std::vector<PackCopy>& copies) {
  for (const PackCopy& c : copies) {
    state_->CopySlot(c.from_slot, c.to_slot);
    if (c.from_block != 0) state_->CopyBlock(c.from_block, c.to_block);
  }
}

void ModelRunner::BeginStep(const SchedulerOutput& out) {
  for (SeqId id : out.finished_seq_ids) seqs_.erase(id);
  // Saves of finished sequences read state that new sequences may reuse from here on.
  ApplyCopies(out.pre_copies);
  for (int32_t block : out.poison_blocks) state_->PoisonBlock(block);
  for (const NewSequence& ns : out.new_seqs) {
    SequenceMirror m;
    m.tokens = ns.tokens;
    m.prompt_len = ns.prompt_len;
    m.sampling = ns.sampling;
    m.rng_seed = ns.rng_seed;
    m.slot = ns.slot;
    m.blocks = ns.block_ids;
    m.generation = next_generation_++;
    if (ns.restore.from_slot >= 0) {
      ApplyCopies({ns.restore});
    } else if (ns.reset_slot) {
      state_->ResetSlot(ns.slot);
    }
    seqs_[ns.seq_id] = std::move(m);
  }
  for (const SequenceDiff& d : out.diffs) {
    auto& blocks = seqs_.at(d.seq_id).blocks;
    blocks.insert(blocks.end(), d.new_block_ids.begin(), d.new_block_ids.end());
  }
}

SequenceChunk ModelRunner::ChunkFor(const ScheduledChunk& c, const SequenceMirror& m, int64_t token_offset) {
  const int64_t available = static_cast<int64_t>(m.tokens.size()) + m.pending;
  DI_CHECK(available >= c.start_pos + c.num_tokens, "sequence {}: chunk [{}, {}) but only {} tokens known to the runner",
           c.seq_id, c.start_pos, c.start_pos + c.num_tokens, available);
  SequenceChunk sc;
  sc.token_offset = token_offset;
  sc.num_tokens = c.num_tokens;
  sc.start_pos = c.start_pos;
  sc.state_slot = m.slot;
  sc.block_table = m.blocks.data();
  sc.num_blocks = static_cast<int64_t>(m.blocks.size());
  sc.want_logits = c.sample;
  sc.prompt_end = c.prompt_end;
  return sc;
}

StepResult ModelRunner::Execute(const SchedulerOutput& out) {
  StepResult result;
  result.step_id = out.step_id;
  result.started_at = NowSeconds();
  if (device_timer_) device_timer_->StepStarted();
  BeginStep(out);

  ForwardBatch batch;
  std::vector<TokenId> ids;
  ids.reserve(static_cast<size_t>(out.num_tokens()));
  std::vector<SeqId> sample_order;
  for (const ScheduledChunk& c : out.chunks) {
    const SequenceMirror& m = seqs_.at(c.seq_id);
    const SequenceChunk sc = ChunkFor(c, m, static_cast<int64_t>(ids.size()));
    ids.insert(ids.end(), m.tokens.begin() + c.start_pos, m.tokens.begin() + c.start_pos + c.num_tokens);
    batch.seqs.push_back(sc);
    if (c.sample) sample_order.push_back(c.seq_id);
  }
  batch.token_ids = ids.data();
  batch.num_tokens = static_cast<int64_t>(ids.size());
  if (!batch.seqs.empty()) {
    const int64_t vocab = model_.config().vocab_size;
    const int64_t rows = static_cast<int64_t>(sample_order.size());
    std::vector<float> logits(static_cast<size_t>(std::max<int64_t>(rows, 1) * vocab));
    model_.Forward(batch, *state_, TensorView(logits.data(), DType::kF32, {rows, vocab}));
    // Prompt-end packs keep the raw logits (sampling below overwrites them).
    for (const PackCopy& c : out.post_copies) {
      if (c.logits_of == 0) continue;
      const auto r = std::find(sample_order.begin(), sample_order.end(), c.logits_of) - sample_order.begin();
      DI_CHECK(r < rows, "pack logits of sequence {} which did not sample", c.logits_of);
      std::copy_n(logits.data() + r * vocab, vocab, PackLogits(c.to_slot));
    }
    for (int64_t r = 0; r < rows; ++r) result.sampled.push_back(SampleFor(sample_order[r], logits.data() + r * vocab));
  }
  // Whole prompts restored from a pack: the first token comes from the pack's logits.
  for (const PackSample& ps : out.pack_samples) {
    const float* stored = PackLogits(ps.pack_slot);
    std::vector<float> scratch(stored, stored + model_.config().vocab_size);
    result.sampled.push_back(SampleFor(ps.seq_id, scratch.data()));
  }
  ApplyCopies(out.post_copies);
  if (device_timer_) {
    device_timer_->StepFinished();
    device_timer_->Measure(&result.device_busy_seconds, &result.device_idle_before_seconds);
  }
  result.finished_at = NowSeconds();
  result.forward_seconds = result.finished_at - result.started_at;
  return result;
}

}  // namespace deepinfer
