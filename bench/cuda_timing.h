// Host helpers the CUDA benchmarks share (ceilings, read patterns, phases): a CUDA runtime call
// checked into a deepinfer::Error, device time on a stream between two events, and one value read
// back from device memory.
#pragma once

#include <cuda_runtime.h>

#include "base/error.h"
#include "device/buffer.h"
#include "device/cuda_stream.h"

// Throws deepinfer::Error naming the call and the runtime's message unless it returned cudaSuccess.
#define DI_BENCH_CUDA(call)                                                                         \
  do {                                                                                              \
    const cudaError_t di_bench_err_ = (call);                                                       \
    if (di_bench_err_ != cudaSuccess) DI_THROW("{}: {}", #call, cudaGetErrorString(di_bench_err_)); \
  } while (0)

namespace deepinfer::bench {

// Device seconds between events recorded on `stream` before and after `enqueue()`.
template <typename Enqueue>
double TimeOnStream(const CudaStream& stream, Enqueue&& enqueue) {
  CudaEvent start(true), stop(true);
  start.Record(stream.get());
  enqueue();
  stop.Record(stream.get());
  stop.Synchronize();
  return 1e-3 * static_cast<double>(CudaEvent::ElapsedMs(start, stop));
}

// The T at the start of `b` once the work queued on `stream` so far has finished.
template <typename T>
T ReadBack(const Buffer& b, const CudaStream& stream) {
  T host{};
  DI_BENCH_CUDA(cudaMemcpyAsync(&host, b.data(), sizeof(T), cudaMemcpyDeviceToHost, stream.get()));
  stream.Synchronize();
  return host;
}

}  // namespace deepinfer::bench
