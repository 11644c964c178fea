// CPU-only build: there is no CUDA backend, so asking for device memory is a configuration error.
#include "base/error.h"
#include "device/cuda_memory.h"

namespace deepinfer {

bool CudaBackendCompiled() { return false; }

void* CudaMalloc(size_t bytes, int device_index) {
  DI_THROW("CUDA memory requested (device {}, {} bytes) but this build has no CUDA backend; "
           "configure with the 'cuda' preset",
           device_index, bytes);
}

void CudaFree(void*, int) {}

void CudaMemoryInfo(int device_index, size_t*, size_t*) {
  DI_THROW("CUDA device {} queried but this build has no CUDA backend", device_index);
}

}  // namespace deepinfer
