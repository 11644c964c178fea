#include "bench/kernel_trace.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "base/error.h"

namespace deepinfer::bench {

void AppendKernelTrace(const std::string& path, const std::string& label, const std::vector<TracedKernel>& kernels) {
  std::unique_ptr<FILE, int (*)(FILE*)> out(std::fopen(path.c_str(), "a"), std::fclose);
  DI_CHECK(out != nullptr, "cannot open {} to append a kernel trace", path);
  uint64_t first = UINT64_MAX;
  for (const TracedKernel& k : kernels) first = std::min(first, k.start_ns);
  std::fprintf(out.get(), "trace %s\n", label.c_str());
  for (const TracedKernel& k : kernels) {
    std::fprintf(out.get(), "%llu\t%llu\t%u\t%d,%d,%d\t%d,%d,%d\t%s\n",
                 static_cast<unsigned long long>(k.start_ns - first), static_cast<unsigned long long>(k.end_ns - first),
                 k.stream, k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1], k.block[2], k.name.c_str());
  }
  std::fprintf(out.get(), "end\n");
}

}  // namespace deepinfer::bench
