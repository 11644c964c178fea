// The read patterns' kernels (bench/read_patterns.h), behind a plain interface so that only this
// file goes through nvcc. Each returns the CUDA runtime's error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::bench {

// One pass of a ReadPattern (validated by the caller) over `base`: its kernel's launch geometry.
struct ReadLaunch {
  const uint8_t* base = nullptr;  // 16-byte aligned; rows · row_bytes bytes
  int64_t row_bytes = 0;
  int64_t items = 0;
  int64_t chunks = 0;             // row_bytes / chunk_bytes
  int block_rows = 0;
  int chunk_bytes = 0;
  int stages = 0;                 // 2-8
  int threads = 0;
  int smem_bytes = 0;
  bool tiled = false;
  bool per_warp = false;
  bool ring_restarts = false;
  int walk = 0;                   // ReadWalk's value
};

// Resident blocks of `l`'s kernel an SM holds (after allowing its dynamic shared memory).
cudaError_t ReadPatternBlocksPerSm(const ReadLaunch& l, int* blocks_per_sm);

// One pass on `grid` blocks; adds the word sum of every byte read (each once) to *sum.
cudaError_t LaunchReadPattern(const ReadLaunch& l, unsigned grid, unsigned long long* sum, cudaStream_t stream);

// A grid-stride read of `bytes` (a multiple of 16) from `base` (16-byte aligned) in 16-byte loads,
// four in flight a thread, on `grid` blocks of 256 threads; adds the bytes' word sum to *sum.
cudaError_t LaunchPlainRead(const uint8_t* base, size_t bytes, unsigned grid, unsigned long long* sum,
                            cudaStream_t stream);

}  // namespace deepinfer::bench
