#include "bench/step_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>

#include <fmt/format.h>

#include "base/error.h"
#include "bench/kernel_trace.h"
#include "device/arena.h"
#include "device/buffer.h"
#include "device/cuda_stream.h"
#include "device/graph_paths.h"
#include "kernels/cpu/hash_uniform.h"
#include "model/workspace.h"
#include "ops/ops.h"

namespace deepinfer::bench {

namespace {

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One benchmark step: `batch` sequences of `tokens` tokens at `context`, each on its own slot and
// consecutive blocks, with its state and input ids.
struct Step {
  std::unique_ptr<ModelState> state;
  std::vector<int32_t> block_tables;
  std::vector<int32_t> ids;
  ForwardBatch batch;
  Buffer logits;
  TensorView logits_view;
};

size_t StateBytes(const Model& model, int64_t batch, int64_t blocks, int64_t block_size) {
  return model.BytesPerSlot(block_size) * static_cast<size_t>(batch) +
         model.BytesPerBlock(block_size) * static_cast<size_t>(blocks);
}

std::unique_ptr<Step> MakeStep(const Model& model, const StepBenchOptions& o, cudaStream_t stream, int64_t batch,
                               int64_t tokens, int64_t context) {
  auto step = std::make_unique<Step>();
  const int64_t bs = o.block_size;
  const int64_t blocks_per_seq = (context + tokens + bs - 1) / bs;
  const int64_t num_blocks = 1 + batch * blocks_per_seq;  // block 0: the null block
  step->state = model.CreateState(batch, num_blocks, bs, batch * tokens);
  step->state->SetStream(stream);
  step->state->FillForBenchmark(o.seed);
  step->block_tables.resize(static_cast<size_t>(batch * blocks_per_seq));
  for (size_t i = 0; i < step->block_tables.size(); ++i) step->block_tables[i] = static_cast<int32_t>(i + 1);
  const int64_t vocab = model.config().vocab_size;
  step->ids.resize(static_cast<size_t>(batch * tokens));
  for (size_t i = 0; i < step->ids.size(); ++i) {
    step->ids[i] = static_cast<int32_t>(cpu::HashIndex(o.seed + 7, i) % static_cast<uint64_t>(vocab));
  }
  ForwardBatch& b = step->batch;
  b.stream = stream;
  b.token_ids = step->ids.data();
  b.num_tokens = batch * tokens;
  for (int64_t s = 0; s < batch; ++s) {
    SequenceChunk c;
    c.token_offset = s * tokens;
    c.num_tokens = tokens;
    c.start_pos = context;
    c.state_slot = static_cast<int32_t>(s);
    c.block_table = step->block_tables.data() + s * blocks_per_seq;
    c.num_blocks = blocks_per_seq;
    c.want_logits = true;
    b.seqs.push_back(c);
  }
  step->logits = Buffer(static_cast<size_t>(batch * vocab) * sizeof(float), model.device());
  step->logits_view = TensorView(step->logits.data(), DType::kF32, {batch, vocab}, model.device());
  return step;
}

// Host seconds of one Forward call (the device is not waited for).
double QueueOne(const Model& model, Step& step) {
  const double t0 = WallSeconds();
  model.Forward(step.batch, *step.state, step.logits_view);
  return WallSeconds() - t0;
}

// Seconds per step of `iterations` forwards queued back to back, from device events. The host
// runs at most two steps ahead (the workspace's staging is double-buffered), so where it queues a
// step slower than the device runs one, this is the host's rate: the engine's eager rate.
double TimeEager(const Model& model, Step& step, const ops::OpContext& op, int iterations) {
  CudaEvent start(true), end(true);
  start.Record(op.stream);
  for (int i = 0; i < iterations; ++i) QueueOne(model, step);
  end.Record(op.stream);
  end.Synchronize();
  return CudaEvent::ElapsedMs(start, end) * 1e-3 / iterations;
}

// The same step captured once as a CUDA graph (static launch shapes), replayed `iterations` times:
// seconds per step into p.graph_seconds, the graph's kernels and nodes into p.graph_kernels and
// p.graph_nodes, the most kernels on one of its paths into p.graph_critical_kernels, its programmatic
// edges into p.graph_programmatic_edges.
void TimeGraph(const Model& model, Step& step, const ops::OpContext& op, int iterations, StepPoint& p) {
  ForwardBatch& b = step.batch;
  b.static_max_context = b.seqs.front().start_pos + b.seqs.front().num_tokens;
  model.Forward(b, *step.state, step.logits_view);  // eagerly: the workspace takes its shape
  PinnedBuffer staging(std::max<size_t>(model.LastStepStagedBytes(), 1));
  b.graph_staging = staging.data();
  b.graph_staging_bytes = staging.size();
  Buffer uploads;
  if (GraphUploadsInOneCopy()) {
    uploads = Buffer(staging.size(), op.device);
    b.graph_uploads = uploads.data();
  }
  CudaGraph graph;
  CudaGraph::BeginCapture(op.stream);
  try {
    model.Forward(b, *step.state, step.logits_view);
  } catch (...) {
    try {
      graph.EndCapture(op.stream);
    } catch (...) {
      // The forward's error is the one to report.
    }
    b.graph_staging = nullptr;
    b.graph_uploads = nullptr;
    throw;
  }
  graph.EndCapture(op.stream, ProgrammaticEdgesForTokens(b.num_tokens));
  graph.Launch(op.stream);  // warm-up
  CudaEvent start(true), end(true);
  start.Record(op.stream);
  for (int i = 0; i < iterations; ++i) graph.Launch(op.stream);
  end.Record(op.stream);
  end.Synchronize();
  p.graph_seconds = CudaEvent::ElapsedMs(start, end) * 1e-3 / iterations;
  // DEEPINFER_KERNEL_TRACE=FILE: three more replays, each alone, their kernels' timelines appended.
  if (const char* trace_path = std::getenv("DEEPINFER_KERNEL_TRACE"); trace_path != nullptr && *trace_path != '\0') {
    for (int replay = 0; replay < 3; ++replay) {
      std::unique_ptr<KernelTrace> trace = KernelTrace::Start();
      graph.Launch(op.stream);
      CudaEvent done;
      done.Record(op.stream);
      done.Synchronize();
      AppendKernelTrace(trace_path,
                        fmt::format("{} batch {} tokens {} context {} replay {} graph_ms {:.4f}", p.kind, p.batch,
                                    p.tokens_per_seq, p.context, replay, p.graph_seconds * 1e3),
                        trace->Stop());
    }
  }
  b.graph_staging = nullptr;
  b.graph_staging_bytes = 0;
  b.graph_uploads = nullptr;
  b.static_max_context = 0;
  p.graph_kernels = static_cast<int64_t>(graph.KernelNodes());
  p.graph_nodes = static_cast<int64_t>(graph.Nodes());
  p.graph_critical_kernels = static_cast<int64_t>(graph.CriticalPathKernels());
  p.graph_programmatic_edges = static_cast<int64_t>(graph.ProgrammaticEdges());
}

// One step with every op timed, queued whole behind a spinning kernel (the previous steps have
// finished, so nothing makes the host wait), so the op times hold no gaps of the host's making.
StepProfile Profile(const Model& model, Step& step, const ops::OpContext& op, double host_seconds) {
  EventOpProfiler profiler;
  step.batch.profiler = &profiler;
  ops::DeviceSpin(op, static_cast<int64_t>(std::min(2e6, 3e6 * host_seconds + 2000)));
  QueueOne(model, step);
  step.batch.profiler = nullptr;
  profiler.Collect();
  return profiler.totals();
}

size_t StateBudget(const Model& model, const StepBenchOptions& o) {
  if (o.state_budget_bytes > 0) return o.state_budget_bytes;
  size_t free_bytes = 0, total_bytes = 0;
  DeviceArena::MemoryInfo(model.device().index, &free_bytes, &total_bytes);
  return static_cast<size_t>(0.85 * static_cast<double>(free_bytes));
}

StepPoint RunPoint(const Model& model, const StepBenchOptions& o, CudaStream& stream, const std::string& kind,
                   int64_t batch, int64_t tokens, int64_t context, int iterations, size_t budget) {
  StepPoint p;
  p.kind = kind;
  p.batch = batch;
  p.tokens_per_seq = tokens;
  p.context = context;
  p.cost = model.EstimateStepCost({batch, tokens, context});
  const int64_t blocks = 1 + batch * ((context + tokens + o.block_size - 1) / o.block_size);
  const size_t state_bytes = StateBytes(model, batch, blocks, o.block_size);
  if (state_bytes > budget) {
    p.skipped = "state of " + std::to_string(state_bytes >> 20) + " MiB over the budget of " +
                std::to_string(budget >> 20) + " MiB";
    return p;
  }
  const ops::OpContext op{model.device(), stream.get()};
  std::unique_ptr<Step> step = MakeStep(model, o, stream.get(), batch, tokens, context);
  double host = 0;
  for (int i = 0; i < std::max(o.warmup, 1); ++i) host = QueueOne(model, *step);
  stream.Synchronize();
  p.eager_seconds = TimeEager(model, *step, op, iterations);
  p.workspace_peak_bytes = model.LastStepWorkspacePeakBytes();
  if (o.cuda_graphs && kind == "decode") TimeGraph(model, *step, op, iterations, p);
  if (o.profile) {
    p.profile = Profile(model, *step, op, host);
    p.busy_seconds = 0;
    for (const auto& [key, t] : p.profile) p.busy_seconds += t.seconds;
  }
  stream.Synchronize();
  return p;
}

void RequireCuda(const Model& model) {
  DI_CHECK(model.device().type == DeviceType::kCuda,
           "the step benchmarks time the device: load the model with --device cuda");
}

}  // namespace

double StepPoint::best_seconds() const {
  if (eager_seconds < 0) return -1;
  return graph_seconds > 0 ? std::min(eager_seconds, graph_seconds) : eager_seconds;
}

std::vector<StepPoint> RunDecodeBench(const Model& model, const StepBenchOptions& o) {
  RequireCuda(model);
  CudaStream stream(model.device().index);
  const size_t budget = StateBudget(model, o);
  std::vector<StepPoint> points;
  for (int64_t context : o.contexts) {
    for (int64_t batch : o.batches) {
      points.push_back(RunPoint(model, o, stream, "decode", batch, 1, context, o.decode_iterations, budget));
    }
  }
  return points;
}

std::vector<StepPoint> RunPrefillBench(const Model& model, const StepBenchOptions& o) {
  RequireCuda(model);
  CudaStream stream(model.device().index);
  const size_t budget = StateBudget(model, o);
  std::vector<StepPoint> points;
  for (int64_t prompt : o.prompts) {
    points.push_back(RunPoint(model, o, stream, "prefill", 1, prompt, 0, o.prefill_iterations, budget));
  }
  return points;
}

LayerMix LayerMixOf(const ModelConfig& config) {
  LayerMix mix;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) ++mix[config.compress_ratio(l)];
  return mix;
}

