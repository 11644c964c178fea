// LinearWeight: the weight of one linear layer y = x · Wᵀ in any of the checkpoint's formats,
// as views (the memory belongs to the checkpoint mapping or to a loader buffer).
//
//   kDense  data [out, in] F32 | BF16 | F16; no scale.
//   kFp8    data [out, in] F8_E4M3; scale [ceil(out/128), ceil(in/128)] F8_E8M0 (or F32):
//           W[o,i] = e4m3(data[o,i]) · scale[o/128, i/128].
//   kFp4    data [out, in/2] packed e2m1 (low nibble = even column); scale [out, in/32] F8_E8M0:
//           W[o,i] = e2m1(nibble(o,i)) · scale[o, i/32].
#pragma once

#include <algorithm>
#include <cstdint>

#include "tensor/tensor_view.h"

namespace deepinfer {

enum class WeightFormat : uint8_t { kDense, kFp8, kFp4 };

inline constexpr int64_t kFp8BlockSize = 128;
inline constexpr int64_t kFp4BlockSize = 32;

struct LinearWeight {
  WeightFormat format = WeightFormat::kDense;
  int64_t out_features = 0;
  int64_t in_features = 0;
  TensorView data;
  TensorView scale;  // empty for kDense
  // CUDA, BF16 kDense only, usually empty: the same weight again as 16 KiB tiles (ops::
  // WriteDenseTiles), which the GPU's small-batch kernel reads instead of `data` (the same bits).
  // Not part of nbytes(): one pass reads one of the two.
  TensorView tiles;
  // CUDA, kFp4 experts only: whether the nibbles were rewritten chunk-major in place at load
  // (ops::MakeExpertsWeight, unless DEEPINFER_EXPERTS_IN_PLACE=0): chunk c (128 columns) of row o at
  // byte (c · out_features + o) · 64 of `data`, each 32-bit word sign-split (cpu::SignSplitWord),
  // whose view keeps its shape. Only the GPU experts' FP8-input kernels read them so.
  bool chunk_major = false;

  bool empty() const { return data.empty(); }
  // Bytes read from memory by one full pass over the weight (data + scales).
  size_t nbytes() const { return data.nbytes() + (scale.empty() ? 0 : scale.nbytes()); }
};

// Decodes row `o` of W into `out[in_features]` as float (exact: every format is a subset of f32).
void DequantizeRow(const LinearWeight& w, int64_t o, float* out);

}  // namespace deepinfer
