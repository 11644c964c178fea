// Linear with FP8 weights and FP8 inputs at prefill sizes: the tiles come in by the Tensor Memory
// Accelerator (TMA), included by linear.cu after linear_wgmma.cuh, whose act_quant scratch,
// descriptors and per-element order it uses.
//
// TmaLinearKernel: 128 weight rows × 128 tokens per block (wgmma m64n128k32, one 64-row half per
// consumer warpgroup, the x tile shared by both), a 6-stage ring of 128-column chunks in shared
// memory: each stage holds the weight tile and the x codes (both 128 rows of 128 bytes, written by
// TMA in the 128-byte swizzle the descriptors read) and the chunk's 128 x scales. Every stage has
// a "full" mbarrier (the TMA's bytes arrived) and an "empty" one (all 256 consumer threads are
// done with it). Thread 0 issues the copies: the first 6 chunks before the loop, then in chunk
// c's iteration, after its own warpgroup has issued chunk c's MMAs, chunk c + 5 into the stage
// chunk c - 1 used. No thread copies bytes and there is no block barrier in the loop.
//
// Order of every output: the one of WgmmaBlock<kFp8> (linear_wgmma.cuh): per chunk an accumulator
// from +0 takes the chunk's four k32 steps in order, then part = fma(acc, w_scale·x_scale, part);
// part restarts from +0 at each 512-column slice; total = P_0, total += P_1, ... So a row's bits do
// not depend on the kernel that computed them, provided wgmma sums an output of an n128 MMA as it
// sums the same output of an n64 one (each output is its own dot product of the same 32 pairs);
// the batch-invariance tests, which take the 64-token kernel for few rows and this one for many,
// decide it.
//
// Used by Linear for FP8 weights whose rows are 16-byte aligned with a 16-byte multiple stride, for
// more than 64 rows (decode's fewer rows would pay for 128 columns of MMAs) where the layout does
// not split K (enough blocks of whole rows to fill the device), on an sm_90a build on compute
// capability 9.0, unless DEEPINFER_TMA=0.
#pragma once

#include <type_traits>

#include <cuda.h>  // CUtensorMap and the encoder's types; the encoder itself comes from the runtime

namespace tma {

constexpr int kChunk = wgmma::kChunk;          // 128 columns of e4m3 per row
constexpr int kBlockRows = wgmma::kBlockRows;  // 128 weight rows: one FP8 scale block
constexpr int kThreads = 256;  // two consumer warpgroups; thread 0 also issues the copies
// The x scales' boxes start at a row that is a multiple of kXsAlign (16 bytes of f32: the TMA's
// alignment of a box's first byte) and hold kXsAlign more rows than the tile (Ring::XScales).
constexpr int kXsAlign = 4;

// ---- mbarriers and TMA (PTX) ----------------------------------------------------------------------

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void BarrierInit(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SmemAddress(bar)), "r"(count) : "memory");
}

// Makes the initialized barriers visible to the async proxy (the TMA's complete_tx).
__device__ __forceinline__ void FenceBarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// This thread's arrival, announcing `bytes` of TMA writes that complete the phase with it.
__device__ __forceinline__ void BarrierArriveExpectTx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(SmemAddress(bar)), "r"(bytes)
               : "memory");
}

// The *At forms take the barrier's shared address (a kernel that keeps 32-bit shared addresses
// saves the generic-to-shared conversion).
__device__ __forceinline__ void BarrierArriveAt(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void BarrierArrive(uint64_t* bar) { BarrierArriveAt(SmemAddress(bar)); }

// Whether the phase of parity `parity` has completed (the barrier's current phase parity differs
// from it); may wait a while for it inside the instruction.
__device__ __forceinline__ bool BarrierTryWaitAt(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ bool BarrierTryWait(uint64_t* bar, uint32_t parity) {
  return BarrierTryWaitAt(SmemAddress(bar), parity);
}

// A wait that ends the kernel (__trap: the launch fails) instead of hanging: a barrier that 20 s
// of GPU time (%globaltimer) have not completed means a broken protocol, not a slow one (a chunk
// takes microseconds, and milliseconds under compute-sanitizer).
constexpr uint64_t kBarrierTimeoutNs = 20'000'000'000ull;

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

// Returns once the phase of parity `parity` has completed.
__device__ __forceinline__ void BarrierWaitAt(uint32_t bar, uint32_t parity) {
  if (BarrierTryWaitAt(bar, parity)) return;
  const uint64_t start = GlobalTimerNs();
  while (!BarrierTryWaitAt(bar, parity)) {
    if (GlobalTimerNs() - start > kBarrierTimeoutNs) __trap();
  }
}
__device__ __forceinline__ void BarrierWait(uint64_t* bar, uint32_t parity) { BarrierWaitAt(SmemAddress(bar), parity); }

// The box at (inner, outer) of the tensor `map` into shared memory at dst, completing `bar`'s
// transaction bytes. Elements outside the tensor are written as zeros.
__device__ __forceinline__ void TmaLoad2d(void* dst, const CUtensorMap* map, uint64_t* bar, int inner, int outer) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          SmemAddress(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(SmemAddress(bar)), "r"(inner), "r"(outer)
      : "memory");
}

// TmaLoad2d for a 3-D tensor map: the box at (inner, middle, outer).
__device__ __forceinline__ void TmaLoad3d(void* dst, const CUtensorMap* map, uint64_t* bar, int inner, int middle,
                                          int outer) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];\n" ::"r"(SmemAddress(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(SmemAddress(bar)), "r"(inner), "r"(middle), "r"(outer)
      : "memory");
}