namespace {

// "layer 3 csa" -> 3; -1 for other scopes.
int64_t ScopeLayer(const std::string& scope) {
  if (scope.rfind("layer ", 0) != 0) return -1;
  return std::stoll(scope.substr(6));
}

}  // namespace

Extrapolation Extrapolate(const StepPoint& point, const LayerMix& mix, const Rates& rates) {
  Extrapolation e;
  if (point.best_seconds() <= 0 || point.profile.empty()) {
    e.why_not = "no measured, profiled step";
    return e;
  }
  // Profiled device time per layer and outside the layers.
  std::map<int64_t, double> layer_seconds;
  double outside = 0, profiled = 0;
  for (const auto& [key, t] : point.profile) {
    profiled += t.seconds;
    const int64_t layer = ScopeLayer(key.first);
    if (layer >= 0) {
      layer_seconds[layer] += t.seconds;
    } else {
      outside += t.seconds;
    }
  }
  struct Mean {
    double seconds = 0, weight = 0, state = 0;
    int64_t n = 0;
  };
  std::map<int64_t, Mean> by_ratio;
  double layer_weight = 0, layer_state = 0;
  for (const LayerCost& l : point.cost.layers) {
    Mean& m = by_ratio[l.compress_ratio];
    m.seconds += layer_seconds[l.layer];
    m.weight += l.weight_bytes;
    m.state += l.state_read_bytes;
    ++m.n;
    layer_weight += l.weight_bytes;
    layer_state += l.state_read_bytes;
  }
  double seconds = outside;
  e.weight_bytes = point.cost.weight_bytes - layer_weight;
  e.state_read_bytes = point.cost.state_read_bytes - layer_state;
  for (const auto& [ratio, count] : mix) {
    const auto it = by_ratio.find(ratio);
    if (it == by_ratio.end()) {
      e.why_not = "the benchmarked model has no layer of compress ratio " + std::to_string(ratio);
      return e;
    }
    const Mean& m = it->second;
    const double n = static_cast<double>(count) / static_cast<double>(m.n);
    seconds += n * m.seconds;
    e.weight_bytes += n * m.weight;
    e.state_read_bytes += n * m.state;
  }
  // The profile's op times carry the events' own overhead: scale the measured step instead.
  e.step_seconds = point.best_seconds() * seconds / profiled;
  e.floor_seconds = rates.copy_bytes_per_s > 0 ? (e.weight_bytes + e.state_read_bytes) / rates.copy_bytes_per_s : 0;
  e.ok = true;
  return e;
}

