// Deterministic random operands generated on the device (a hash of seed and index), for GEMMs too
// large to generate on the host in a benchmark's time. Each returns the launch's error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::bench {

// BF16 bits of values ±[2^-6, 1): random sign, exponent and 7-bit mantissa.
cudaError_t FillRandomBf16(uint16_t* dst, size_t n, uint64_t seed, cudaStream_t stream);
// Random e4m3 codes, every finite value equally likely but ±448 twice as likely (the NaN codes
// 0x7f/0xff become 0x7e/0xfe).
cudaError_t FillRandomE4m3(uint8_t* dst, size_t n, uint64_t seed, cudaStream_t stream);
// dst [rows, cols] f32: random e4m3 values (no NaN), except ±448 at every column that is a multiple
// of 128, so each 128-column block's amax is 448 and its FP8 quantization (ue8m0 scale 1) is exact.
cudaError_t FillRandomE4m3Floats(float* dst, size_t rows, size_t cols, uint64_t seed, cudaStream_t stream);

}  // namespace deepinfer::bench