// TmaLoad3d multicast: the box lands at dst's offset in every block of the cluster whose bit is
// set in `blocks` (bit r: rank r), each completing the transaction bytes of the barrier at bar's
// offset in its own shared memory.
__device__ __forceinline__ void TmaLoad3dMulticast(void* dst, const CUtensorMap* map, uint64_t* bar, int inner,
                                                   int middle, int outer, uint16_t blocks) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
      "[%0], [%1, {%3, %4, %5}], [%2], %6;\n" ::"r"(SmemAddress(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(SmemAddress(bar)), "r"(inner), "r"(middle), "r"(outer), "h"(blocks)
      : "memory");
}

// This thread's arrival on the barrier at bar's offset in the shared memory of the cluster's block
// `rank` (this block's own included).
__device__ __forceinline__ void BarrierArriveInBlock(uint64_t* bar, uint32_t rank) {
  asm volatile(
      "{\n"
      ".reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(SmemAddress(bar)),
      "r"(rank)
      : "memory");
}

// This block's rank in its cluster.
__device__ __forceinline__ uint32_t ClusterRank() {
  uint32_t rank = 0;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}

__device__ __forceinline__ void PrefetchTensorMap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// x's boxes for one chunk: the codes at (column, x_row) into `codes`, and the scales of the
// kXsAlign-aligned rows from x_row's (Ring::XScales finds x_row's) of chunk column / kChunk into
// `scales`, completing `bar`'s transaction bytes.
__device__ __forceinline__ void LoadXBoxes(void* codes, void* scales, uint64_t* bar, int column,
                                           const CUtensorMap* x_map, const CUtensorMap* xs_map, int x_row) {
  TmaLoad2d(codes, x_map, bar, column, x_row);
  TmaLoad2d(scales, xs_map, bar, x_row - x_row % kXsAlign, column / kChunk);
}

// The ring of a block's loads: load j (j = 0, 1, ... over the block's life: one per chunk of each
// of its tiles) lands in stage j % kStages: the weight tile (128 rows × 128 bytes, swizzled) at 0,
// the x codes (kTok rows, swizzled) at kX, the x scales at kXs: kXsBox floats from row
// x_row - x_row % kXsAlign (XScales finds x_row's), since a box's first byte in global memory must
// be 16-byte aligned (the TMA faults with an illegal instruction otherwise; the experts' tiles start
// at any row). full[s] completes when a load's bytes have arrived; empty[s] when all kThreads
// consumers have released it.
template <int kTok, int kStageCount = kTok == 128 ? 6 : 8>
struct Ring {
  static constexpr int kElems = kTok / 2;  // D fragment elements per thread
  static constexpr int kX = kBlockRows * kChunk;
  static constexpr int kXs = kX + kTok * kChunk;
  static constexpr int kXsBox = kTok + kXsAlign;  // the scales box (XTensorMaps)
  static constexpr int kTxBytes = kXs + kXsBox * 4;  // bytes the TMA writes per load (a box's every byte)
  static constexpr int kStageBytes = (kTxBytes + 1023) / 1024 * 1024;  // the swizzle's 1024-byte period
  static constexpr int kStages = kStageCount;
  static constexpr int kBarriers = kStages * kStageBytes;  // full[kStages], then empty[kStages]
  static constexpr int kEnd = kBarriers + 2 * kStages * 8;  // the kernel's own shared memory from here
  static_assert(kTok == 64 || kTok == 96 || kTok == 128, "64-, 96- or 128-token tiles");