nlohmann::json ToJson(const StepPoint& p, const Rates& rates, const LayerMix* mix) {
  using nlohmann::json;
  json j = {{"kind", p.kind}, {"batch", p.batch}, {"tokens_per_seq", p.tokens_per_seq}, {"context", p.context}};
  if (!p.skipped.empty()) {
    j["skipped"] = p.skipped;
    return j;
  }
  const double best = p.best_seconds();
  const StepCost& c = p.cost;
  j["eager_seconds"] = p.eager_seconds;
  if (p.busy_seconds > 0) j["busy_seconds"] = p.busy_seconds;
  if (p.graph_seconds > 0) {
    j["graph_seconds"] = p.graph_seconds;
    j["graph_kernels"] = p.graph_kernels;
    j["graph_nodes"] = p.graph_nodes;
    j["graph_critical_kernels"] = p.graph_critical_kernels;
    j["graph_programmatic_edges"] = p.graph_programmatic_edges;
  }
  j["step_seconds"] = best;
  j["tokens_per_s"] = static_cast<double>(p.batch * p.tokens_per_seq) / best;
  j["workspace_peak_bytes"] = p.workspace_peak_bytes;
  j["weight_bytes"] = c.weight_bytes;
  j["routed_expert_bytes"] = c.routed_expert_bytes;
  j["expected_experts_per_layer"] = c.expected_experts_per_layer;
  j["state_read_bytes"] = c.state_read_bytes;
  j["state_write_bytes"] = c.state_write_bytes;
  j["linear_flops"] = c.linear_flops;
  j["attention_flops"] = c.attention_flops;
  j["achieved_bytes_per_s"] = c.bytes() / best;
  if (rates.copy_bytes_per_s > 0) {
    const double floor = c.bytes() / rates.copy_bytes_per_s;
    j["memory_floor_seconds"] = floor;
    j["step_over_floor"] = best / floor;
  }
  // Device time by category from the profile (linear layers, attention, the rest).
  double linear = 0, attention = 0, other = 0;
  json ops = json::object();
  for (const auto& [key, t] : p.profile) {
    const std::string& op = key.second;
    if (op == "linear" || op == "dense_linear" || op == "grouped_linear" || op == "experts_linear") {
      linear += t.seconds;
    } else if (op == "sparse_attention" || op == "indexer" || op == "attention_rows" ||
               op == "append_selected_rows" || op == "compressor") {
      attention += t.seconds;
    } else {
      other += t.seconds;
    }
    ops[op] = ops.value(op, 0.0) + t.seconds;
  }
  if (!p.profile.empty()) {
    j["profile_seconds"] = {{"linear", linear}, {"attention", attention}, {"other", other}, {"by_op", ops}};
    if (linear > 0) {
      j["linear_flops_per_s"] = c.linear_flops / linear;
      if (rates.fp8_gemm_flops_per_s > 0) j["linear_fraction_of_fp8_gemm"] = c.linear_flops / linear / rates.fp8_gemm_flops_per_s;
    }
  }
  if (mix != nullptr) {
    const Extrapolation e = Extrapolate(p, *mix, rates);
    json x = {{"ok", e.ok}};
    if (e.ok) {
      x["step_seconds"] = e.step_seconds;
      x["floor_seconds"] = e.floor_seconds;
      x["weight_bytes"] = e.weight_bytes;
      x["state_read_bytes"] = e.state_read_bytes;
      x["tokens_per_s"] = static_cast<double>(p.batch * p.tokens_per_seq) / e.step_seconds;
    } else {
      x["why_not"] = e.why_not;
    }
    j["extrapolated"] = x;
  }
  return j;
}

}  // namespace deepinfer::bench
