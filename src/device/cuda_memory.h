// Device allocation entry points. Built against the CUDA runtime in the CUDA preset; in a CPU-only
// build they report that no CUDA backend was compiled in.
#pragma once

#include <cstddef>

namespace deepinfer {

bool CudaBackendCompiled();
void* CudaMalloc(size_t bytes, int device_index);
void CudaFree(void* ptr, int device_index);
// Free and total bytes of the device now.
void CudaMemoryInfo(int device_index, size_t* free_bytes, size_t* total_bytes);

}  // namespace deepinfer