  uint8_t* base;
  uint64_t* full;
  uint64_t* empty;

  __device__ __forceinline__ explicit Ring(uint8_t* smem)
      : base(smem),
        full(reinterpret_cast<uint64_t*>(smem + kBarriers)),
        empty(reinterpret_cast<uint64_t*>(smem + kBarriers) + kStages) {}
  // Thread 0, before the block's first barrier. `releases`: the arrivals that free a stage (every
  // consumer thread, or one per consumer warp: ReleaseByWarp); `fills`: those that complete its
  // load (the thread announcing the TMA's bytes, and any threads writing part of it themselves).
  __device__ __forceinline__ void Init(int releases = kThreads, int fills = 1) const {
    for (int s = 0; s < kStages; ++s) {
      BarrierInit(&full[s], fills);
      BarrierInit(&empty[s], releases);
    }
    FenceBarrierInit();
  }
  // Thread 0, before the block's first barrier: the three tensor maps Load reads prefetched, then
  // Init(releases).
  __device__ __forceinline__ void Setup(const CUtensorMap* w_map, const CUtensorMap* x_map, const CUtensorMap* xs_map,
                                        int releases = kThreads) const {
    PrefetchTensorMap(w_map);
    PrefetchTensorMap(x_map);
    PrefetchTensorMap(xs_map);
    Init(releases);
  }
  __device__ __forceinline__ uint8_t* Stage(int64_t j) const { return base + (j % kStages) * kStageBytes; }
  __device__ __forceinline__ uint32_t Parity(int64_t j) const { return static_cast<uint32_t>(j / kStages) & 1u; }
  // The scales of rows x_row .. x_row + kTok - 1 in `stage`, as Load(.., x_row) wrote them.
  __device__ __forceinline__ static const float* XScales(const uint8_t* stage, int x_row) {
    return reinterpret_cast<const float*>(stage + kXs) + x_row % kXsAlign;
  }
  // Every thread; the warp leaves converged (wgmma's .aligned instructions follow).
  __device__ __forceinline__ void WaitLoaded(int64_t j) const {
    BarrierWait(&full[j % kStages], Parity(j));
    __syncwarp();
  }
  // Returns once every consumer has released load j (its stage may take load j + kStages).
  __device__ __forceinline__ void WaitReleased(int64_t j) const { BarrierWait(&empty[j % kStages], Parity(j)); }
  __device__ __forceinline__ void Release(int64_t j) const { BarrierArrive(&empty[j % kStages]); }
  // The warp's one release of load j (Init(consumer warps)): every lane's reads of the stage are
  // done before lane 0 arrives.
  __device__ __forceinline__ void ReleaseByWarp(int64_t j, int lane) const {
    __syncwarp();
    if (lane == 0) Release(j);
  }
  // One thread: load j's x codes and scales alone (its stage free; other threads write the weight
  // tile and arrive themselves): column and x_row as Load's.
  __device__ __forceinline__ void LoadX(int64_t j, int column, const CUtensorMap* x_map, const CUtensorMap* xs_map,
                                        int x_row) const {
    uint64_t* bar = &full[j % kStages];
    uint8_t* stage = Stage(j);
    BarrierArriveExpectTx(bar, kTxBytes - kX);
    LoadXBoxes(stage + kX, stage + kXs, bar, column, x_map, xs_map, x_row);
  }
  // Thread 0: load j's three boxes (its stage free): the weight box at (column, w_row[, w_slab])
  // of w_map, the codes at (column, x_row), the scales at (x_row, chunk).
  __device__ __forceinline__ void Load(int64_t j, const CUtensorMap* w_map, int column, int w_row, int w_slab,
                                       const CUtensorMap* x_map, const CUtensorMap* xs_map, int x_row) const {
    uint64_t* bar = &full[j % kStages];
    uint8_t* stage = Stage(j);
    BarrierArriveExpectTx(bar, kTxBytes);
    if (w_slab < 0) {
      TmaLoad2d(stage, w_map, bar, column, w_row);
    } else {
      TmaLoad3d(stage, w_map, bar, column, w_row, w_slab);
    }
    LoadXBoxes(stage + kX, stage + kXs, bar, column, x_map, xs_map, x_row);
  }
  // Shared-address forms (a kernel keeping 32-bit addresses; `ring` the ring's own): load j's
  // full and empty barriers.
  __device__ __forceinline__ static uint32_t FullAt(uint32_t ring, uint32_t j) {
    return FullOfStage(ring, j % kStages);
  }
  __device__ __forceinline__ static uint32_t EmptyAt(uint32_t ring, uint32_t j) {
    return EmptyOfStage(ring, j % kStages);
  }
  // Stage s's (s < kStages) full and empty barriers.
  __device__ __forceinline__ static uint32_t FullOfStage(uint32_t ring, uint32_t s) { return ring + kBarriers + 8 * s; }
  __device__ __forceinline__ static uint32_t EmptyOfStage(uint32_t ring, uint32_t s) {
    return ring + kBarriers + 8 * (kStages + s);
  }
  // WaitLoaded and ReleaseByWarp for a kernel that counts its stage s (< kStages) and the phase's
  // parity along instead of dividing a load index (`ring` the ring's shared address).
  __device__ __forceinline__ static void WaitStageLoaded(uint32_t ring, uint32_t s, uint32_t parity) {
    BarrierWaitAt(FullOfStage(ring, s), parity);
    __syncwarp();
  }
  __device__ __forceinline__ static void ReleaseStageByWarp(uint32_t ring, uint32_t s, int lane) {
    __syncwarp();
    if (lane == 0) BarrierArriveAt(EmptyOfStage(ring, s));
  }
};

