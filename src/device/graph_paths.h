// Path lengths in a captured CUDA graph's dependency DAG, computed on the host from its node kinds
// and edges (no CUDA calls: the CPU build and its tests have it too).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace deepinfer {

// The most kernel nodes on one path from a root to a leaf of a DAG of `is_kernel.size()` nodes
// with `edges` (from, to) as node indices: the launches a step's graph runs one after another at
// least, however its branches overlap (a one-stream capture: all of them). Throws if an index is
// out of range or the edges form a cycle.
size_t LongestKernelChain(const std::vector<bool>& is_kernel, const std::vector<std::pair<size_t, size_t>>& edges);

}  // namespace deepinfer
