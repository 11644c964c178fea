// The kernel arguments of cuda::AttentionWithSink (attention.cu) and its tensor-core twin
// (attention_mma.cu): attention.h's shapes, as one struct passed by value to a kernel.
#pragma once

#include <cstdint>

#include "kernels/cuda/state_row.cuh"

namespace deepinfer::cuda {

struct AttentionArgs {
  const float* q;
  int64_t q_stride;
  const float* rows;
  int64_t row_stride;
  const int32_t* row_ids;
  const int32_t* counts;
  int64_t max_rows;
  const float* sinks;
  int num_heads;
  int d;
  float scale;
  float* out;
  int64_t out_stride;
  bool vec_rows;  // SIMT: rows may be copied as float4 (d, row_stride multiples of 4, base 16-aligned)
  bool vec_q;     // SIMT: q rows may be copied as float4 (d, q_stride multiples of 4, base 16-aligned)
  bool bf16_inputs;  // q and the probabilities rounded to BF16 (attention.h)
  PackedRowArgs packed{};  // fp8_end < 0: f32 rows; else packed rows (state_row.cuh)
};

}  // namespace deepinfer::cuda