// ---- the kernel ---------------------------------------------------------------------------------

// grid (ceil(n / 128), ceil(m_pad / 128)); kThreads threads, kLinearSmemBytes of dynamic shared
// memory. w_map: the weight, UINT8 [n rows][k bytes], boxes of 128 × 128 bytes, 128-byte swizzle;
// x_map: the codes, UINT8 [m_pad][k], boxes of 128 × 128; xs_map: the x scales, FLOAT32
// [k / 128][m_pad], boxes of 1 × (128 + kXsAlign) (linear.cu's LaunchTma). p: y, n, m, k and the
// weight's scales (as WgmmaBlock reads them). Load j of the ring is chunk j.
constexpr int kLinearTokens = 128;
using LinearRing = Ring<kLinearTokens>;
constexpr int kLinearSmemBytes = LinearRing::kEnd + 1024;  // + base alignment
static_assert(kLinearSmemBytes <= 227 * 1024, "Hopper's shared memory per block");

__global__ void __launch_bounds__(kThreads, 1)
    TmaLinearKernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                    const __grid_constant__ CUtensorMap xs_map, const Params p) {
  PdlPrologue();
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // TMA and wgmma as used here are sm_90a only; the host never picks this path elsewhere
#else
  using R = LinearRing;
  extern __shared__ uint8_t smem_raw[];
  const R ring(wgmma::AlignedSmem(smem_raw));
  const int tid = threadIdx.x;
  const int group = tid / 128;  // consumer warpgroup: weight rows 64·group ..
  const int warp = (tid % 128) / kWarpSize, lane = tid % kWarpSize;
  const int g = lane / 4, q = lane % 4;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kLinearTokens;
  const int64_t ra = n0 + group * wgmma::kRowsPerGroup + 16 * warp + g;  // this thread's rows ra, ra + 8
  const int chunks = static_cast<int>(p.k / kChunk);

  if (tid == 0) ring.Setup(&w_map, &x_map, &xs_map);
  __syncthreads();
  auto load = [&](int c) {  // thread 0: chunk c, its stage free
    ring.Load(c, &w_map, c * kChunk, static_cast<int>(n0), -1, &x_map, &xs_map, static_cast<int>(t0));
  };
  if (tid == 0) {
    for (int c = 0; c < min(chunks, R::kStages); ++c) load(c);
  }

  // acc: one chunk's k32 chain; part: the current 512-column slice; total: over slices.
  float acc[R::kElems], part[R::kElems], total[R::kElems];
#pragma unroll
  for (int i = 0; i < R::kElems; ++i) acc[i] = part[i] = total[i] = 0.f;
  const int64_t scale_row = (n0 / kFp8Block) * p.scale_row_stride;
  for (int c = 0; c < chunks; ++c) {
    ring.WaitLoaded(c);
    uint8_t* stage = ring.Stage(c);
    wgmma::ChunkChainIssue(acc, SmemAddress(stage + group * wgmma::kRowsPerGroup * kChunk),
                           SmemAddress(stage + R::kX));
    // While the MMAs run: chunk c - 1 + kStages into the stage chunk c - 1 used, once all 256
    // threads have released it.
    if (tid == 0 && c >= 1 && c - 1 + R::kStages < chunks) {
      ring.WaitReleased(c - 1);
      load(c - 1 + R::kStages);
    }
    __syncwarp();
    const float sw = p.scale_f32 ? __ldg(reinterpret_cast<const float*>(p.scale) + scale_row + c)
                                 : DecodeE8m0(__ldg(p.scale + scale_row + c));
    wgmma::WgmmaWaitAll();
    wgmma::PinAll(acc);
    wgmma::AddScaledRows(part, acc, sw, sw, R::XScales(stage, static_cast<int>(t0)), q);
    ring.Release(c);  // this thread's last read of the stage (the MMAs' reads are complete)
    wgmma::EndChunk(total, part, c, 0, chunks);
  }
  wgmma::StoreBlockResult<kLinearTokens>(p, ra, t0, q, [&](int j) { return total[j]; });
#endif
}

