#include "kernels/cuda/rows.h"

#include <climits>

#include <cuda_fp8.h>

#include "kernels/cpu/hash_uniform.h"
#include "kernels/cpu/ue8m0.h"
#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::cuda {

namespace {

// ---- Row copies ---------------------------------------------------------------------------------

constexpr int kCopyThreads = 256;
// Floats of a row one block copies (16 KiB): a wide row is spread over blocks (the head's last
// hc streams, 4 × 4096 floats, took 24 µs on one warp at batch 1; 2026-12-07), a narrow one is a
// block's.
constexpr int64_t kCopySegmentFloats = 4096;

// Block b copies segment b % segments of row b / segments (< n): from src_offsets ? src +
// src_offsets[row] : src + row·ld_src to dst_offsets ? dst + dst_offsets[row] : dst + row·ld_dst,
// floats [segment · kCopySegmentFloats, +kCopySegmentFloats) of `width`. Bits are moved as
// integers (no float arithmetic), 16 bytes at a time when both rows are 16-byte aligned and
// width % 4 == 0.
__global__ void __launch_bounds__(kCopyThreads)
    CopyRowsKernel(const float* src, int64_t ld_src, const int64_t* src_offsets, float* dst, int64_t ld_dst,
                   const int64_t* dst_offsets, int64_t n, int64_t width, int64_t segments) {
  PdlPrologue(PdlTriggerFirst{});
  const int64_t row = static_cast<int64_t>(blockIdx.x) / segments;
  if (row >= n) return;  // uniform over the block; no barriers below
  const int64_t begin = static_cast<int64_t>(blockIdx.x) % segments * kCopySegmentFloats;
  const int64_t end = min(width, begin + kCopySegmentFloats);
  const float* s = src_offsets != nullptr ? src + src_offsets[row] : src + row * ld_src;
  float* d = dst_offsets != nullptr ? dst + dst_offsets[row] : dst + row * ld_dst;
  const bool vec = width % 4 == 0 && ((reinterpret_cast<uintptr_t>(s) | reinterpret_cast<uintptr_t>(d)) & 15u) == 0;
  if (vec) {  // begin is a multiple of 4 floats
    const uint4* s4 = reinterpret_cast<const uint4*>(s);
    uint4* d4 = reinterpret_cast<uint4*>(d);
#pragma unroll 4
    for (int64_t j = begin / 4 + threadIdx.x; j < end / 4; j += kCopyThreads) d4[j] = s4[j];
  } else {
    const uint32_t* s1 = reinterpret_cast<const uint32_t*>(s);
    uint32_t* d1 = reinterpret_cast<uint32_t*>(d);
#pragma unroll 4
    for (int64_t j = begin + threadIdx.x; j < end; j += kCopyThreads) d1[j] = s1[j];
  }
}

void LaunchCopyRows(const float* src, int64_t ld_src, const int64_t* src_offsets, float* dst, int64_t ld_dst,
                    const int64_t* dst_offsets, int64_t n, int64_t width, cudaStream_t stream, const char* name) {
  if (n < 0 || width < 0) ThrowCudaError(__FILE__, __LINE__, name, "negative row count or width");
  if (n == 0 || width == 0) return;
  const int64_t segments = CeilDiv(width, kCopySegmentFloats);
  if (n > INT_MAX / segments) ThrowCudaError(__FILE__, __LINE__, name, "too many rows");
  CopyRowsKernel<<<static_cast<unsigned>(n * segments), kCopyThreads, 0, stream>>>(src, ld_src, src_offsets, dst,
                                                                                    ld_dst, dst_offsets, n, width,
                                                                                    segments);
  DI_CUDA_LAUNCH_CHECK(name);
}

// ---- Packed rows (kernels/cpu/state_row.h) --------------------------------------------------------

constexpr int kPackWarps = 4;  // rows per block: one warp per row
constexpr int kPackThreads = kPackWarps * kWarpSize;

// cpu::PackedRowFormat's numbers as ints for the kernels.
struct PackFormat {
  int dim, fp8_end, block, scales, scale_offset, pitch, pitch_floats;
};

PackFormat ToPackFormat(const cpu::PackedRowFormat& f) {
  return PackFormat{static_cast<int>(f.dim),     static_cast<int>(f.fp8_end),      static_cast<int>(f.block),
                    static_cast<int>(f.scales()), static_cast<int>(f.scale_offset()), static_cast<int>(f.row_pitch()),
                    static_cast<int>(f.row_floats())};
}

// cpu::E4m3CodeAtScale: F32ToE4m3(clamp(v / scale, ±448)); a NaN quotient is code 0x7f.
__device__ __forceinline__ uint8_t E4m3CodeAtScale(float v, float scale) {
  float q = __fdiv_rn(v, scale);
  if (q > cpu::kE4m3Max) q = cpu::kE4m3Max;
  if (q < -cpu::kE4m3Max) q = -cpu::kE4m3Max;
  if (isnan(q)) return 0x7f;
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3));
}

