// OpenBLAS, used single-threaded: the CPU kernels split work across the engine's own thread
// pool (base/thread_pool.h) and call BLAS on each slice.
#pragma once

#include <cblas.h>

namespace deepinfer::cpu {

// Pins OpenBLAS to one thread (once per process). Call before any cblas_* use.
void EnsureBlasSingleThreaded();

}  // namespace deepinfer::cpu