// TmaLinearKernel's tiles, products and order (the same bits) on persistent, warp-specialized
// blocks: kWsThreads threads, two consumer warpgroups as TmaLinearKernel's and one producer
// warpgroup whose thread 0 alone issues the copies. grid: at most one block per SM; block b takes
// tiles b, b + gridDim.x, ... of the n_blocks × token blocks (weight row blocks fastest), and load
// j of the ring is the j-th (tile, chunk) of that walk, so the producer runs up to kStages chunks
// ahead across tile ends (a tile's stores overlap the next tile's first copies). A stage is free
// once each of the 8 consumer warps released it (ReleaseStageByWarp): the producer waits for
// that, not the consumers' thread 0, so neither warpgroup's MMAs wait for the other's scaling.
// setmaxnreg gives the producer's registers to the consumers (see SetMaxRegistersInc for what ptxas
// allocates after it).
constexpr int kWsConsumerWarps = kThreads / kWarpSize;
constexpr int kWsThreads = kThreads + 128;  // + the producer warpgroup (registers go by warpgroups)

// setmaxnreg: the registers per thread of the calling warpgroup from here on (a multiple of 8 in
// 24..256; every warp of the warpgroup executes it). ptxas can allocate up to the raised count in
// the code the .inc dominates, beyond the launch's 168 (2026-12-06, CUDA 13.0: a 384-thread kernel
// with 200 live floats after `.inc 232` used R0-R211 and spilled nothing, 552 bytes without it).
// It did not where that code waits through BarrierWaitAt (whose timeout calls __trap()): the kernel
// stayed within R165 and spilled (branch wip/rs-ws; with a spin wait instead, R204-R229). The
// FP4 in-block and tile-pair kernels, which wait through it, stay within R159 and R151.
template <int kRegisters>
__device__ __forceinline__ void SetMaxRegistersInc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void SetMaxRegistersDec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
// The block's registers at launch: ptxas holds a kWsThreads-thread kernel to 168 a thread, and
// setmaxnreg.inc takes its registers from what the block's own .dec released: an increase beyond
// that waits for registers of the SM that another resident block may hold for good (a hang,
// measured: 32 and 240 deadlocked beside a programmatic-dependent launch's next kernel).
constexpr int kWsLaunchRegisters = 168;
constexpr int kWsProducerRegisters = 24, kWsConsumerRegisters = 240;
static_assert(kWsProducerRegisters * 128 + kWsConsumerRegisters * kThreads <= kWsLaunchRegisters * kWsThreads,
              "setmaxnreg within the block's own registers");

// TmaLinearWsKernel<true>'s shared memory: a 4-stage ring, then the output tile's staging (two
// warpgroups × 4 boxes of 64 tokens × 32 f32 rows, 128-byte swizzled, 1024-byte aligned).
using LinearStoreRing = Ring<kLinearTokens, 4>;
constexpr int kStoreBoxRows = 32;                                        // weight rows (f32) a box
constexpr int kStoreBoxBytes = wgmma::kRowsPerGroup * kStoreBoxRows * 4;  // 8 KiB
constexpr int kStoreStaging = (LinearStoreRing::kEnd + 1023) / 1024 * 1024;
constexpr int kLinearStoreSmemBytes = kStoreStaging + 2 * (kBlockRows / kStoreBoxRows) * kStoreBoxBytes + 1024;
static_assert(kLinearStoreSmemBytes <= 227 * 1024, "Hopper's shared memory per block");

