// DeepSeek-V4: top-level forward, blocks with mHC, and the MoE sublayer.
#include "model/deepseek_v4/v4_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "base/math.h"
#include "base/switches.h"
#include "model/deepseek_v4/v4_step.h"

namespace deepinfer::v4 {

namespace {
int64_t ForkTokens();  // DEEPINFER_FORK_TOKENS (below)
}  // namespace

V4Model::V4Model(ModelConfig config, ModelWeights weights, Numerics numerics, DeviceId device)
    : config_(std::move(config)), weights_(std::move(weights)), numerics_(numerics), device_(device) {
  DI_CHECK(!numerics_.fold_fp4_experts ||
               (!device_.is_cpu() && numerics_.tensor_core_linears && numerics_.fp8_activations),
           "--fold-fp4-experts keeps FP4 experts folded for the FP8-input tensor-core kernels: it needs a CUDA "
           "device, --tensor-cores and --fp8-activations");
  DI_CHECK(!numerics_.fast_prefill ||
               (!device_.is_cpu() && numerics_.tensor_core_linears && numerics_.fp8_activations),
           "--fast-prefill picks among the FP8-input tensor-core kernels: it needs a CUDA device, --tensor-cores and "
           "--fp8-activations");
  const auto& c = config_;
  rope_plain_ = ops::MakeRopeTable(c.qk_rope_head_dim, c.rope_theta, 0, 1.0, 0, 0);
  const auto& rs = c.rope_scaling;
  const bool yarn = rs.type == "yarn";
  rope_compressed_ = ops::MakeRopeTable(c.qk_rope_head_dim, c.compress_rope_theta,
                                        yarn ? rs.original_max_position_embeddings : 0,
                                        yarn ? rs.factor : 1.0, rs.beta_fast, rs.beta_slow);
  if (!device_.is_cpu()) UploadWeights();
  BuildExpertTables();
  act_quant_in_kernels_ = ActQuantInKernels();
  workspace_ = std::make_unique<Workspace>(device_);
  if (!device_.is_cpu()) {
    side_streams_ = std::make_unique<StreamBranches>(device_.index, kSideStreams);
    ForkTokens();        // a bad DEEPINFER_FORK_TOKENS fails here, not in a step
    IndexQueryBranch();  // and a bad DEEPINFER_INDEX_QUERY_BRANCH
  }
}

bool V4Model::ActQuantInKernels() const {
  if (!numerics_.fp8_activations) return false;
  const ops::OpContext op{device_, nullptr, false, nullptr, numerics_.tensor_core_linears, numerics_.fast_prefill};
  auto rounds = [&](const LinearWeight& w) { return w.empty() || ops::QuantizesFp8InputInKernel(op, w); };
  auto block_rounds = [&](const BlockWeights& b) {
    const AttentionWeights& a = b.attn;
    bool all = rounds(a.wq_a) && rounds(a.wkv) && rounds(a.wq_b) && rounds(a.wo_b) && rounds(b.ffn.shared.w1) &&
               rounds(b.ffn.shared.w3) && rounds(b.ffn.shared.w2) && (!a.indexer || rounds(a.indexer->wq_b));
    for (const ExpertWeights& e : b.ffn.experts) all = all && rounds(e.w1) && rounds(e.w3) && rounds(e.w2);
    return all;
  };
  // The MTP blocks too (not run by Forward today; their blocks would go through the same paths).
  for (const BlockWeights& b : weights_.layers) {
    if (!block_rounds(b)) return false;
  }
  for (const MtpWeights& m : weights_.mtp) {
    if (!block_rounds(m.block)) return false;
  }
  return true;
}

V4Model::~V4Model() = default;

namespace {

// DEEPINFER_JOIN_W13 (read once; unset or 1: on, 0: off) puts each expert's w1 and w3 (the
// routed ones' and the shared one's) side by side on a CUDA device, so that the MoE takes them as
// one weight (ExpertWeights::w13): one ExpertsLinear / Linear call instead of two, twice the
// blocks per launch, the same bits for every row. Measured 2026-12-05 (docs/performance.md,
// version 43): decode 1.463 -> 1.402 / 5.455 -> 5.352 / 9.531 -> 9.310 ms at batch 1 / 64 / 256,
// the 8k prefill 72.1 -> 70.9 ms.
std::atomic<int> g_join_w13_test{-1};  // SetJoinW13ForTesting
bool JoinW13() {
  static const bool from_environment =
      ParseOnOffSwitch("DEEPINFER_JOIN_W13", std::getenv("DEEPINFER_JOIN_W13"), /*if_unset=*/true);
  const int test = g_join_w13_test.load();
  return test >= 0 ? test == 1 : from_environment;
}

// Whether w1 and w3 can share one allocation as [w1; w3]: the same format, shape and dtypes,
// contiguous 2-d data and scales, and for FP8 whole 128-row scale blocks (w3's rows must start one).
bool JoinableW13(const LinearWeight& a, const LinearWeight& b) {
  if (a.format == WeightFormat::kFp8 && a.out_features % kFp8BlockSize != 0) return false;
  auto alike = [](const TensorView& x, const TensorView& y) {
    return x.ndim() == 2 && y.ndim() == 2 && x.dtype() == y.dtype() && x.size(0) == y.size(0) &&
           x.size(1) == y.size(1) && x.is_contiguous() && y.is_contiguous();
  };
  return !a.empty() && !b.empty() && a.format == b.format && a.out_features == b.out_features &&
         a.in_features == b.in_features && alike(a.data, b.data) && a.scale.empty() == b.scale.empty() &&
         (a.scale.empty() || alike(a.scale, b.scale));
}

std::atomic<int64_t> g_fork_tokens_test{-1};  // SetForkTokensForTesting
std::atomic<uint64_t> g_forks{0};              // ForksForTesting
std::atomic<bool> g_branch_order_reversed{false};  // SetBranchOrderForTesting
std::atomic<int> g_index_query_branch_test{-1};     // SetIndexQueryBranchForTesting

// DEEPINFER_FORK_TOKENS (read once): the most tokens a step may have for its independent work to
// run on concurrent streams; unset: kDefaultForkTokens. Measured 2026-12-05 (docs/performance.md,
// version 43) at 256: decode 1.457 -> 1.265 / 5.476 -> 5.113 / 9.529 -> 9.124 ms at batch 1 / 64 /
// 256, the prefill unchanged.
int64_t ForkTokens() {
  static const int64_t from_environment = ParseForkTokens(std::getenv("DEEPINFER_FORK_TOKENS"));
  const int64_t test = g_fork_tokens_test.load();
  return test >= 0 ? test : from_environment;
}

}  // namespace

bool IndexQueryBranch() {
  static const bool on =
      ParseOnOffSwitch("DEEPINFER_INDEX_QUERY_BRANCH", std::getenv("DEEPINFER_INDEX_QUERY_BRANCH"), false);
  const int test = g_index_query_branch_test.load();
  return test >= 0 ? test == 1 : on;
}

void SetIndexQueryBranchForTesting(int mode) {
  DI_CHECK(mode >= -1 && mode <= 1, "SetIndexQueryBranchForTesting takes -1, 0 or 1, got {}", mode);
  g_index_query_branch_test.store(mode);
}

int64_t ParseForkTokens(const char* value) {
  return ParseCountSwitch("DEEPINFER_FORK_TOKENS", value, kDefaultForkTokens,
                          "a step's token count (0: no step forks)");
}

int64_t SetForkTokensForTesting(int64_t tokens) {
  DI_CHECK(tokens >= -1, "SetForkTokensForTesting takes a token count or -1, got {}", tokens);
  return g_fork_tokens_test.exchange(tokens);
}

bool V4Model::ForksAt(int64_t tokens) const {
  const int64_t bound = ForkTokens();
  return bound > 0 && tokens <= bound;
}

StreamBranches* V4Model::ForkStreams(const StepContext& ctx) const {
  if (!ctx.op.on_cuda() || ctx.op.record_only || ctx.op.profiler != nullptr || side_streams_ == nullptr) {
    return nullptr;
  }
  return ForksAt(ctx.num_tokens()) ? side_streams_.get() : nullptr;
}

uint64_t ForksForTesting() { return g_forks.load(); }

V4Model::StepBranches::StepBranches(const StepContext& ctx, StreamBranches* streams, int side, int first_stream)
    : ctx_(ctx), streams_(streams), side_(side), first_stream_(first_stream) {
  DI_CHECK(side >= 0 && first_stream >= 0 && (streams == nullptr || first_stream + side <= streams->size()),
           "{} side branches from side stream {} asked of {} streams", side, first_stream,
           streams == nullptr ? 0 : streams->size());
}

void V4Model::StepBranches::Add(int branch, std::function<void(const StepContext&)> work) {
  DI_CHECK(!ran_ && branch >= 0 && branch <= side_, "work for branch {} of a step forked {} ways{}", branch,
           side_ + 1, ran_ ? ", already run" : "");
  work_.emplace_back(branch, std::move(work));
}

void V4Model::StepBranches::Run() {
  DI_CHECK(!ran_, "a step's branches run twice");
  ran_ = true;
  std::vector<StepContext> contexts(1, ctx_);
  for (int i = 0; i < side_; ++i) {
    contexts.push_back(streams_ == nullptr ? ctx_ : ctx_.OnStream(streams_->stream(first_stream_ + i)));
  }
  if (g_branch_order_reversed.load()) std::reverse(work_.begin(), work_.end());
  const bool forked = streams_ != nullptr && side_ > 0;
  if (forked) {
    streams_->Fork(ctx_.op.stream, first_stream_, side_);
    g_forks.fetch_add(1);
  }
  try {
    for (const auto& [branch, work] : work_) work(contexts[static_cast<size_t>(branch)]);
  } catch (...) {
    if (forked) {
      try {
        streams_->Join(ctx_.op.stream, first_stream_, side_);
      } catch (...) {  // the work's error is the one reported
      }
    }
    throw;
  }
  if (forked) streams_->Join(ctx_.op.stream, first_stream_, side_);
}

void SetBranchOrderForTesting(bool reversed) { g_branch_order_reversed.store(reversed); }

void SetJoinW13ForTesting(int mode) {
  DI_CHECK(mode >= -1 && mode <= 1, "SetJoinW13ForTesting takes -1, 0 or 1, got {}", mode);
  g_join_w13_test.store(mode);
}

int64_t V4Model::JoinedW13Blocks() const {
  int64_t joined = 0;
  for (const ExpertTables& t : expert_tables_) joined += t.w13.experts.empty() ? 0 : 1;
  return joined;
}

void V4Model::UploadWeights() {
  const ops::OpContext op{device_, nullptr};
  // [w1; w3] per expert (JoinW13): the host tensors x then y in one device allocation; x and y
  // become views of its halves, the whole is returned.
  auto upload_pair = [&](TensorView& x, TensorView& y) {
    const TensorView hx = x, hy = y;
    Buffer& b = device_weights_.emplace_back(hx.nbytes() + hy.nbytes(), device_);
    uint8_t* base = static_cast<uint8_t*>(b.data());
    ops::CopyBytes(op, base, hx.raw(), hx.nbytes());
    ops::CopyBytes(op, base + hx.nbytes(), hy.raw(), hy.nbytes());
    x = TensorView(base, hx.dtype(), {hx.size(0), hx.size(1)}, device_);
    y = TensorView(base + hx.nbytes(), hy.dtype(), {hy.size(0), hy.size(1)}, device_);
    return TensorView(base, hx.dtype(), {hx.size(0) + hy.size(0), hx.size(1)}, device_);
  };
  auto join_expert = [&](ExpertWeights& e) {
    if (!JoinableW13(e.w1, e.w3)) return;
    LinearWeight w13;
    w13.format = e.w1.format;
    w13.out_features = e.w1.out_features + e.w3.out_features;
    w13.in_features = e.w1.in_features;
    w13.data = upload_pair(e.w1.data, e.w3.data);
    if (!e.w1.scale.empty()) w13.scale = upload_pair(e.w1.scale, e.w3.scale);
    e.w13 = w13;
  };
  auto join = [&](BlockWeights& block) {
    for (ExpertWeights& e : block.ffn.experts) join_expert(e);
    join_expert(block.ffn.shared);
  };
  if (JoinW13()) {
    for (BlockWeights& b : weights_.layers) join(b);
    for (MtpWeights& m : weights_.mtp) join(m.block);
  }
  ForEachTensor(weights_, [&](TensorView& t) {
    if (t.empty() || t.device() == device_) return;  // none, or already uploaded (join)
    DI_CHECK(t.is_contiguous(), "weights must be contiguous to move to the device");
    Buffer& b = device_weights_.emplace_back(t.nbytes(), device_);
    ops::CopyBytes(op, b.data(), t.raw(), t.nbytes());
    int64_t shape[kMaxDims];
    for (int i = 0; i < t.ndim(); ++i) shape[i] = t.size(i);
    t = TensorView(b.data(), t.dtype(), shape, t.ndim(), device_);
  });
  const int64_t half = static_cast<int64_t>(rope_plain_.inv_freq.size());
  device_rope_ = Buffer(static_cast<size_t>(2 * half) * sizeof(float), device_);
  ops::CopyBytes(op, device_rope_.data(), rope_plain_.inv_freq.data(), half * sizeof(float));
  ops::CopyBytes(op, device_rope_.as<float>() + half, rope_compressed_.inv_freq.data(), half * sizeof(float));
  rope_plain_.device_inv_freq = TensorView(device_rope_.data(), DType::kF32, {half}, device_);
  rope_compressed_.device_inv_freq = TensorView(device_rope_.as<float>() + half, DType::kF32, {half}, device_);
  // The head in tiles, which its split-BF16 kernels read (the same logits): in place of its rows
  // (unless DEEPINFER_DENSE_TILES_IN_PLACE=0), else as a second copy with DEEPINFER_DENSE_TILES=1
  // (1.06 GB more at Flash's shapes).
  const ops::OpContext tiles_op{
      device_, nullptr, false, nullptr, numerics_.tensor_core_linears, numerics_.fast_prefill};
  if (ops::DenseTilesInPlace(tiles_op, weights_.head)) {  // no second copy
    ops::RewriteAsDenseTiles(tiles_op, weights_.head);
  } else if (const size_t bytes = ops::DenseTilesBytes(tiles_op, weights_.head); bytes > 0) {
    head_tiles_ = Buffer(bytes, device_);
    const TensorView tiles(head_tiles_.data(), DType::kU8, {static_cast<int64_t>(bytes)}, device_);
    ops::WriteDenseTiles(tiles_op, weights_.head, tiles);
    weights_.head.tiles = tiles;
  }
}

void V4Model::BuildExpertTables() {
  const ops::OpContext op{device_, nullptr, false, nullptr, numerics_.tensor_core_linears, numerics_.fast_prefill};
  auto build = [&](const BlockWeights& b) {
    const size_t i = static_cast<size_t>(b.layer);
    if (expert_tables_.size() <= i) expert_tables_.resize(i + 1);
    std::vector<LinearWeight> w1, w3, w2, w13;
    bool joined = !b.ffn.experts.empty();
    for (const ExpertWeights& e : b.ffn.experts) {
      w1.push_back(e.w1);
      w3.push_back(e.w3);
      w2.push_back(e.w2);
      w13.push_back(e.w13);
      joined = joined && !e.w13.empty();
    }
    const bool fold = numerics_.fold_fp4_experts;
    ExpertTables& t = expert_tables_[i];
    t = ExpertTables{};
    if (joined) {
      t.w13 = ops::MakeExpertsWeight(op, std::move(w13), QuantizedInput(), fold);
    } else {
      t.w1 = ops::MakeExpertsWeight(op, std::move(w1), QuantizedInput(), fold);
      t.w3 = ops::MakeExpertsWeight(op, std::move(w3), QuantizedInput(), fold);
    }
    t.w2 = ops::MakeExpertsWeight(op, std::move(w2), QuantizedInput(), fold);
  };
  for (const BlockWeights& b : weights_.layers) build(b);
  for (const MtpWeights& m : weights_.mtp) build(m.block);
}

const ops::RopeTable& V4Model::RopeFor(int64_t layer) const {
  return config_.compress_ratio(layer) != 0 ? rope_compressed_ : rope_plain_;
}

cpu::PackedRowFormat V4Model::StateRowFormat() const {
  if (!numerics_.kv_fp8 || numerics_.state_rows == StateRows::kF32) return {};
  return StateLayout::PackedRowFormatFor(config_, numerics_.state_rows == StateRows::kFp8);
}

std::unique_ptr<ModelState> V4Model::CreateState(int64_t num_slots, int64_t num_blocks, int64_t block_size,
                                                 int64_t max_step_tokens) const {
  // Room for the static shapes' scratch rows too: a graph's step must not grow the state.
  StateLayout layout = StateLayout::ForConfig(config_, block_size, StateRowFormat());
  const int64_t fresh_rows = max_step_tokens > 0 ? max_step_tokens + StaticShapeScratchRows(layout) : 0;
  return std::make_unique<V4State>(std::move(layout), num_slots, num_blocks, device_, fresh_rows);
}

size_t V4Model::BytesPerSlot(int64_t block_size) const {
  return StateLayout::ForConfig(config_, block_size, StateRowFormat()).slot_floats * sizeof(float);
}

size_t V4Model::BytesPerBlock(int64_t block_size) const {
  return StateLayout::ForConfig(config_, block_size, StateRowFormat()).block_floats * sizeof(float);
}

cpu::LayerRowGeometry V4Model::StepContext::Geometry(const StateLayout& l, int64_t layer) const {
  cpu::LayerRowGeometry g;
  g.row_floats = l.row_floats;
  g.index_dim = l.index_dim;
  g.window = l.window;
  g.ratio = l.ratio[layer];
  g.rows_per_block = g.ratio ? l.block_size / g.ratio : 1;
  g.slots_base = state->slots_base();
  g.slot_floats = l.slot_floats;
  g.window_offset = l.window_offset[layer];
  g.blocks_base = state->blocks_base();
  g.block_floats = l.block_floats;
  g.main_rows_offset = std::max<int64_t>(l.main_rows_offset[layer], 0);
  g.index_rows_offset = std::max<int64_t>(l.index_rows_offset[layer], 0);
  g.fresh_base = state->fresh_base();
  return g;
}

namespace {

// "layer 3 csa": the layer and its attention kind (swa: window only; csa: ratio 4 with the
// indexer; hca: ratio 128), how benchmarks group per-op times.
std::string ProfileScope(const BlockWeights& w) {
  const char* kind = w.compress_ratio == 0 ? "swa" : w.attn.indexer ? "csa" : "hca";
  return fmt::format("layer {} {}", w.layer, kind);
}

void ValidateBatch(const ForwardBatch& batch, const StateStorage& state, bool has_paged_rows) {
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const SequenceChunk& s = batch.seqs[i];
    DI_CHECK(s.num_tokens > 0 && s.token_offset >= 0 &&
                 s.token_offset + s.num_tokens <= batch.num_tokens,
             "chunk {}: tokens [{}, {}) outside the batch of {}", i, s.token_offset,
             s.token_offset + s.num_tokens, batch.num_tokens);
    DI_CHECK(s.start_pos >= 0, "chunk {}: negative start position", i);
    DI_CHECK(s.state_slot >= 0 && s.state_slot < state.num_slots(), "chunk {}: state slot {} invalid", i,
             s.state_slot);
    if (has_paged_rows) {
      const int64_t needed = DivCeil(s.start_pos + s.num_tokens, state.layout().block_size);
      DI_CHECK(s.num_blocks >= needed && s.block_table != nullptr,
               "chunk {}: {} blocks given, {} tokens need {}", i, s.num_blocks,
               s.start_pos + s.num_tokens, needed);
    }
  }
}

}  // namespace