// F32ToBf16 (tensor/dtype.h), its NaN rule included.
__device__ __forceinline__ uint16_t Bf16Bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// One row, x(c) its channel c, encoded into out[pitch] by the calling warp (cpu::EncodePackedRow
// and the zero padding of cpu::PackRows).
template <class Value>
__device__ __forceinline__ void EncodeRowWarp(const PackFormat& f, const Value& x, uint8_t* out, int lane) {
  for (int b = 0; b < f.scales; ++b) {
    const int c0 = b * f.block, n = min(f.block, f.fp8_end - c0);
    float amax = 0.f;  // fmaxf skips NaNs, as std::max(amax, NaN) does
    for (int i = lane; i < n; i += kWarpSize) amax = fmaxf(amax, fabsf(x(c0 + i)));
#pragma unroll
    for (int o = kWarpSize / 2; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = cpu::Ue8m0BlockScale(amax, cpu::kE4m3AmaxFloor, cpu::kE4m3InvMax);
    for (int i = lane; i < n; i += kWarpSize) out[c0 + i] = E4m3CodeAtScale(x(c0 + i), scale);
    if (lane == 0) out[f.scale_offset + b] = static_cast<uint8_t>((__float_as_uint(scale) >> 23) & 0xffu);
  }
  for (int c = f.fp8_end + lane; c < f.dim; c += kWarpSize) {
    *reinterpret_cast<uint16_t*>(out + f.fp8_end + 2 * (c - f.fp8_end)) = Bf16Bits(x(c));
  }
  for (int i = f.scale_offset + f.scales + lane; i < f.pitch; i += kWarpSize) out[i] = 0;
}

__global__ void __launch_bounds__(kPackThreads)
    PackRowsKernel(PackFormat f, const float* src, int64_t ld_src, int64_t n, float* base, const int64_t* dst_offsets,
                   int64_t first_offset) {
  PdlPrologue(PdlTriggerFirst{});
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kPackWarps + threadIdx.x / kWarpSize;
  if (row >= n) return;  // uniform over the warp
  const float* x = src + row * ld_src;
  const int64_t offset = dst_offsets != nullptr ? dst_offsets[row] : first_offset + row * f.pitch_floats;
  EncodeRowWarp(f, [x](int c) { return x[c]; }, reinterpret_cast<uint8_t*>(base + offset), threadIdx.x % kWarpSize);
}

__global__ void __launch_bounds__(kPackThreads)
    FillHashPackedRowsKernel(PackFormat f, cpu::PackedRowRegions r, uint64_t seed, float* base) {
  PdlPrologue();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kPackWarps + threadIdx.x / kWarpSize;
  if (row >= r.regions * r.rows) return;
  const int64_t o = r.first + (row / r.rows) * r.region_stride + (row % r.rows) * f.pitch_floats;
  EncodeRowWarp(
      f, [o, seed](int c) { return cpu::HashUniform(seed, static_cast<uint64_t>(o + c), -1.f, 1.f); },
      reinterpret_cast<uint8_t*>(base + o), threadIdx.x % kWarpSize);
}

void CheckPackFormat(const cpu::PackedRowFormat& f, const char* name) {
  if (f.dim <= 0 || f.block <= 0 || f.fp8_end < 0 || f.fp8_end > f.dim || f.row_pitch() > INT_MAX) {
    ThrowCudaError(__FILE__, __LINE__, name, "bad packed row format");
  }
}

// ---- Attention row lists ------------------------------------------------------------------------

constexpr int kListThreads = 256;

// One block per token t = blockIdx.x; threads stride over the window rows, then the HCA rows,
// then the CSA index rows. Every entry is written by exactly one thread; thread 0 writes the
// per-token scalars.
__global__ void __launch_bounds__(kListThreads)
    BuildAttentionRowsKernel(cpu::StepRowsPlan plan, cpu::LayerRowGeometry g, int32_t* row_ids, int32_t* counts,
                             int64_t max_rows, int32_t* index_ids, int32_t* num_visible, int32_t* num_candidates,
                             int64_t max_index_rows) {
  PdlPrologue(PdlTriggerFirst{});
  const int64_t t = blockIdx.x;
  const int64_t b = plan.token_seq[t];
  const cpu::SeqRowsInfo& s = plan.seqs[b];
  const int64_t start_pos = s.start_pos, token_offset = s.token_offset, slot = s.slot;
  const int64_t p = plan.token_pos[t];
  int32_t* ids = row_ids + t * max_rows;

  // Window positions first … p (the CPU's loop kp = max(0, p − window + 1) … p).
  const int64_t first = max(int64_t{0}, p - g.window + 1);
  const int64_t num_window = max(int64_t{0}, p - first + 1);
  for (int64_t i = threadIdx.x; i < num_window; i += blockDim.x) {
    const int64_t kp = first + i;
    const int64_t off = kp >= start_pos ? g.fresh_base + (token_offset + kp - start_pos) * g.row_floats
                                        : cpu::RingRowOffset(g, slot, kp);
    ids[i] = static_cast<int32_t>(off / g.row_floats);
  }
  const int64_t visible = g.ratio != 0 ? (p + 1) / g.ratio : 0;
  int64_t n = num_window;
  if (g.ratio == 128) {
    for (int64_t r = threadIdx.x; r < visible; r += blockDim.x) {
      ids[num_window + r] = static_cast<int32_t>(cpu::MainRowOffset(plan, g, b, r) / g.row_floats);
    }
    n += visible;
  }
  if (threadIdx.x == 0) counts[t] = static_cast<int32_t>(n);
  if (index_ids == nullptr) return;
  if (g.ratio == 4) {
    int32_t* iids = index_ids + t * max_index_rows;
    for (int64_t r = threadIdx.x; r < visible; r += blockDim.x) {
      iids[r] = static_cast<int32_t>(cpu::IndexRowOffset(plan, g, b, r) / g.index_dim);
    }
    if (threadIdx.x == 0) {
      const int64_t end = s.prompt_end > 0 ? s.prompt_end : start_pos + s.num_tokens;
      num_visible[t] = static_cast<int32_t>(visible);
      num_candidates[t] = static_cast<int32_t>((p < end ? end : p + 1) / 4);
    }
  } else if (threadIdx.x == 0) {
    num_visible[t] = 0;
    num_candidates[t] = 0;
  }
}

constexpr int kAppendThreads = 128;

// One block per token t = blockIdx.x; threads stride over its selected entries.
__global__ void __launch_bounds__(kAppendThreads)
    AppendSelectedRowsKernel(cpu::StepRowsPlan plan, cpu::LayerRowGeometry g, const int32_t* selected,
                             const int32_t* selected_counts, int64_t top_k, int32_t* row_ids, int32_t* counts,
                             int64_t max_rows) {
  PdlPrologue();
  const int64_t t = blockIdx.x;
  const int64_t b = plan.token_seq[t];
  const int32_t count = counts[t];
  const int32_t k = selected_counts[t];
  __syncthreads();  // every thread has read counts[t] before thread 0 overwrites it
  int32_t* ids = row_ids + t * max_rows + count;
  const int32_t* sel = selected + t * top_k;
  for (int32_t i = threadIdx.x; i < k; i += blockDim.x) {
    ids[i] = static_cast<int32_t>(cpu::MainRowOffset(plan, g, b, sel[i]) / g.row_floats);
  }
  if (threadIdx.x == 0) counts[t] = count + k;
}

void CheckTokens(int64_t num_tokens, const char* name) {
  if (num_tokens < 0 || num_tokens > INT_MAX) ThrowCudaError(__FILE__, __LINE__, name, "bad num_tokens");
}

}  // namespace

