#include "bench/kernel_trace.h"

#include "base/error.h"

namespace deepinfer::bench {

std::unique_ptr<KernelTrace> KernelTrace::Start() {
  DI_THROW("a kernel trace needs a CUDA build (DEEPINFER_CUDA=ON)");
}

}  // namespace deepinfer::bench