void V4Model::Forward(const ForwardBatch& batch, ModelState& state_base, const TensorView& logits,
                      const ForwardHooks* hooks) const {
  StateStorage& state = dynamic_cast<V4State&>(state_base).storage();
  const auto& c = config_;
  bool has_paged_rows = false;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) has_paged_rows |= c.compress_ratio(l) != 0;
  ValidateBatch(batch, state, has_paged_rows);
  DI_CHECK(state.device() == device_, "state and model live on different devices");

  const int64_t tokens = batch.num_tokens, d = c.hidden_size, s = c.hc_mult;
  StepContext ctx;
  ctx.op = ops::OpContext{device_, batch.stream, batch.record_only, batch.profiler, numerics_.tensor_core_linears,
                          numerics_.fast_prefill};
  if (ctx.op.profiler != nullptr) ctx.op.profiler->SetScope("embedding");
  ctx.ws = workspace_.get();
  if (batch.graph_staging != nullptr) {
    ctx.ws->ResetForGraph(ctx.op, batch.graph_staging, batch.graph_staging_bytes, batch.graph_uploads);
  } else {
    DI_CHECK(!batch.record_only, "a record-only step needs graph staging");
    ctx.ws->Reset(ctx.op);
  }
  ctx.batch = &batch;
  ctx.state = &state;
  // Static shapes scatter the compressor rows that close nowhere into the fresh rows after the
  // step's own.
  state.EnsureFreshRows(batch.static_max_context > 0 ? tokens + StaticShapeScratchRows(state.layout()) : tokens);
  Workspace& ws = *ctx.ws;
  auto upload = [&](const auto& v, DType dtype) {
    return ws.Upload(ctx.op, v.data(), dtype, {static_cast<int64_t>(v.size())});
  };

  // The step's host arrays (StepContext points into them).
  std::vector<int64_t> positions(static_cast<size_t>(tokens), -1);  // every token's absolute position
  std::vector<int32_t> token_seq(static_cast<size_t>(tokens), -1);
  std::vector<cpu::SeqRowsInfo> seqs;
  std::vector<int32_t> block_tables;
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const SequenceChunk& sq = batch.seqs[i];
    cpu::SeqRowsInfo info;
    info.token_offset = sq.token_offset;
    info.num_tokens = sq.num_tokens;
    info.start_pos = sq.start_pos;
    info.slot = sq.state_slot;
    info.prompt_end = sq.prompt_end;
    info.block_offset = static_cast<int64_t>(block_tables.size());
    seqs.push_back(info);
    if (sq.block_table != nullptr) {
      block_tables.insert(block_tables.end(), sq.block_table, sq.block_table + sq.num_blocks);
    }
    if (batch.static_max_context > 0) {  // every table as long as the context bound needs: one upload size
      const int64_t blocks = DivCeil(batch.static_max_context, state.layout().block_size);
      DI_CHECK(sq.num_blocks <= blocks, "chunk {}: {} blocks, past the {} of the static context bound", i,
               sq.num_blocks, blocks);
      block_tables.resize(static_cast<size_t>(info.block_offset + blocks), 0);
    }
    for (int64_t j = 0; j < sq.num_tokens; ++j) {
      positions[sq.token_offset + j] = sq.start_pos + j;
      token_seq[sq.token_offset + j] = static_cast<int32_t>(i);
    }
  }
  for (int64_t t = 0; t < tokens; ++t) {
    DI_CHECK(positions[t] >= 0, "token {} of the batch belongs to no chunk", t);
  }
  if (block_tables.empty()) block_tables.push_back(0);
  ctx.seqs = seqs;
  ctx.positions_view = upload(positions, DType::kI64);
  if (batch.device_token_ids != nullptr) {
    DI_CHECK(!device_.is_cpu(), "device token ids given to a model on the host");
    ctx.token_ids = TensorView(const_cast<int32_t*>(batch.device_token_ids), DType::kI32, {tokens}, device_);
  } else {
    ctx.token_ids = ws.Upload(ctx.op, batch.token_ids, DType::kI32, {tokens});
  }
  ctx.host_plan = cpu::StepRowsPlan{tokens, static_cast<int64_t>(seqs.size()), token_seq.data(), positions.data(),
                                    seqs.data(), block_tables.data()};
  const TensorView seqs_dev = ws.Upload(ctx.op, seqs.data(), DType::kI64,
                                        {static_cast<int64_t>(seqs.size() * sizeof(cpu::SeqRowsInfo) / 8)});
  ctx.plan = cpu::StepRowsPlan{tokens, static_cast<int64_t>(seqs.size()),
                               upload(token_seq, DType::kI32).data<int32_t>(), ctx.positions_view.data<int64_t>(),
                               reinterpret_cast<const cpu::SeqRowsInfo*>(seqs_dev.raw()),
                               upload(block_tables, DType::kI32).data<int32_t>()};
  // The kv path writes the fresh rows in place when they are f32; packed ones it encodes there.
  ctx.fresh = state.layout().packed_rows()
                  ? TensorView()
                  : TensorView(state.base().data<float>() + state.fresh_base(), DType::kF32, {tokens, c.head_dim},
                               device_);

  const TensorView h = ws.Alloc(DType::kF32, {tokens, d});
  ops::Embedding(ctx.op, ctx.token_ids, weights_.embed, h);
  // Every stream starts as the embedding: streams[t, k] = h[t].
  std::vector<int64_t> broadcast(static_cast<size_t>(tokens * s));
  for (int64_t i = 0; i < tokens * s; ++i) broadcast[i] = (i / s) * d;
  const TensorView streams = ws.Alloc(DType::kF32, {tokens, s, d});
  ops::GatherRows(ctx.op, h, upload(broadcast, DType::kI64), streams.Reshape({tokens * s, d}));
  for (const BlockWeights& w : weights_.layers) {
    if (ctx.op.profiler != nullptr) ctx.op.profiler->SetScope(ProfileScope(w).c_str());
    // A layer's temporaries are released after it (its result is in `streams`): the step's
    // workspace is one layer's, whatever the depth (workspace.h).
    const Workspace::Position layer_start = ws.Mark();
    Block(ctx, w, streams);
    if (hooks != nullptr && hooks->on_block_output) {
      if (device_.is_cpu()) {
        hooks->on_block_output(w.layer, streams, positions);
      } else {
        HostTensor copy(DType::kF32, {tokens, s, d});
        ops::CopyBytes(ctx.op, copy.data<float>(), streams.raw(), streams.nbytes());
        hooks->on_block_output(w.layer, copy.view(), positions);
      }
    }
    ws.Rewind(layer_start);
  }

  if (ctx.op.profiler != nullptr) ctx.op.profiler->SetScope("head");
  std::vector<int64_t> last_rows;
  for (const SequenceChunk& sq : batch.seqs) {
    if (sq.want_logits) last_rows.push_back((sq.token_offset + sq.num_tokens - 1) * s * d);
  }
  const int64_t n = static_cast<int64_t>(last_rows.size());
  DI_CHECK(logits.ndim() == 2 && logits.size(0) == n && logits.size(1) == c.vocab_size,
           "logits buffer is {}, expected [{}, {}]", logits.ShapeString(), n, c.vocab_size);
  if (n == 0) return;
  const TensorView last = ws.Alloc(DType::kF32, {n, s, d});
  ops::GatherRows(ctx.op, streams.Reshape({tokens * s * d}), upload(last_rows, DType::kI64), last.Reshape({n, s * d}));
  const TensorView y = ws.Alloc(DType::kF32, {n, d});
  ops::HcHead(ctx.op, last, HcParamsFor(weights_.hc_head, c), y);
  ops::RmsNorm(ctx.op, y, weights_.norm, static_cast<float>(c.rms_norm_eps), y);
  // The head takes scratch where a kernel uses it (x's BF16 parts, split once for the whole
  // [vocab, d] product: the same bits as without). With bf16_head_input, y is rounded to BF16 as the
  // reference's norm returns it (ops::Linear's kBf16: y is consumed).
  const ops::LinearInput head_input = numerics_.bf16_head_input ? ops::LinearInput::kBf16 : ops::LinearInput::kAsIs;
  const size_t head_bytes = ops::LinearScratchBytes(ctx.op, n, weights_.head, head_input);
  const TensorView head_scratch =
      head_bytes == 0 ? TensorView() : ws.Alloc(DType::kI8, {static_cast<int64_t>(head_bytes)});
  if (logits.device() == device_) {
    ops::Linear(ctx.op, y, weights_.head, logits, head_input, head_scratch);
  } else {
    const TensorView out = ws.Alloc(DType::kF32, {n, c.vocab_size});
    ops::Linear(ctx.op, y, weights_.head, out, head_input, head_scratch);
    DI_CHECK(logits.is_contiguous(), "logits must be contiguous");
    ops::CopyBytes(ctx.op, logits.raw(), out.raw(), out.nbytes());
  }
}

