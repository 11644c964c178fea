// A timeline of the kernels a stretch of device work ran, from CUPTI's activity records
// (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: each kernel's start and end in device nanoseconds, its
// stream and grid, inside CUDA graphs too; and the copies and memsets, named "[memcpy HtoD N B]"
// or "[memset N B]" with grid 0,0,0), for reading where a replayed step's time goes
// (tools/kernel_trace.py). CUPTI is dlopen'ed at run time (DEEPINFER_CUPTI names the library,
// else libcupti.so.13 on the loader's path or the CUDA toolkit's); the CPU build has no tracer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace deepinfer::bench {

struct TracedKernel {
  std::string name;           // demangled
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t stream = 0;
  int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
};

class KernelTrace {
 public:
  // Starts recording every kernel the process launches from now on. Throws (with the libraries
  // tried) where CUPTI cannot be loaded or refuses, or in a build without CUDA.
  static std::unique_ptr<KernelTrace> Start();
  virtual ~KernelTrace() = default;
  // Stops recording (after the caller synchronized the work) and returns the kernels recorded
  // since Start, in CUPTI's order.
  virtual std::vector<TracedKernel> Stop() = 0;
};

// Appends `kernels` to `path` as tab-separated lines under a "trace LABEL" header: start and end
// (ns, relative to the earliest start), stream, grid x,y,z, block x,y,z, name; then "end".
void AppendKernelTrace(const std::string& path, const std::string& label, const std::vector<TracedKernel>& kernels);

}  // namespace deepinfer::bench