// TMA stores of the output tile (kTmaStore): a warpgroup's 64 tokens × 128 weight rows as
// four boxes of y_map (FLOAT32 [m][n], row pitch ldy, boxes of 32 × 64, 128-byte swizzle), issued
// by its first thread after the warpgroup has written them to its staging; the warps go on to the
// next tile while the copies run.
__device__ __forceinline__ void NamedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void TmaStore2d(const CUtensorMap* map, uint32_t src, int inner, int outer) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(inner), "r"(outer)
               : "memory");
}
__device__ __forceinline__ void BulkCommitGroup() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Returns once this thread's committed bulk copies have read their shared memory (kReadOnly) or
// completed.
template <bool kReadOnly>
__device__ __forceinline__ void BulkWaitAll() {
  if constexpr (kReadOnly) {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
  } else {
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  }
}

// Two floats to shared memory at `at` (8-byte aligned), as f32 operands (wgmma::StShared64 takes
// u32 ones: the same store, but ptxas allocates TmaLinearWsKernel<true>'s registers differently).
__device__ __forceinline__ void StSharedF32x2(uint32_t at, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(at), "f"(a), "f"(b) : "memory");
}

// The weight scale at scale + i as stored (f32 bits, or the e8m0 byte).
__device__ __forceinline__ uint32_t WeightScaleBits(const Params& p, int64_t i) {
  return p.scale_f32 ? __ldg(reinterpret_cast<const uint32_t*>(p.scale) + i) : __ldg(p.scale + i);
}

// The MMAs take the x tile as wgmma's A (warpgroup w: tokens 64·w ..) and the weight tile's 128
// rows as B (N), as DeepGEMM lays out its FP8 GEMM, so a thread's D fragment holds 2 tokens (16·warp
// + g and + 8 of its warpgroup's 64) × 32 weight rows (8i + 2q, + 1): its scale products are sw·xs
// of 2 tokens a chunk (2 LDS, 2 FMUL) where the weights-as-A form took 32. wgmma sums an output's
// products alike whichever operand holds them, so the bits are TmaLinearKernel's (tests).
// kTmaStore: the output tile leaves by TMA stores from shared memory (y_map; a 4-stage
// ring, kLinearStoreSmemBytes), else by each thread's own stores (y_map unused; 6 stages,
// kLinearSmemBytes). The weight scale of chunk c + 1 is loaded during chunk c.
template <bool kTmaStore>
__global__ void __launch_bounds__(kWsThreads, 1)
    TmaLinearWsKernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                      const __grid_constant__ CUtensorMap xs_map, const __grid_constant__ CUtensorMap y_map,
                      const Params p, int n_blocks, int tiles) {
  PdlPrologue();
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // TMA and wgmma as used here are sm_90a only; the host never picks this path elsewhere
#else
  using R = std::conditional_t<kTmaStore, LinearStoreRing, LinearRing>;
  extern __shared__ uint8_t smem_raw[];
  const R ring(wgmma::AlignedSmem(smem_raw));
  const int tid = threadIdx.x;
  const int chunks = static_cast<int>(p.k / kChunk);
  if (tid == 0) ring.Setup(&w_map, &x_map, &xs_map, kWsConsumerWarps);
  __syncthreads();
  if (tid >= kThreads) {  // the producer warpgroup
    SetMaxRegistersDec<kWsProducerRegisters>();
    if (tid == kThreads) {
      int64_t j = 0;
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int n0 = tile % n_blocks * kBlockRows, t0 = tile / n_blocks * kLinearTokens;
        for (int c = 0; c < chunks; ++c, ++j) {
          if (j >= R::kStages) ring.WaitReleased(j - R::kStages);
          ring.Load(j, &w_map, c * kChunk, n0, -1, &x_map, &xs_map, t0);
        }
      }
    }
    return;
  }
  SetMaxRegistersInc<kWsConsumerRegisters>();
  const int group = tid / 128;  // consumer warpgroup: the tile's tokens 64·group ..
  const int warp = (tid % 128) / kWarpSize, lane = tid % kWarpSize;
  const int g = lane / 4, q = lane % 4;
  const int tile_token = group * wgmma::kRowsPerGroup + 16 * warp + g;  // this thread's tokens: + 0, + 8
  // acc: one chunk's k32 chain; part: the current 512-column slice; total: over slices. part ends
  // every tile at +0 (EndChunk), and total's first slice overwrites it.
  float acc[R::kElems], part[R::kElems], total[R::kElems];
