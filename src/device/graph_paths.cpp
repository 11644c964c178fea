#include "device/graph_paths.h"

#include <algorithm>
#include <cstdlib>

#include "base/error.h"
#include "base/switches.h"

namespace deepinfer {

std::vector<size_t> LongestKernelPath(const std::vector<bool>& is_kernel,
                                      const std::vector<std::pair<size_t, size_t>>& edges) {
  const size_t n = is_kernel.size();
  std::vector<std::vector<size_t>> next(n);
  std::vector<size_t> incoming(n, 0);
  for (const auto& [from, to] : edges) {
    DI_CHECK(from < n && to < n, "graph edge {} -> {} names a node past the {} nodes", from, to, n);
    next[from].push_back(to);
    ++incoming[to];
  }
  // Kahn's order; chain[v]: the most kernels on a path ending at v, v included; before[v]: v's
  // predecessor on such a path (n at a root).
  std::vector<size_t> ready, chain(n, 0), before(n, n);
  for (size_t v = 0; v < n; ++v) {
    if (incoming[v] == 0) ready.push_back(v);
  }
  size_t visited = 0, end = n;
  while (!ready.empty()) {
    const size_t v = ready.back();
    ready.pop_back();
    ++visited;
    chain[v] += is_kernel[v] ? 1 : 0;
    if (end == n || chain[v] > chain[end]) end = v;
    for (const size_t w : next[v]) {
      if (before[w] == n || chain[v] > chain[w]) {
        chain[w] = chain[v];
        before[w] = v;
      }
      if (--incoming[w] == 0) ready.push_back(w);
    }
  }
  DI_CHECK(visited == n, "the graph's edges form a cycle ({} of {} nodes ordered)", visited, n);
  std::vector<size_t> path;
  for (size_t v = end; v != n; v = before[v]) {
    if (is_kernel[v]) path.push_back(v);
  }
  std::reverse(path.begin(), path.end());
  return path;
}

size_t LongestKernelChain(const std::vector<bool>& is_kernel, const std::vector<std::pair<size_t, size_t>>& edges) {
  return LongestKernelPath(is_kernel, edges).size();
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
