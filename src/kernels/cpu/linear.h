// CPU linear layers: y[M,N] = x[M,K] · Wᵀ with W in any LinearWeight format, fp32 accumulation.
// Quantized weights are dequantized exactly to fp32 tiles on the fly, so the result is the fp32
// product with the dequantized weight: the reference's "exact" numerics.
//
// Batch invariance: every y[m, o] is one fixed-order dot product (DotF32), whatever M is and
// whatever the other rows hold. A sequence's numbers therefore do not depend on what it is
// batched with or how its prompt was chunked, which makes the synchronous and overlapped loops,
// chunked and one-shot prefill, and any two batch compositions bit-identical.
#pragma once

#include "tensor/linear_weight.h"

namespace deepinfer::cpu {

// Σ a[i]·b[i] in a fixed order (8 lanes, then a fixed reduction tree, then the tail).
float DotF32(const float* a, const float* b, int64_t n);

// x: [M, K] f32 with row stride x.stride(0); y: [M, N] f32 with row stride. N = w.out_features.
void Linear(const TensorView& x, const LinearWeight& w, const TensorView& y);

// Grouped projection used by the V4 output path: W is [G*R, K]; for each group g,
// y[m, g, :] = W[g*R:(g+1)*R, :] · x[m, g, :]. x: [M, G, K] f32, y: [M, G, R] f32.
void GroupedLinear(const TensorView& x, const LinearWeight& w, int64_t num_groups,
                   const TensorView& y);

}  // namespace deepinfer::cpu