void GatherRows(const float* base, const int64_t* src_offsets, int64_t n, int64_t width, float* dst, int64_t ld_dst,
                cudaStream_t stream) {
  LaunchCopyRows(base, 0, src_offsets, dst, ld_dst, nullptr, n, width, stream, "gather_rows");
}

void ScatterRows(const float* src, int64_t ld_src, int64_t n, int64_t width, float* base, const int64_t* dst_offsets,
                 cudaStream_t stream) {
  LaunchCopyRows(src, ld_src, nullptr, base, 0, dst_offsets, n, width, stream, "scatter_rows");
}

void PackRows(const cpu::PackedRowFormat& format, const float* src, int64_t ld_src, int64_t n, float* base,
              const int64_t* dst_offsets, int64_t first_offset, cudaStream_t stream) {
  const char* name = "pack_rows";
  CheckPackFormat(format, name);
  if (n < 0) ThrowCudaError(__FILE__, __LINE__, name, "negative row count");
  if (n == 0) return;
  const int64_t blocks = CeilDiv(n, kPackWarps);
  if (blocks > INT_MAX) ThrowCudaError(__FILE__, __LINE__, name, "too many rows");
  PackRowsKernel<<<static_cast<unsigned>(blocks), kPackThreads, 0, stream>>>(ToPackFormat(format), src, ld_src, n, base,
                                                                            dst_offsets, first_offset);
  DI_CUDA_LAUNCH_CHECK(name);
}

