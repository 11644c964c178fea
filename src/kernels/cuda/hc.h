// Manifold-constrained hyper-connections (mHC) on the GPU (dsv4-model.md §4): the device twins of
// kernels/cpu/hc.h, with the same math and the same contracts. S = hc_mult streams of width D per
// token, W = S·D; everything in fp32. Pointers are device pointers; nothing is allocated and
// nothing synchronizes (launches go on `stream`).
//
// Numerics against the CPU: the mixes (fn · X over W values and the sum of squares) use a fixed
// tree order (threads, warps, then the 8 blocks of a thread-block cluster that split W) instead
// of the CPU's sequential order, so they differ from it at the level of
// fp32 rounding of a W-term dot product. Everything after the mixes (sigmoids, Sinkhorn, the
// weighted stream sums, HcPost) performs the CPU's operations in the CPU's order without fused
// multiply-adds, so given equal mixes it differs only where CUDA's expf differs from the host's.
// HcPost has no mixes and no exp: it reproduces an x86 build of the CPU kernel bit for bit.
//
// Batch invariant: a token's outputs do not depend on M or on the other tokens.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::cuda {

constexpr int64_t kHcMaxStreams = 16;  // the CPU's limit on S

struct HcParams {
  const float* fn = nullptr;     // [(2+S)·S, W] (HcPre) or [S, W] (HcHead), rows contiguous
  const float* base = nullptr;   // [(2+S)·S] or [S]
  const float* scale = nullptr;  // [3] or [1]
  int64_t sinkhorn_iters = 20;
  float hc_eps = 1e-6f;    // added to pre, the Sinkhorn denominators, and the head weights
  float norm_eps = 1e-6f;  // inside the unweighted RMS over all W values of a token
  // Set by the launchers, not the caller: the mix kernels' first cluster asks L2 for fn before its
  // PDL wait (DEEPINFER_PREFETCH_WEIGHTS, off by default).
  bool prefetch_fn = false;
};

// x: [m, s, d] contiguous. Outputs: a [m, d] with row stride lda (a[t] = Σ_j pre_j · X[t, j]);
// post [m, s] contiguous; comb [m, s, s] contiguous (row j, column k: the weight of input
// stream j in output stream k). 1 <= s <= kHcMaxStreams; m may be 0.
void HcPre(const float* x, int64_t m, int64_t s, int64_t d, const HcParams& p, float* a, int64_t lda,
           float* post, float* comb, cudaStream_t stream);

// X'[t, k] = post[t, k] · o[t] + Σ_j comb[t, j, k] · X[t, j]. o: [m, d] with row stride ldo;
// x, x_out: [m, s, d] contiguous and must not alias; post [m, s], comb [m, s, s] contiguous.
void HcPost(const float* o, int64_t ldo, const float* x, const float* post, const float* comb, int64_t m,
            int64_t s, int64_t d, float* x_out, cudaStream_t stream);

// y[t] = Σ_j (sigmoid(mix_j · scale[0] + base_j) + hc_eps) · X[t, j], mix = fn · X[t] / rms.
// x: [m, s, d] contiguous; y: [m, d] with row stride ldy.
void HcHead(const float* x, int64_t m, int64_t s, int64_t d, const HcParams& p, float* y, int64_t ldy,
            cudaStream_t stream);

// Tests only: HcPre's persistent mix kernel at S = 4 from 256 tokens on (-1: DEEPINFER_HC_PERSISTENT
// again, 0: the per-group cluster kernel, 1: the persistent one where W fits it), for the whole
// process; and how many HcPre calls it has run.
void SetHcPersistentMixForTesting(int mode);
uint64_t HcPersistentMixLaunchesForTesting();

// Tests only: the 4-token mix kernels' stride loop unrolled four times (the same bits) on (1), off
// (0), or as DEEPINFER_HC_MIX_UNROLL says (-1, the default: on unless 0), for the whole process;
// and how many launches took the unrolled loop.
void SetHcMixUnrollForTesting(int mode);
uint64_t HcMixUnrollLaunchesForTesting();

// Tests only: the same for the one-token mix kernel (DEEPINFER_HC_MIX_ONE_TOKEN_UNROLL: -1, the
// default, as it says: on unless 0), and how many launches took its unrolled loop.
void SetHcMixOneTokenUnrollForTesting(int mode);
uint64_t HcMixOneTokenUnrollLaunchesForTesting();

// Tests only: how many of 2 · 4096 · 32 sums of 32 lanes' values (random magnitudes over 2^±20, both
// signs) the mix kernels' reduce-scatter (WarpReduceScatter<32>) gives other bits for than WarpSum
// (0 expected; with perturb, one input per warp is one ulp off and the count must not be 0).
// Synchronizes the device.
uint64_t WarpReduceScatterMismatchesForTesting(bool perturb = false);

}  // namespace deepinfer::cuda
