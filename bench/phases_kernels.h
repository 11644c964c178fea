// The phase chains' kernels (bench/phases.h), behind a plain interface so that only this file goes
// through nvcc. Each returns the CUDA runtime's error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::bench {

// One phase's bytes: base 256-byte aligned, bytes a multiple of 256 (may be 0).
struct PhaseSpan {
  const uint8_t* base;
  uint64_t bytes;
};

// One phase as its own kernel on `grid` blocks of 256 threads: waits for the kernel before it
// (PdlPrologue), reads the span in 16-byte loads (four in flight a thread), adds their word sum
// to *sum and 1 to *steps.
cudaError_t LaunchPhaseRead(PhaseSpan span, unsigned grid, unsigned long long* sum, unsigned* steps,
                            cudaStream_t stream);

// The persistent kernel's blocks an SM can hold (256 threads, no shared memory).
cudaError_t PersistentPhasesBlocksPerSm(int* blocks_per_sm);

// Every phase of `spans` (DEVICE, `phases` of them) in one kernel of `grid` blocks, all resident:
// each phase read by every block's share, then a grid-wide barrier on barrier[0..1] (DEVICE, zero
// before the first launch; each launch leaves its count at zero again); with `prefetch`, each
// block asks L2 for its share of the next phase's bytes before the barrier. Adds the words read to
// *sum and `phases` to *steps.
cudaError_t LaunchPersistentPhases(const PhaseSpan* spans, int phases, unsigned grid, bool prefetch,
                                   unsigned long long* sum, unsigned* steps, unsigned* barrier, cudaStream_t stream);

}  // namespace deepinfer::bench
