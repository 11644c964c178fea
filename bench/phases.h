// What a chain of dependent small steps costs as separate kernels against one persistent kernel:
// the question a persistent per-layer decode kernel (docs/performance.md, version 46's budget)
// has to answer before it is written. A chain is a list of phases; each reads its bytes (a weight
// of that size, or none: a norm, a rope, a top-k) and must start after the one before it ended.
//
// Four ways to run one pass of a chain, timed side by side in one run:
//   graph_pdl   a kernel a phase, captured into a CUDA graph whose chain edges are programmatic
//               (CudaGraph, as the decode steps run): each kernel's blocks launch early and wait in
//               griddepcontrol.wait for the one before;
//   graph       the same graph with plain edges;
//   persistent  one kernel on every SM, the phases separated by a grid-wide barrier (an atomic
//               counter and generation; every block resident);
//   persistent_prefetch  the same, each block also asking L2 for its share of the next phase's bytes
//               (cp.async.bulk.prefetch.L2) before the barrier.
// Every pass sums the 32-bit words it read; each way's first pass must give the plain sum of the
// chain's bytes, and count one step per phase.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace deepinfer::bench {

struct Phase {
  std::string name;
  int64_t bytes = 0;  // a multiple of 256; 0: the phase reads nothing
};

// One CSA layer's longest path at decode batch 1 (Flash's shapes, docs/performance.md): the mHC
// mixes' fn, the norms, wq_a, wq_b, the index and attention reads, wo_a, wo_b, the router and six
// routed experts' w1/w3 and w2, each as its bytes.
std::vector<Phase> BatchOneLayerChain();

// Throws deepinfer::Error naming the first phase whose bytes are negative or not a multiple of 256,
// or an empty chain.
void ValidateChain(const std::vector<Phase>& chain);
int64_t ChainBytes(const std::vector<Phase>& chain);

struct PhasesTiming {
  std::string way;            // graph_pdl, graph, persistent, persistent_prefetch
  double seconds = 0;         // per pass of the chain: mean over the timed passes
  double overhead_per_phase = 0;  // (seconds − the chain's bytes at the plain read's rate) / phases
  bool sums_agree = false;    // the first pass's word sum and step count are the chain's
  int64_t grid = 0;           // blocks of the persistent kernel (0 for the graphs)
};

struct PhasesReport {
  std::string device;
  std::string chain;
  int64_t phases = 0;
  int64_t bytes = 0;
  double plain_read_bytes_per_s = 0;  // the chain's bytes in one grid-stride read
  double floor_seconds = 0;           // bytes / plain_read_bytes_per_s
  int64_t programmatic_edges = 0;     // of the graph_pdl capture (0 where PDL is off or absent)
  std::vector<PhasesTiming> ways;
};

// Runs each way once checked, then `iterations` passes timed. Throws deepinfer::Error on CUDA
// errors and without the CUDA build.
PhasesReport TimePhases(int device_index, const std::vector<Phase>& chain, const std::string& chain_name,
                        int iterations);

nlohmann::json ToJson(const PhasesReport& r);

}  // namespace deepinfer::bench
