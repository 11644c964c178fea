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
// setmaxnreg gives the producer's registers to the consumers (ptxas holds the kernel to 168 at 384
// threads).
constexpr int kWsConsumerWarps = kThreads / kWarpSize;
constexpr int kWsThreads = kThreads + 128;  // + the producer warpgroup (registers go by warpgroups)

// setmaxnreg: the registers per thread of the calling warpgroup from here on (a multiple of 8 in
// 24..256; every warp of the warpgroup executes it).
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

__global__ void __launch_bounds__(kWsThreads, 1)
    TmaLinearWsKernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                      const __grid_constant__ CUtensorMap xs_map, const Params p, int n_blocks, int tiles) {
  PdlPrologue();
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // TMA and wgmma as used here are sm_90a only; the host never picks this path elsewhere
#else
  using R = LinearRing;
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
  const int group = tid / 128;  // consumer warpgroup: weight rows 64·group ..
  const int warp = (tid % 128) / kWarpSize, lane = tid % kWarpSize;
  const int g = lane / 4, q = lane % 4;
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
    const int64_t ra = n0 + group * wgmma::kRowsPerGroup + 16 * warp + g;  // this thread's rows ra, ra + 8
    const int64_t scale_row = (n0 / kFp8Block) * p.scale_row_stride;
    for (int c = 0; c < chunks; ++c) {
      const uint32_t stage = ring_at + stage_index * R::kStageBytes;
      R::WaitStageLoaded(ring_at, stage_index, parity);  // the warp leaves converged for the MMAs
      wgmma::ChunkChainIssueLow(acc, stage + group * wgmma::kRowsPerGroup * kChunk, stage + R::kX);
      const float sw = p.scale_f32 ? __ldg(reinterpret_cast<const float*>(p.scale) + scale_row + c)
                                   : DecodeE8m0(__ldg(p.scale + scale_row + c));
      wgmma::WgmmaWaitAll();
      wgmma::PinAll(acc);
      // AddScaledRows's roundings on the x scales by ld.shared, two tokens a load: t0 is a multiple
      // of kXsAlign, so the stage's scales start at the tile's row 0, 8-byte aligned.
      wgmma::rs::AddScaledShared(part, acc, sw, sw, stage + R::kXs, q, kLinearTokens);
      R::ReleaseStageByWarp(ring_at, stage_index, lane);  // its last reads (the MMAs' are complete)
      wgmma::EndChunk(total, part, c, 0, chunks);
      if (++stage_index == R::kStages) {
        stage_index = 0;
        parity ^= 1u;
      }
    }
    wgmma::StoreBlockResult<kLinearTokens>(p, ra, t0, q, [&](int e) { return total[e]; });
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
