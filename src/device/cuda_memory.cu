// CUDA build: device allocations through the runtime API; failures throw deepinfer::Error.
#include <cuda_runtime.h>

#include "device/cuda_error.h"
#include "device/cuda_memory.h"

namespace deepinfer {

bool CudaBackendCompiled() { return true; }

void* CudaMalloc(size_t bytes, int device_index) {
  DI_CUDA_CHECK(cudaSetDevice(device_index), "cudaSetDevice");
  void* ptr = nullptr;
  DI_CUDA_CHECK(cudaMalloc(&ptr, bytes), "cudaMalloc");
  return ptr;
}

void CudaFree(void* ptr, int device_index) {
  cudaSetDevice(device_index);
  cudaFree(ptr);
}

void CudaMemoryInfo(int device_index, size_t* free_bytes, size_t* total_bytes) {
  DI_CUDA_CHECK(cudaSetDevice(device_index), "cudaSetDevice");
  DI_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
}

}  // namespace deepinfer
