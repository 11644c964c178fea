// Offline step benchmarks on a CUDA model (issue 8): the device time of a decode step at given
// batch sizes and contexts, and of a one-sequence prefill, next to what the step must read and
// compute (Model::EstimateStepCost). The model is driven directly with ForwardBatches; the
// state of a context is filled with hash-uniform values instead of running its prefill.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/op_profiler.h"
#include "model/model.h"

namespace deepinfer::bench {

struct StepBenchOptions {
  std::vector<int64_t> batches{1, 8, 32, 64, 128, 256};
  std::vector<int64_t> contexts{1024, 8192, 32768};
  std::vector<int64_t> prompts{1024, 8192};
  int decode_iterations = 10;
  int prefill_iterations = 2;
  int warmup = 2;
  bool cuda_graphs = true;  // decode steps also timed as one replayed CUDA graph
  bool profile = true;      // one more step per point with every op timed (EventOpProfiler)
  int64_t block_size = 128;
  uint64_t seed = 1;
  // Points whose state would take more than this many bytes are skipped (0: 85% of the device
  // memory free when the benchmark starts).
  size_t state_budget_bytes = 0;
};

// Device seconds per (scope, op) of one profiled step.
using StepProfile = std::map<std::pair<std::string, std::string>, OpTime>;

struct StepPoint {
  std::string kind;          // "decode" or "prefill"
  int64_t batch = 0;         // sequences
  int64_t tokens_per_seq = 0;
  int64_t context = 0;       // positions already in each sequence's state
  // Seconds per step from device events: steps queued back to back by the host (at most two
  // ahead, as in the engine; where the host is the slower side this is its rate), and the step
  // as a replayed CUDA graph (< 0: not measured).
  double eager_seconds = -1;
  double graph_seconds = -1;
  // The graph's kernel launches and nodes (kernels and copies) per step (< 0: no graph).
  int64_t graph_kernels = -1, graph_nodes = -1;
  int64_t graph_critical_kernels = -1;  // the most kernels on one path of the graph (its branches overlap)
  int64_t graph_programmatic_edges = -1;  // its edges made programmatic (PDL; CudaGraph::EndCapture)
  // The profiled step's op times summed: the device's busy time in one step (plus the events'
  // own cost), without the gaps between ops (< 0: not profiled).
  double busy_seconds = -1;
  size_t workspace_peak_bytes = 0;  // the step's scratch memory at its peak (Model::LastStepWorkspacePeakBytes)
  StepCost cost;
  StepProfile profile;
  std::string skipped;       // non-empty: why the point was not measured
  double best_seconds() const;
};

std::vector<StepPoint> RunDecodeBench(const Model& model, const StepBenchOptions& options);
std::vector<StepPoint> RunPrefillBench(const Model& model, const StepBenchOptions& options);

// Ceilings measured in the same run, for the fractions (0: unknown).
struct Rates {
  double copy_bytes_per_s = 0;       // device-to-device copy, bytes read + written
  double fp8_gemm_flops_per_s = 0;   // cuBLASLt FP8 block-scaled GEMM
  double bf16_gemm_flops_per_s = 0;
};

// A model's layer counts by compress ratio (0: sliding window only, 4: CSA, 128: HCA), e.g.
// DeepSeek-V4-Flash's 2 / 21 / 20.
using LayerMix = std::map<int64_t, int64_t>;
LayerMix LayerMixOf(const ModelConfig& config);

// The point's time and floor scaled to a model with `mix` layers: per compress ratio, the mean
// measured layer (profile scopes "layer N kind") and the mean layer cost; embedding and head as
// measured. Needs a profile and every ratio of `mix` among the benchmarked model's layers.
struct Extrapolation {
  bool ok = false;
  std::string why_not;
  double step_seconds = 0;
  double floor_seconds = 0;      // (weights + state read) / copy bandwidth
  double weight_bytes = 0;
  double state_read_bytes = 0;
};
Extrapolation Extrapolate(const StepPoint& point, const LayerMix& mix, const Rates& rates);

nlohmann::json ToJson(const StepPoint& point, const Rates& rates, const LayerMix* mix);

}  // namespace deepinfer::bench