#pragma unroll
  for (int i = 0; i < R::kElems; ++i) acc[i] = part[i] = total[i] = 0.f;
  // Load j's stage (j % kStages) and parity ((j / kStages) & 1), counted along instead of divided.
  uint32_t stage_index = 0, parity = 0;
  const uint32_t ring_at = SmemAddress(ring.base);
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t n0 = static_cast<int64_t>(tile % n_blocks) * kBlockRows;
    const int64_t t0 = static_cast<int64_t>(tile / n_blocks) * kLinearTokens;
    const int64_t scale_row = (n0 / kFp8Block) * p.scale_row_stride;
    uint32_t sw_bits = WeightScaleBits(p, scale_row);  // chunk c's scale, as stored
    for (int c = 0; c < chunks; ++c) {
      const uint32_t stage = ring_at + stage_index * R::kStageBytes;
      R::WaitStageLoaded(ring_at, stage_index, parity);  // the warp leaves converged for the MMAs
      wgmma::ChunkChainIssueLow(acc, stage + R::kX + group * wgmma::kRowsPerGroup * kChunk, stage);
      const float sw = p.scale_f32 ? __uint_as_float(sw_bits) : DecodeE8m0(static_cast<uint8_t>(sw_bits));
      if (c + 1 < chunks) sw_bits = WeightScaleBits(p, scale_row + c + 1);
      // The scale products of this thread's two tokens (AddScaledRows's roundings: sw·x, then one
      // fma an element), loaded while the MMAs run.
      const uint32_t xs = stage + R::kXs + 4 * tile_token;
      const float sa = __fmul_rn(sw, __uint_as_float(wgmma::LdShared32(xs)));
      const float sb = __fmul_rn(sw, __uint_as_float(wgmma::LdShared32(xs + 4 * 8)));
      wgmma::WgmmaWaitAll();
      wgmma::PinAll(acc);
#pragma unroll
      for (int i = 0; i < R::kElems / 4; ++i) {
        part[4 * i + 0] = __fmaf_rn(acc[4 * i + 0], sa, part[4 * i + 0]);
        part[4 * i + 1] = __fmaf_rn(acc[4 * i + 1], sa, part[4 * i + 1]);
        part[4 * i + 2] = __fmaf_rn(acc[4 * i + 2], sb, part[4 * i + 2]);
        part[4 * i + 3] = __fmaf_rn(acc[4 * i + 3], sb, part[4 * i + 3]);
      }
      R::ReleaseStageByWarp(ring_at, stage_index, lane);  // its last reads (the MMAs' are complete)
      wgmma::EndChunk(total, part, c, 0, chunks);
      if (++stage_index == R::kStages) {
        stage_index = 0;
        parity ^= 1u;
      }
    }
    if constexpr (kTmaStore) {
      // Staging box b holds rows n0 + 32b .. of the warpgroup's 64 tokens: token row r at 128·r,
      // its 16-byte piece u at (u ^ r % 8)·16 (the 128-byte swizzle). Element 4i + e: row 8i + 2q
      // (+ 1), piece 2·(i % 4) + q / 2, byte 8·(q % 2) within it.
      const uint32_t staging = ring_at + kStoreStaging + group * 4 * kStoreBoxBytes;
      const bool issuer = tid % 128 == 0;
      if (issuer) BulkWaitAll<true>();  // the previous tile's copies have read the staging
      NamedBarrierSync(1 + group, 128);
      // Token rows 16·warp + g and + 8: both ≡ g mod 8, so one swizzle. Piece 2j + q / 2 of a box
      // (j = i % 4) lands at at[j]; the box and the row + 8 are constant offsets from it.
      const uint32_t row_a = staging + 128 * (16 * warp + g) + 8 * (q % 2);
      uint32_t at[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) at[j] = row_a + (((2 * j + q / 2) ^ g) << 4);
#pragma unroll
      for (int i = 0; i < R::kElems / 4; ++i) {
        StSharedF32x2(at[i % 4] + (i / 4) * kStoreBoxBytes, total[4 * i + 0], total[4 * i + 1]);
        StSharedF32x2(at[i % 4] + (i / 4) * kStoreBoxBytes + 128 * 8, total[4 * i + 2], total[4 * i + 3]);
      }
      wgmma::FenceProxyAsyncShared();  // the writes, visible to the TMA copies
      NamedBarrierSync(1 + group, 128);
      if (issuer) {
        const int token = static_cast<int>(t0) + group * wgmma::kRowsPerGroup;
#pragma unroll
        for (int b = 0; b < kBlockRows / kStoreBoxRows; ++b) {
          TmaStore2d(&y_map, staging + b * kStoreBoxBytes, static_cast<int>(n0) + b * kStoreBoxRows, token);
        }
        BulkCommitGroup();
        // The block's last tile: its copies complete before the block's memory goes. (Waiting
        // after the tile loop instead makes ptxas spill ~100 registers of the sums.)
        if (tile + static_cast<int>(gridDim.x) >= tiles) BulkWaitAll<false>();
      }
      continue;
    }
    // Element 4i + e: token ta (tb = ta + 8 for e >= 2), weight row n0 + 8i + 2q (+ 1 for odd e).
    // A row pair is one 8-byte store where y's rows keep 8-byte alignment: a warp's store then fills
    // 8 whole 32-byte sectors, where two 4-byte stores fill halves of them twice (+14% `linear`
    // time at the 8k prefill, measured).
    const int64_t ta = t0 + tile_token, tb = ta + 8;
    const bool pairs = (p.ldy % 2 == 0) && (reinterpret_cast<uintptr_t>(p.y) % 8 == 0);