void V4Model::QuantizeLinearInput(const StepContext& ctx, const TensorView& x, const TensorView& row_count) const {
  constexpr int64_t kActQuantBlock = 128;  // the reference's act_quant block along K
  if (numerics_.fp8_activations && !act_quant_in_kernels_) {
    ops::Fp8RoundTripRows(ctx.op, x, 0, x.size(1), kActQuantBlock, row_count);
  }
}

TensorView V4Model::QuantizedCopy(const StepContext& ctx, const TensorView& x) const {
  if (!numerics_.fp8_activations || act_quant_in_kernels_) return x;
  DI_CHECK(x.ndim() == 2 && x.is_contiguous(), "quantized copy of a {} view", x.ShapeString());
  const TensorView copy = ctx.ws->Alloc(DType::kF32, {x.size(0), x.size(1)});
  ops::CopyBytesAsync(ctx.op, copy.raw(), x.raw(), x.nbytes());
  QuantizeLinearInput(ctx, copy);
  return copy;
}

void V4Model::QuantizedLinear(const StepContext& ctx, const TensorView& x, const LinearWeight& w,
                              const TensorView& y) const {
  const ops::LinearInput input = QuantizedInput();
  const size_t bytes = ops::LinearScratchBytes(ctx.op, x.size(0), w, input);
  const TensorView scratch = bytes == 0 ? TensorView() : ctx.ws->Alloc(DType::kI8, {static_cast<int64_t>(bytes)});
  ops::Linear(ctx.op, x, w, y, input, scratch);
}

