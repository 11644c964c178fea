#include "device/graph_paths.h"

#include <algorithm>
#include <cstdlib>

#include "base/error.h"
#include "base/switches.h"

namespace deepinfer {

size_t LongestKernelChain(const std::vector<bool>& is_kernel, const std::vector<std::pair<size_t, size_t>>& edges) {
  const size_t n = is_kernel.size();
  std::vector<std::vector<size_t>> next(n);
  std::vector<size_t> incoming(n, 0);
  for (const auto& [from, to] : edges) {
    DI_CHECK(from < n && to < n, "graph edge {} -> {} names a node past the {} nodes", from, to, n);
    next[from].push_back(to);
    ++incoming[to];
  }
  // Kahn's order; chain[v]: the most kernels on a path ending at v, v included.
  std::vector<size_t> ready, chain(n, 0);
  for (size_t v = 0; v < n; ++v) {
    if (incoming[v] == 0) ready.push_back(v);
  }
  size_t visited = 0, longest = 0;
  while (!ready.empty()) {
    const size_t v = ready.back();
    ready.pop_back();
    ++visited;
    chain[v] += is_kernel[v] ? 1 : 0;
    longest = std::max(longest, chain[v]);
    for (const size_t w : next[v]) {
      chain[w] = std::max(chain[w], chain[v]);
      if (--incoming[w] == 0) ready.push_back(w);
    }
  }
  DI_CHECK(visited == n, "the graph's edges form a cycle ({} of {} nodes ordered)", visited, n);
  return longest;
}

int64_t ParsePdlMaxTokens(const char* value) {
  return ParseCountSwitch("DEEPINFER_PDL_MAX_TOKENS", value, kDefaultPdlMaxTokens,
                          "the most tokens a step may have for its graph's programmatic edges (0: none)");
}

bool ProgrammaticEdgesForTokens(int64_t tokens) {
  static const int64_t bound = ParsePdlMaxTokens(std::getenv("DEEPINFER_PDL_MAX_TOKENS"));
  return tokens <= bound;
}

}  // namespace deepinfer
