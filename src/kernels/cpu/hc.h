// Manifold-constrained hyper-connections (mHC) on the CPU (dsv4-model.md §4). S = hc_mult streams
// of width D per token; all math in fp32.
#pragma once

#include "tensor/tensor_view.h"

namespace deepinfer::cpu {

struct HcParams {
  TensorView fn;     // [(2+S)*S, S*D] f32 (HcPre) or [S, S*D] (HcHead)
  TensorView base;   // [(2+S)*S] or [S] f32
  TensorView scale;  // [3] or [1] f32
  int64_t sinkhorn_iters = 20;
  float hc_eps = 1e-6f;    // added to pre, the Sinkhorn denominators, and the head weights
  float norm_eps = 1e-6f;  // inside the unweighted RMS over all S*D values
};

// X: [M, S, D]. Outputs: a [M, D] = Σ_j pre_j X_j; post [M, S]; comb [M, S, S] (row j, column k:
// the weight of input stream j in output stream k).
void HcPre(const TensorView& x, const HcParams& p, const TensorView& a, const TensorView& post,
           const TensorView& comb);

// X'[m, k] = post[m, k] · o[m] + Σ_j comb[m, j, k] · X[m, j]. o: [M, D]; X, X': [M, S, D] (must
// not alias).
void HcPost(const TensorView& o, const TensorView& x, const TensorView& post,
            const TensorView& comb, const TensorView& x_out);

// y[m] = Σ_j (sigmoid(mix_j · scale + base_j) + eps) · X[m, j]. y: [M, D].
void HcHead(const TensorView& x, const HcParams& p, const TensorView& y);

}  // namespace deepinfer::cpu