void V4Model::DenseLinear(const StepContext& ctx, const TensorView& x, const LinearWeight& w, const TensorView& y,
                          ops::LinearInput input) const {
  DI_CHECK(input == ops::LinearInput::kAsIs || input == ops::LinearInput::kBf16Values,
           "dense linear: an input as it is or of BF16 values");
  const size_t bytes = ops::LinearScratchBytes(ctx.op, x.size(0), w, ops::LinearInput::kAsIs);
  const TensorView scratch = bytes == 0 ? TensorView() : ctx.ws->Alloc(DType::kI8, {static_cast<int64_t>(bytes)});
  ops::Linear(ctx.op, x, w, y, input, scratch);
}

void V4Model::DenseLinearsOfOneInput(const StepContext& ctx, const TensorView& x,
                                     const std::vector<ops::LinearProduct>& products, ops::LinearInput input) const {
  if (products.empty()) return;
  const size_t bytes = ops::LinearsOfOneInputScratchBytes(ctx.op, x.size(0), products);
  const TensorView scratch = bytes == 0 ? TensorView() : ctx.ws->Alloc(DType::kI8, {static_cast<int64_t>(bytes)});
  ops::LinearsOfOneInput(ctx.op, x, products, scratch, input);
}

void V4Model::Block(const StepContext& ctx, const BlockWeights& w, const TensorView& streams) const {
  const auto& c = config_;
  const int64_t tokens = ctx.num_tokens(), d = c.hidden_size, s = c.hc_mult;
  const float eps = static_cast<float>(c.rms_norm_eps);
  Workspace& ws = *ctx.ws;
  const TensorView a = ws.Alloc(DType::kF32, {tokens, d}), post = ws.Alloc(DType::kF32, {tokens, s}),
                   comb = ws.Alloc(DType::kF32, {tokens, s, s}), o = ws.Alloc(DType::kF32, {tokens, d}),
                   mid = ws.Alloc(DType::kF32, {tokens, s, d});

  ops::HcPre(ctx.op, streams, HcParamsFor(w.hc_attn, c), a, post, comb);
  ops::RmsNorm(ctx.op, a, w.attn_norm, eps, a, numerics_.bf16_norm_outputs);
  const TensorView heads_out = Attention(ctx, w, a);
  // Only now may the chunks' rows enter the rings: their earlier queries read older rows there.
  // Nothing else in the layer reads the ring or writes the fresh rows, so the copy runs beside the
  // rest of it (on side stream 1: the MoE forks onto side stream 0) until the layer's end.
  StepBranches ring(ctx, ForkStreams(ctx), 1, 1);
  ring.Add(1, [&](const StepContext& ring_ctx) { WriteRing(ring_ctx, w); });
  ring.Add(0, [&](const StepContext& layer_ctx) {
    AttentionOutput(layer_ctx, w, heads_out, o);
    ops::HcPost(layer_ctx.op, o, streams, post, comb, mid);

    ops::HcPre(layer_ctx.op, mid, HcParamsFor(w.hc_ffn, c), a, post, comb);
    ops::RmsNorm(layer_ctx.op, a, w.ffn_norm, eps, a, numerics_.bf16_norm_outputs);
    Moe(layer_ctx, w, a, o);
    ops::HcPost(layer_ctx.op, o, mid, post, comb, streams);
  });
  ring.Run();
}

