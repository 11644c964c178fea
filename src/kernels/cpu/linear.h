// CPU linear layers: y[M,N] = x[M,K] · Wᵀ with W in any LinearWeight format, fp32 accumulation.
// Quantized weights are dequantized exactly to fp32 tiles on the fly (OpenBLAS sgemm for M > 4,
// a threaded dot-product kernel for M <= 4), so the result is the fp32 product with the
// dequantized weight: the reference's "exact" numerics.
#pragma once

#include "tensor/linear_weight.h"

namespace deepinfer::cpu {

// x: [M, K] f32 with row stride x.stride(0); y: [M, N] f32 contiguous rows. N = w.out_features.
void Linear(const TensorView& x, const LinearWeight& w, const TensorView& y);

// Grouped projection used by the V4 output path: W is [G*R, K]; for each group g,
// y[m, g, :] = W[g*R:(g+1)*R, :] · x[m, g, :]. x: [M, G, K] f32, y: [M, G, R] f32.
void GroupedLinear(const TensorView& x, const LinearWeight& w, int64_t num_groups,
                   const TensorView& y);

}  // namespace deepinfer::cpu
