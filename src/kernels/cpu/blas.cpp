#include "kernels/cpu/blas.h"

#include <mutex>

extern "C" void openblas_set_num_threads(int num_threads);

namespace deepinfer::cpu {

void EnsureBlasSingleThreaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace deepinfer::cpu
