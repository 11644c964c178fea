// Host-side facts about captured CUDA graphs, with no CUDA calls (the CPU build and its tests have
// them too): path lengths in a graph's dependency DAG from its node kinds and edges, and which
// steps' graphs get programmatic edges.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace deepinfer {

// The most kernel nodes on one path from a root to a leaf of a DAG of `is_kernel.size()` nodes
// with `edges` (from, to) as node indices: the launches a step's graph runs one after another at
// least, however its branches overlap (a one-stream capture: all of them). Throws if an index is
// out of range or the edges form a cycle.
size_t LongestKernelChain(const std::vector<bool>& is_kernel, const std::vector<std::pair<size_t, size_t>>& edges);
// The kernel nodes of one such path, in launch order (LongestKernelChain is its size).
std::vector<size_t> LongestKernelPath(const std::vector<bool>& is_kernel,
                                      const std::vector<std::pair<size_t, size_t>>& edges);

// Which captured steps get programmatic kernel-to-kernel edges (CudaGraph::EndCapture), by their
// token count: DEEPINFER_PDL_MAX_TOKENS=N keeps plain edges in the graphs of steps of more than N
// tokens (0: every graph). Unset or empty: kDefaultPdlMaxTokens. A count or an error naming the
// variable (ParseCountSwitch). Beside the forks (DEEPINFER_FORK_TOKENS), a chain's next kernel
// launched early by PDL holds SM slots that the other branch could use once a step fills the
// GPU: without PDL, decode batch 256 ran 9.124 -> 8.943 ms, 8.892 -> 8.830 and 8.767 -> 8.688
// (three calls, 2026-12-05), batch 64 within +-0.3% and batch 1 3% slower.
inline constexpr int64_t kDefaultPdlMaxTokens = 128;
int64_t ParsePdlMaxTokens(const char* value);
// Whether the graph of a step of `tokens` tokens may have programmatic edges under
// DEEPINFER_PDL_MAX_TOKENS (read once); DEEPINFER_PDL and the device decide the rest.
bool ProgrammaticEdgesForTokens(int64_t tokens);

}  // namespace deepinfer