void V4Model::Moe(const StepContext& ctx, const BlockWeights& w, const TensorView& x,
                  const TensorView& out) const {
  const auto& c = config_;
  const MoeWeights& m = w.ffn;
  const int64_t tokens = x.size(0), d = c.hidden_size, k = c.num_experts_per_tok;
  const float limit = static_cast<float>(c.swiglu_limit);
  Workspace& ws = *ctx.ws;

  // The router reads x as it is (BF16 values under bf16_norm_outputs); the experts' FP8/FP4
  // linears read it (and their w2 inputs) through the reference's activation rounding when
  // fp8_activations is on.
  const TensorView xq = QuantizedCopy(ctx, x);
  // The shared expert (branch 1) runs beside the router and the routed experts (branch 0).
  StepBranches branches(ctx, ForkStreams(ctx), 1);
  const TensorView ys = ws.Alloc(DType::kF32, {tokens, d});
  branches.Add(1, [&](const StepContext& shared_ctx) {
    const int64_t shared_inter = m.shared.w1.out_features;
    TensorView g, u;
    if (!m.shared.w13.empty()) {  // w1 and w3 joined: one product, its two column halves
      const TensorView gs = ws.Alloc(DType::kF32, {tokens, 2 * shared_inter});
      QuantizedLinear(shared_ctx, xq, m.shared.w13, gs);
      g = gs.Columns(0, shared_inter);
      u = gs.Columns(shared_inter, 2 * shared_inter);
    } else {
      g = ws.Alloc(DType::kF32, {tokens, shared_inter});
      u = ws.Alloc(DType::kF32, {tokens, shared_inter});
      QuantizedLinear(shared_ctx, xq, m.shared.w1, g);
      QuantizedLinear(shared_ctx, xq, m.shared.w3, u);
    }
    ops::ClampedSwiGlu(shared_ctx.op, g, u, limit, TensorView());
    QuantizeLinearInput(shared_ctx, g);
    QuantizedLinear(shared_ctx, g, m.shared.w2, ys);
  });
  const TensorView ye = ws.Alloc(DType::kF32, {std::max<int64_t>(tokens * k, 1), d});
  TensorView slot_rows, expert_ids;
  branches.Add(0, [&](const StepContext& routed) { RoutedExperts(routed, w, x, xq, ye, slot_rows, expert_ids); });
  branches.Run();
  ops::MoeCombine(ctx.op, ye, slot_rows, expert_ids, k, ys, out);
}