#pragma unroll
    for (int i = 0; i < R::kElems / 4; ++i) {
      const int64_t row = n0 + 8 * i + 2 * q;
      if (pairs && row + 1 < p.n) {
        if (ta < p.m) *reinterpret_cast<float2*>(p.y + ta * p.ldy + row) = {total[4 * i + 0], total[4 * i + 1]};
        if (tb < p.m) *reinterpret_cast<float2*>(p.y + tb * p.ldy + row) = {total[4 * i + 2], total[4 * i + 3]};
        continue;
      }
      if (ta < p.m && row < p.n) p.y[ta * p.ldy + row] = total[4 * i + 0];
      if (ta < p.m && row + 1 < p.n) p.y[ta * p.ldy + row + 1] = total[4 * i + 1];
      if (tb < p.m && row < p.n) p.y[tb * p.ldy + row] = total[4 * i + 2];
      if (tb < p.m && row + 1 < p.n) p.y[tb * p.ldy + row + 1] = total[4 * i + 3];
    }
  }
#endif
}

// The tests' choice of the TMA-fed kernels, over the environment's: -1 none, 0 off, 1 on
// (cuda::SetTmaKernelsForTesting).
inline std::atomic<int>& TestOverride() {
  static std::atomic<int> mode{-1};
  return mode;
}
// With TestOverride 1: the pre-folded experts' tile tokens (64 or 128).
inline std::atomic<int>& TestExpertTokens() {
  static std::atomic<int> tokens{64};
  return tokens;
}

// Whether the tests or, where they do not choose, the environment's switch (DEEPINFER_TMA or
// DEEPINFER_TMA_GROUPED, read once by the caller's static) turn a TMA-fed kernel on.
inline bool Chosen(bool from_environment) {
  const int mode = TestOverride().load();
  return mode >= 0 ? mode == 1 : from_environment;
}

// DEEPINFER_TMA=0 in the environment keeps Linear on WgmmaLinearKernel at every M (the same bits):
// the benchmarks' side-by-side (scripts/gpu-bench.sh).
inline bool TurnedOff() {
  static const bool on = EnvSwitch("DEEPINFER_TMA", true, "cuda::Linear");
  return !Chosen(on);
}

// Linear's products this kernel takes: FP8 weights (either scale dtype) with 16-byte aligned rows
// of a 16-byte multiple stride (TMA's rule), more than 64 rows, K % 128 == 0, 32-bit coordinates,
// on a device with the wgmma path, not turned off. The caller also asks for a layout that does not
// split K.
inline bool Usable(const Params& p, Kind kind) {
  return kind == Kind::kFp8 && p.m > wgmma::kTokens && p.w_vec16 && p.w_row_bytes % 16 == 0 && p.k > 0 &&
         p.k % kChunk == 0 && p.n < (int64_t{1} << 31) && p.k < (int64_t{1} << 31) &&
         wgmma::PaddedRows(p.m) < (int64_t{1} << 31) && !TurnedOff() && wgmma::DeviceHasWgmma();
}

}  // namespace tma
