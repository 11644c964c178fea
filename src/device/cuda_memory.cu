// CUDA build: device allocations through the runtime API, errors turned into deepinfer::Error.
#include <cuda_runtime.h>

#include "base/error.h"
#include "device/cuda_memory.h"

namespace deepinfer {

bool CudaBackendCompiled() { return true; }

void* CudaMalloc(size_t bytes, int device_index) {
  cudaError_t err = cudaSetDevice(device_index);
  DI_CHECK(err == cudaSuccess, "cudaSetDevice({}): {}", device_index, cudaGetErrorString(err));
  void* ptr = nullptr;
  err = cudaMalloc(&ptr, bytes);
  DI_CHECK(err == cudaSuccess, "cudaMalloc({} bytes) on device {}: {}", bytes, device_index,
           cudaGetErrorString(err));
  return ptr;
}

void CudaFree(void* ptr, int device_index) {
  cudaSetDevice(device_index);
  cudaFree(ptr);
}

}  // namespace deepinfer