void FillHashPackedRows(const cpu::PackedRowFormat& format, const cpu::PackedRowRegions& regions, uint64_t seed,
                        float* base, cudaStream_t stream) {
  const char* name = "fill_hash_packed_rows";
  CheckPackFormat(format, name);
  if (regions.regions < 0 || regions.rows < 0) ThrowCudaError(__FILE__, __LINE__, name, "negative row count");
  const int64_t n = regions.regions * regions.rows;
  if (n == 0) return;
  const int64_t blocks = CeilDiv(n, kPackWarps);
  if (blocks > INT_MAX) ThrowCudaError(__FILE__, __LINE__, name, "too many rows");
  FillHashPackedRowsKernel<<<static_cast<unsigned>(blocks), kPackThreads, 0, stream>>>(ToPackFormat(format), regions,
                                                                                      seed, base);
  DI_CUDA_LAUNCH_CHECK(name);
}

void BuildAttentionRows(const cpu::StepRowsPlan& plan, const cpu::LayerRowGeometry& geometry, int32_t* row_ids,
                        int32_t* counts, int64_t max_rows, int32_t* index_ids, int32_t* num_visible,
                        int32_t* num_candidates, int64_t max_index_rows, cudaStream_t stream) {
  const char* name = "build_attention_rows";
  CheckTokens(plan.num_tokens, name);
  if (plan.num_tokens == 0) return;
  // Only shapes the CPU reference would divide by zero on are refused.
  if (geometry.row_floats <= 0) ThrowCudaError(__FILE__, __LINE__, name, "row_floats must be positive");
  const bool needs_blocks = geometry.ratio == 128 || (geometry.ratio == 4 && index_ids != nullptr);
  if (needs_blocks && geometry.rows_per_block <= 0) {
    ThrowCudaError(__FILE__, __LINE__, name, "rows_per_block must be positive");
  }
  if (geometry.ratio == 4 && index_ids != nullptr && geometry.index_dim <= 0) {
    ThrowCudaError(__FILE__, __LINE__, name, "index_dim must be positive");
  }
  if (index_ids != nullptr && (num_visible == nullptr || num_candidates == nullptr)) {
    ThrowCudaError(__FILE__, __LINE__, name, "index_ids given without num_visible / num_candidates");
  }
  BuildAttentionRowsKernel<<<static_cast<unsigned>(plan.num_tokens), kListThreads, 0, stream>>>(
      plan, geometry, row_ids, counts, max_rows, index_ids, num_visible, num_candidates, max_index_rows);
  DI_CUDA_LAUNCH_CHECK(name);
}

void AppendSelectedRows(const cpu::StepRowsPlan& plan, const cpu::LayerRowGeometry& geometry, const int32_t* selected,
                        const int32_t* selected_counts, int64_t top_k, int32_t* row_ids, int32_t* counts,
                        int64_t max_rows, cudaStream_t stream) {
  const char* name = "append_selected_rows";
  CheckTokens(plan.num_tokens, name);
  if (plan.num_tokens == 0) return;
  if (geometry.row_floats <= 0 || geometry.rows_per_block <= 0) {
    ThrowCudaError(__FILE__, __LINE__, name, "row_floats and rows_per_block must be positive");
  }
  AppendSelectedRowsKernel<<<static_cast<unsigned>(plan.num_tokens), kAppendThreads, 0, stream>>>(
      plan, geometry, selected, selected_counts, top_k, row_ids, counts, max_rows);
  DI_CUDA_LAUNCH_CHECK(name);
}

}  // namespace deepinfer::cuda