void V4Model::RoutedExperts(const StepContext& ctx, const BlockWeights& w, const TensorView& x, const TensorView& xq,
                            const TensorView& ye, TensorView& slot_rows, TensorView& expert_ids) const {
  const auto& c = config_;
  const MoeWeights& m = w.ffn;
  const int64_t tokens = x.size(0), d = c.hidden_size, k = c.num_experts_per_tok;
  const int64_t inter = c.moe_intermediate_size, num_experts = c.n_routed_experts;
  const float limit = static_cast<float>(c.swiglu_limit);
  Workspace& ws = *ctx.ws;

  const TensorView gate_logits = ws.Alloc(DType::kF32, {tokens, num_experts});
  DenseLinear(ctx, x, m.gate, gate_logits, NormOutputInput());
  ops::RouterParams rp;
  rp.score = c.scoring_func == ScoringFunc::kSqrtSoftplus ? ops::RouterScore::kSqrtSoftplus
             : c.scoring_func == ScoringFunc::kSigmoid    ? ops::RouterScore::kSigmoid
                                                          : ops::RouterScore::kSoftmax;
  rp.num_experts = num_experts;
  rp.top_k = k;
  rp.route_scale = static_cast<float>(c.routed_scaling_factor);
  rp.normalize = c.norm_topk_prob;
  if (w.hash_routed) {
    rp.tid2eid = m.tid2eid.data<int64_t>();
    rp.tid2eid_rows = m.tid2eid.size(0);
  } else {
    rp.bias = m.gate_bias.data<float>();
  }
  expert_ids = ws.Alloc(DType::kI32, {tokens, k});
  const TensorView expert_weights = ws.Alloc(DType::kF32, {tokens, k});

  // The router, then the rows grouped by expert. A token whose hash table names the same expert
  // twice gets that expert's output once, with the weight of one slot (the normalization still
  // counts both): the reference adds with an index-put that keeps one write per token, and its
  // goldens depend on it. The row count (offsets[E]) stays where MoeAlign wrote it: every op after
  // it is sized by the bound tokens·k and reads the count itself, so nothing here waits for the
  // device.
  const int64_t slots = tokens * k, bound = std::max<int64_t>(slots, 1);
  const TensorView offsets = ws.Alloc(DType::kI32, {num_experts + 1});
  const TensorView sorted_slots = ws.Alloc(DType::kI32, {slots});
  slot_rows = ws.Alloc(DType::kI32, {slots});
  const TensorView scratch =
      ws.Alloc(DType::kI8, {static_cast<int64_t>(ops::MoeAlignScratchBytes(slots, num_experts))});
  ops::RouteAndAlign(ctx.op, gate_logits, ctx.token_ids, rp, expert_ids, expert_weights, offsets, sorted_slots,
                     slot_rows, scratch);

  const ExpertTables& experts = expert_tables_.at(static_cast<size_t>(w.layer));
  const TensorView xe = ws.Alloc(DType::kF32, {bound, d}), row_weights = ws.Alloc(DType::kF32, {bound});
  // gate and up; with w1 and w3 joined, the two column halves of one product.
  const bool joined = !experts.w13.experts.empty();
  const TensorView gu = joined ? ws.Alloc(DType::kF32, {bound, 2 * inter}) : TensorView();
  const TensorView ge = joined ? gu.Columns(0, inter) : ws.Alloc(DType::kF32, {bound, inter});
  const TensorView ue = joined ? gu.Columns(inter, 2 * inter) : ws.Alloc(DType::kF32, {bound, inter});
  const TensorView experts_scratch =
      ws.Alloc(DType::kI8, {static_cast<int64_t>(ops::ExpertsLinearScratchBytes(bound, num_experts))});
  const TensorView routed_rows = offsets.Slice(num_experts, num_experts + 1);
  // Where the GPU quantizes each projection's input once (reused: the three calls run in order).
  const ops::ExpertsWeight& first = joined ? experts.w13 : experts.w1;
  const size_t codes_bytes = std::max(ops::ExpertsLinearCodesBytes(ctx.op, bound, first, QuantizedInput()),
                                      ops::ExpertsLinearCodesBytes(ctx.op, bound, experts.w2, QuantizedInput()));
  const TensorView codes =
      codes_bytes == 0 ? TensorView() : ws.Alloc(DType::kI8, {static_cast<int64_t>(codes_bytes)});
  // With the FP4 experts on BF16 MMAs (DEEPINFER_FP4_BF16), the gather writes w1/w3's input into the
  // codes as those calls read it (act_quant'ed BF16) instead of f32 rows they would quantize again.
  const bool x_in_bf16 = ops::ExpertsLinearTakesBf16X(ctx.op, bound, first, QuantizedInput(), codes) &&
                         (joined || ops::ExpertsLinearTakesBf16X(ctx.op, bound, experts.w3, QuantizedInput(), codes));
  // Else, on the FP8-input path (DEEPINFER_EXPERTS_X_CODES), the gather and the SwiGLU write the e4m3
  // codes that each call would act_quant its f32 rows into (where the kernels round x themselves:
  // no model-side rounding comes between).
  auto takes_fp8_codes = [&](const ops::ExpertsWeight& weight) {
    return act_quant_in_kernels_ && ops::ExpertsLinearTakesFp8Codes(ctx.op, bound, weight, QuantizedInput(), codes);
  };
  const bool x_in_fp8 = !x_in_bf16 && takes_fp8_codes(first) && (joined || takes_fp8_codes(experts.w3));
  const bool x_in_codes = x_in_bf16 || x_in_fp8;
  if (x_in_bf16) {
    ops::MoeGatherBf16(ctx.op, xq, sorted_slots, offsets, k, expert_weights, codes, row_weights);
  } else if (x_in_fp8) {
    ops::MoeGatherFp8Codes(ctx.op, xq, sorted_slots, offsets, k, expert_weights, first, codes, row_weights);
  } else {
    ops::MoeGather(ctx.op, xq, sorted_slots, offsets, k, expert_weights, xe, row_weights);
  }
  if (joined) {
    ops::ExpertsLinear(ctx.op, xe, offsets, experts.w13, gu, experts_scratch, QuantizedInput(), false, codes,
                       x_in_codes);
  } else {
    ops::ExpertsLinear(ctx.op, xe, offsets, experts.w1, ge, experts_scratch, QuantizedInput(), false, codes,
                       x_in_codes);
    ops::ExpertsLinear(ctx.op, xe, offsets, experts.w3, ue, experts_scratch, QuantizedInput(), true, codes,
                       x_in_codes);
  }
  // Likewise (unless DEEPINFER_SWIGLU_BF16=0) the SwiGLU writes w2's input into the codes (the gate
  // rows stay unwritten then).
  const bool h_in_bf16 = x_in_bf16 && ops::SwiGluWritesBf16Codes(ctx.op) &&
                         ops::ExpertsLinearTakesBf16X(ctx.op, bound, experts.w2, QuantizedInput(), codes);
  const bool h_in_fp8 = x_in_fp8 && takes_fp8_codes(experts.w2);
  const bool h_in_codes = h_in_bf16 || h_in_fp8;
  if (h_in_bf16) {
    ops::ClampedSwiGluBf16(ctx.op, ge, ue, limit, row_weights, routed_rows, codes);
  } else if (h_in_fp8) {
    ops::ClampedSwiGluFp8Codes(ctx.op, ge, ue, limit, row_weights, routed_rows, experts.w2, codes);
  } else {
    ops::ClampedSwiGlu(ctx.op, ge, ue, limit, row_weights, routed_rows);
    QuantizeLinearInput(ctx, ge, routed_rows);
  }
  ops::ExpertsLinear(ctx.op, ge, offsets, experts.w2, ye, experts_scratch, QuantizedInput(), true, codes,
                     h_in_codes);
}

}  // namespace deepinfer::v4
