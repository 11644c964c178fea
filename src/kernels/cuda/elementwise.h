// CUDA row-wise kernels, twins of src/kernels/cpu/elementwise.h (same contracts, device pointers,
// f32 activations, row strides in elements). Nothing here allocates or synchronizes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace deepinfer::cuda {

// y[m, :] = w ⊙ x[m, :] / sqrt(mean(x[m, :]²) + eps); `weight` (BF16/F16/F32, [n]) may be null.
// x and y may alias. bf16_out: each y value rounded to BF16 (nearest even, as Bf16RoundRows) as
// it is stored.
void RmsNorm(const float* x, int64_t ldx, int64_t m, int64_t n, const void* weight, DType weight_dtype,
             float eps, float* y, int64_t ldy, cudaStream_t stream, bool bf16_out = false);
// Tests only: rows of 513-8192 values held in registers (RmsNormRowKernel; the same bits as the
// loop kernel) on (1), off (0: the loop kernel), or as DEEPINFER_NORM_ROWS_IN_REGISTERS says (-1,
// the default: on unless 0); and how many launches took them in this process.
void SetRmsNormRowsInRegistersForTesting(int mode);
uint64_t RmsNormRowsInRegistersLaunchesForTesting();

// y[r, :] = table[ids[r], :] as f32; table [V, D] BF16/F16/F32 with row stride ld_table. An id
// outside [0, V) writes a row of NaN (the host validated ids before they reached the device).
void Embedding(const int32_t* ids, int64_t num_ids, const void* table, DType table_dtype, int64_t vocab,
               int64_t dim, int64_t ld_table, float* y, int64_t ldy, cudaStream_t stream);

// Rotates the pairs (x[2i], x[2i+1]) of the last 2·half channels of every head row by angle
// pos·inv_freq[i] (−pos·inv_freq[i] when `inverse`), angles in f32 as the CPU computes them.
// x: [M, H, D] with strides (ld_token, ld_head, 1); positions int64 [M]; inv_freq f32 [half].
void Rope(float* x, int64_t m, int64_t num_heads, int64_t head_dim, int64_t ld_token, int64_t ld_head,
          const int64_t* positions, const float* inv_freq, int64_t half, bool inverse, cudaStream_t stream);

// In place over rows of x [M, ·] (row stride ldx): channels [begin, end) quantized to e4m3 in
// blocks of `block` with power-of-two scales and back (cpu::Fp8RoundTrip per row).
void Fp8RoundTripRows(float* x, int64_t ldx, int64_t m, int64_t begin, int64_t end, int64_t block,
                      cudaStream_t stream);
// The same over rows r < min(m, *row_count) only, row_count a DEVICE int32 (null: all m rows); the
// launch depends on m alone and rows at or past the count are untouched.
void Fp8RoundTripRows(float* x, int64_t ldx, int64_t m, int64_t begin, int64_t end, int64_t block,
                      const int32_t* row_count, cudaStream_t stream);
// In place over rows of x [M, ·] (row stride ldx): channels [begin, end) rounded to the nearest
// BF16 (cpu::Bf16Round per row, bit for bit).
void Bf16RoundRows(float* x, int64_t ldx, int64_t m, int64_t begin, int64_t end, cudaStream_t stream);
// In place over rows of x [M, n]: e2m1 round trip in blocks of `block` (cpu::Fp4RoundTrip per row).
void Fp4RoundTripRows(float* x, int64_t ldx, int64_t m, int64_t n, int64_t block, cudaStream_t stream);
// In place orthonormal Walsh–Hadamard transform of every row (n a power of two, n <= 4096), the
// butterfly order of cpu::Hadamard.
void HadamardRows(float* x, int64_t ldx, int64_t m, int64_t n, cudaStream_t stream);

// V4's per-row steps on head rows of n <= kRowStepsMaxWidth values, in one launch, in place: row
// (t, h) of x [M, H, n] (strides ld_token, ld_head, 1) takes, in this order and each where asked,
//   RmsNorm (norm_weight may be null: unweighted) as RmsNorm above,
//   Rope of the last 2·rope_half channels at positions[t] as Rope above (inv_freq null: none),
//   the Hadamard transform as HadamardRows (n a power of two, scaled by 1/sqrt(n)),
//   where fp8_end > 0 (the state row's rounding): channels [0, fp8_end) through e4m3 in blocks of
//   fp8_block (<= 128) and [fp8_end, n) to BF16, as Fp8RoundTripRows and Bf16RoundRows,
//   every channel through e2m1 in blocks of fp4_block (<= 128), as Fp4RoundTripRows.
// Each value takes the operations of those kernels in their order: the same bits as launching them
// one after another.
constexpr int64_t kRowStepsMaxWidth = 512;
struct RowStepsArgs {
  bool norm = false;
  const void* norm_weight = nullptr;
  DType norm_weight_dtype = DType::kF32;
  float eps = 0.f;
  const int64_t* positions = nullptr;
  const float* inv_freq = nullptr;
  int64_t rope_half = 0;
  bool rope_inverse = false;
  bool hadamard = false;
  int64_t fp8_end = 0, fp8_block = 0;
  int64_t fp4_block = 0;
};
void RowSteps(float* x, int64_t m, int64_t num_heads, int64_t n, int64_t ld_token, int64_t ld_head,
              const RowStepsArgs& args, cudaStream_t stream);
// Whether ops::ApplyRowSteps takes RowSteps on CUDA: DEEPINFER_ROW_STEPS=1 (read once; unset or 0:
// the steps' own kernels, one launch each), or the tests' choice (SetRowStepsForTesting: 1 on, 0
// off, -1 the environment's). Launches of RowSteps by this process.
bool RowStepsOn();
void SetRowStepsForTesting(int mode);
uint64_t RowStepsLaunchesForTesting();

// g[r, i] = silu(min(g, limit)) · clamp(u, −limit, limit) · row_weights[r] (1 when null), in
// place into g; limit <= 0 disables the clamp. g, u: [M, n] with row strides.
void ClampedSwiGlu(float* g, int64_t ldg, const float* u, int64_t ldu, int64_t m, int64_t n, float limit,
                   const float* row_weights, cudaStream_t stream);
// The same over rows r < min(m, *row_count) only, row_count a DEVICE int32 (null: all m rows; e.g.
// offsets[E] of MoeAlign); the launch depends on m alone. Rows at or past the count are untouched.
void ClampedSwiGlu(float* g, int64_t ldg, const float* u, int64_t ldu, int64_t m, int64_t n, float limit,
                   const float* row_weights, const int32_t* row_count, cudaStream_t stream);

// x[i] *= factor for i < n.
void ScaleF32(float* x, int64_t n, float factor, cudaStream_t stream);
// x[i] = value for i < n.
void FillF32(float* x, int64_t n, float value, cudaStream_t stream);
// x[i] = cpu::HashUniform(seed, i, lo, hi) for i < n (kernels/cpu/hash_uniform.h), bit-exact
// with the host.
void FillHashUniformF32(float* x, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream);
// One thread that spins for `microseconds` of device time (benchmarks: the host queues a whole
// step behind it, so the step's kernels then run without waiting for the host).
void SpinMicroseconds(int64_t microseconds, cudaStream_t stream);

}  // namespace deepinfer::cuda
