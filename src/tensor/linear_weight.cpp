#include "tensor/linear_weight.h"

#include <array>

namespace deepinfer {

namespace {

// e4m3 code -> float, built once from the exact decoder.
const float* E4m3Table() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int code = 0; code < 256; ++code) t[code] = E4m3ToF32(static_cast<uint8_t>(code));
    return t;
  }();
  return table.data();
}

float ScaleAt(const TensorView& scale, int64_t r, int64_t c) {
  const int64_t idx = r * scale.stride(0) + c * scale.stride(1);
  if (scale.dtype() == DType::kF8E8M0) return E8m0ToF32(scale.data<uint8_t>()[idx]);
  DI_CHECK(scale.dtype() == DType::kF32, "scale dtype {} not supported", DTypeName(scale.dtype()));
  return scale.data<float>()[idx];
}
}  // namespace

void DequantizeRow(const LinearWeight& w, int64_t o, float* out) {
  const int64_t in = w.in_features;
  switch (w.format) {
    case WeightFormat::kDense: {
      const int64_t base = o * w.data.stride(0);
      switch (w.data.dtype()) {
        case DType::kF32: {
          const float* p = w.data.data<float>() + base;
          for (int64_t i = 0; i < in; ++i) out[i] = p[i];
          return;
        }
        case DType::kBF16: {
          const uint16_t* p = w.data.data<uint16_t>() + base;
          for (int64_t i = 0; i < in; ++i) out[i] = Bf16ToF32(p[i]);
          return;
        }
        case DType::kF16: {
          const uint16_t* p = w.data.data<uint16_t>() + base;
          for (int64_t i = 0; i < in; ++i) out[i] = F16ToF32(p[i]);
          return;
        }
        default: DI_THROW("dense weight dtype {} not supported", DTypeName(w.data.dtype()));
      }
    }
    case WeightFormat::kFp8: {
      const uint8_t* p = w.data.data<uint8_t>() + o * w.data.stride(0);
      const int64_t sr = o / kFp8BlockSize;
      const float* table = E4m3Table();
      for (int64_t c0 = 0; c0 < in; c0 += kFp8BlockSize) {
        const float s = ScaleAt(w.scale, sr, c0 / kFp8BlockSize);
        const int64_t c1 = std::min(in, c0 + kFp8BlockSize);
        for (int64_t i = c0; i < c1; ++i) out[i] = table[p[i]] * s;
      }
      return;
    }
    case WeightFormat::kFp4: {
      const uint8_t* p = w.data.data<uint8_t>() + o * w.data.stride(0);
      for (int64_t c0 = 0; c0 < in; c0 += kFp4BlockSize) {
        const float s = ScaleAt(w.scale, o, c0 / kFp4BlockSize);
        for (int64_t i = c0; i < c0 + kFp4BlockSize; i += 2) {
          const uint8_t b = p[i / 2];
          out[i] = Fp4ToF32(b & 0xf) * s;
          out[i + 1] = Fp4ToF32(b >> 4) * s;
        }
      }
      return;
    }
  }
}

}  // namespace deepinfer
