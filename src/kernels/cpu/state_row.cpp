#include "kernels/cpu/state_row.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/hash_uniform.h"
#include "kernels/cpu/ue8m0.h"
#include "tensor/dtype.h"

namespace deepinfer::cpu {

void PackedRowFormat::Validate() const {
  DI_CHECK(dim > 0 && block > 0 && fp8_end >= 0 && fp8_end <= dim,
           "packed row format: needs dim > 0, block > 0 and 0 <= fp8_end <= dim (dim {}, fp8_end {}, block {})",
           dim, fp8_end, block);
}

void EncodePackedRow(const PackedRowFormat& f, const float* x, uint8_t* out) {
  uint8_t* scale_bytes = out + f.scale_offset();
  for (int64_t b = 0; b < f.scales(); ++b) {
    const float* v = x + b * f.block;
    const int64_t n = std::min(f.block, f.fp8_end - b * f.block);
    const float scale = E4m3BlockScale(v, n);
    for (int64_t i = 0; i < n; ++i) out[b * f.block + i] = E4m3CodeAtScale(v[i], scale);
    // A power of two (or +inf for a block holding an infinity): its biased exponent is the byte.
    scale_bytes[b] = static_cast<uint8_t>((F32Bits(scale) >> 23) & 0xffu);
  }
  for (int64_t c = f.fp8_end; c < f.dim; ++c) {
    const uint16_t h = F32ToBf16(x[c]);
    std::memcpy(out + f.bf16_offset() + 2 * (c - f.fp8_end), &h, sizeof(h));
  }
  const int64_t used = f.scale_offset() + f.scales();
  std::memset(out + used, 0, static_cast<size_t>(f.row_bytes() - used));
}

void DecodePackedRow(const PackedRowFormat& f, const uint8_t* in, float* x) {
  const uint8_t* scale_bytes = in + f.scale_offset();
  for (int64_t b = 0; b < f.scales(); ++b) {
    // The scale's own bits (byte 255 is +inf, as the encoder wrote it), not E8m0ToF32's NaN:
    // code times scale is then Fp8RoundTrip's product.
    const float scale = F32FromBits(static_cast<uint32_t>(scale_bytes[b]) << 23);
    const int64_t n = std::min(f.block, f.fp8_end - b * f.block);
    for (int64_t i = 0; i < n; ++i) x[b * f.block + i] = E4m3ToF32(in[b * f.block + i]) * scale;
  }
  for (int64_t c = f.fp8_end; c < f.dim; ++c) {
    uint16_t h;
    std::memcpy(&h, in + f.bf16_offset() + 2 * (c - f.fp8_end), sizeof(h));
    x[c] = Bf16ToF32(h);
  }
}

void Fp4RowFormat::Validate() const {
  DI_CHECK(dim > 0 && dim % 2 == 0 && block > 0,
           "FP4 row format: needs an even dim > 0 and block > 0 (dim {}, block {})", dim, block);
}

void EncodeFp4Row(const Fp4RowFormat& f, const float* x, uint8_t* out) {
  std::memset(out, 0, static_cast<size_t>(f.scale_offset()));
  for (int64_t b = 0; b < f.scales(); ++b) {
    const int64_t c0 = b * f.block, n = std::min(f.block, f.dim - c0);
    const float scale = E2m1BlockScale(x + c0, n);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = c0 + i;
      out[c / 2] |= static_cast<uint8_t>(E2m1CodeAtScale(x[c], scale) << (4 * (c % 2)));
    }
    out[f.scale_offset() + b] = static_cast<uint8_t>((F32Bits(scale) >> 23) & 0xffu);
  }
}

void DecodeFp4Row(const Fp4RowFormat& f, const uint8_t* in, float* x) {
  for (int64_t b = 0; b < f.scales(); ++b) {
    const float scale = F32FromBits(static_cast<uint32_t>(in[f.scale_offset() + b]) << 23);
    const int64_t c0 = b * f.block, n = std::min(f.block, f.dim - c0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = c0 + i;
      x[c] = Fp4ToF32(static_cast<uint8_t>((in[c / 2] >> (4 * (c % 2))) & 0xfu)) * scale;
    }
  }
}

void PackRows(const PackedRowFormat& f, const float* src, int64_t ld_src, int64_t n, float* base,
              const int64_t* dst_offsets, int64_t first_offset) {
  for (int64_t i = 0; i < n; ++i) {
    auto* out = reinterpret_cast<uint8_t*>(base + (dst_offsets ? dst_offsets[i] : first_offset + i * f.row_floats()));
    EncodePackedRow(f, src + i * ld_src, out);
    std::memset(out + f.row_bytes(), 0, static_cast<size_t>(f.row_pitch() - f.row_bytes()));
  }
}

void FillHashPackedRows(const PackedRowFormat& f, const PackedRowRegions& r, uint64_t seed, float* base) {
  std::vector<float> x(static_cast<size_t>(f.dim));
  for (int64_t i = 0; i < r.regions; ++i) {
    for (int64_t j = 0; j < r.rows; ++j) {
      const int64_t o = r.first + i * r.region_stride + j * f.row_floats();
      for (int64_t c = 0; c < f.dim; ++c) x[c] = HashUniform(seed, static_cast<uint64_t>(o + c), -1.f, 1.f);
      PackRows(f, x.data(), f.dim, 1, base, nullptr, o);
    }
  }
}

}  // namespace deepinfer::cpu
