// Error reporting for CUDA translation units. nvcc's front end cannot compile fmt's compile-time
// format checks, so .cu files do not include base/error.h; they call these plain functions,
// implemented in a host C++ file, which throw deepinfer::Error.
#pragma once

namespace deepinfer {

// Throws "file:line: <what>: <cuda_message>".
[[noreturn]] void ThrowCudaError(const char* file, int line, const char* what, const char* cuda_message);

}  // namespace deepinfer

#define DI_CUDA_CHECK(call, what)                                                          \
  do {                                                                                     \
    const cudaError_t di_cuda_err_ = (call);                                               \
    if (di_cuda_err_ != cudaSuccess) {                                                     \
      ::deepinfer::ThrowCudaError(__FILE__, __LINE__, what, cudaGetErrorString(di_cuda_err_)); \
    }                                                                                      \
  } while (0)
