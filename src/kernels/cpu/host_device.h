// DI_HOST_DEVICE marks header-only functions that the CPU kernels and the CUDA kernels share
// (compiled for both sides by nvcc, for the host alone by the C++ compiler).
#pragma once

#if defined(__CUDACC__)
#define DI_HOST_DEVICE __host__ __device__
#else
#define DI_HOST_DEVICE
#endif
