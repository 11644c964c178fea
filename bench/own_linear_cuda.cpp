// CUDA build of TimeOwnFp8Linear (ceilings.h): DeepInfer's FP8 linear at a GEMM shape, timed as
// the ceilings time cuBLASLt's.
#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "bench/ceilings.h"
#include "bench/ceilings_fill.h"
#include "bench/cuda_timing.h"
#include "device/buffer.h"
#include "device/cuda_stream.h"
#include "kernels/cuda/linear.h"
#include "tensor/dtype.h"

namespace deepinfer::bench {
namespace {

constexpr int64_t kBlock = 128;
constexpr int kWarmupCalls = 3;

size_t Count(int64_t a, int64_t b) { return static_cast<size_t>(a) * static_cast<size_t>(b); }

// `count` elements of T at `src` (device) + `offset` elements; synchronous.
template <typename T>
std::vector<T> Download(const Buffer& src, size_t offset, size_t count) {
  std::vector<T> host(count);
  DI_BENCH_CUDA(cudaMemcpy(host.data(), src.as<T>() + offset, count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

// Up to 8 indices spread over [0, n), first and last included.
std::vector<int64_t> Spread(int64_t n) {
  std::vector<int64_t> idx;
  for (int64_t t = 0; t < 8; ++t) idx.push_back(n == 1 ? 0 : t * (n - 1) / 7);
  idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
  return idx;
}

// Worst |got − want| / GemmTolerance over sampled outputs of the call that just ran.
double CheckSampledOutputs(GemmShape s, const Buffer& x, const Buffer& w, const std::vector<uint8_t>& scales,
                           const Buffer& y) {
  const int64_t kb = s.k / kBlock;
  double worst = 0;
  for (const int64_t o : Spread(s.n)) {
    const std::vector<uint8_t> codes = Download<uint8_t>(w, Count(o, s.k), static_cast<size_t>(s.k));
    for (const int64_t r : Spread(s.m)) {
      const std::vector<float> xr = Download<float>(x, Count(r, s.k), static_cast<size_t>(s.k));
      double want = 0, abs_sum = 0;
      for (int64_t c = 0; c < s.k; ++c) {
        const double scale = std::ldexp(1.0, scales[static_cast<size_t>(o / kBlock * kb + c / kBlock)] - 127);
        const double term = static_cast<double>(xr[c]) * E4m3ToF32(codes[c]) * scale;
        want += term;
        abs_sum += std::fabs(term);
      }
      const double got = Download<float>(y, Count(r, s.n) + static_cast<size_t>(o), 1)[0];
      worst = std::max(worst, std::isfinite(got) ? std::fabs(got - want) / GemmTolerance(want, abs_sum) : INFINITY);
    }
  }
  return worst;
}

}  // namespace

GemmTiming TimeOwnFp8Linear(int device_index, GemmShape shape, int iterations) {
  DI_CHECK(shape.m > 0 && shape.n > 0 && shape.k > 0 && shape.k % kBlock == 0,
           "TimeOwnFp8Linear: m, n, k must be positive and k a multiple of 128, got {}x{}x{}", shape.m, shape.n,
           shape.k);
  DI_CHECK(iterations > 0, "iterations must be positive, got {}", iterations);
  GemmTiming t;
  t.kind = GemmKind::kFp8BlockScaled;
  t.shape = shape;
  t.algo_note =
      "deepinfer cuda::Linear, kFp8Act with scratch: x f32 quantized per 128 columns in the call, W e4m3 with e8m0 "
      "128x128 block scales, y f32";
  DI_BENCH_CUDA(cudaSetDevice(device_index));
  const DeviceId dev{DeviceType::kCuda, device_index};
  const CudaStream stream(device_index);
  const int64_t scale_rows = (shape.n + kBlock - 1) / kBlock, scale_cols = shape.k / kBlock;
  const Buffer x(Count(shape.m, shape.k) * sizeof(float), dev);
  const Buffer w(Count(shape.n, shape.k), dev);
  const Buffer w_scale(Count(scale_rows, scale_cols), dev);
  const Buffer y(Count(shape.m, shape.n) * sizeof(float), dev);
  DI_BENCH_CUDA(FillRandomE4m3Floats(x.as<float>(), static_cast<size_t>(shape.m), static_cast<size_t>(shape.k),
                                     0x11ea7000u, stream.get()));
  DI_BENCH_CUDA(FillRandomE4m3(w.as<uint8_t>(), Count(shape.n, shape.k), 0x11ea7001u, stream.get()));
  // e8m0 bytes 124..130: block scales 2^-3 .. 2^3.
  std::vector<uint8_t> scales(Count(scale_rows, scale_cols));
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<uint8_t>(124 + (i * 2654435761u >> 7) % 7);
  DI_BENCH_CUDA(
      cudaMemcpyAsync(w_scale.data(), scales.data(), scales.size(), cudaMemcpyHostToDevice, stream.get()));

  cuda::DeviceWeight dw;
  dw.format = cuda::DeviceWeight::Format::kFp8;
  dw.scale_dtype = DType::kF8E8M0;
  dw.out_features = shape.n;
  dw.in_features = shape.k;
  dw.data = w.data();
  dw.data_row_stride = shape.k;
  dw.scale = w_scale.data();
  dw.scale_row_stride = scale_cols;
  const cuda::LinearMath math = cuda::LinearMath::kFp8Act;
  const size_t scratch_bytes = cuda::LinearScratchBytes(shape.m, dw, math);
  const Buffer scratch(std::max<size_t>(scratch_bytes, 1), dev);
  const auto call = [&] {
    cuda::Linear(x.as<float>(), shape.k, shape.m, dw, y.as<float>(), shape.n, stream.get(), math,
                 scratch_bytes > 0 ? scratch.data() : nullptr, scratch_bytes);
  };
  call();
  stream.Synchronize();
  t.available = true;
  t.check_ratio = CheckSampledOutputs(shape, x, w, scales, y);
  if (!(t.check_ratio <= 1.0)) {
    t.error = fmt::format("sampled outputs disagree with the host reference: worst error {:.3g} times the tolerance",
                          t.check_ratio);
    return t;
  }
  for (int i = 0; i < kWarmupCalls; ++i) call();
  const double seconds = TimeOnStream(stream, [&] {
    for (int i = 0; i < iterations; ++i) call();
  });
  t.seconds_per_call = seconds / iterations;
  t.flops_per_s = GemmFlops(shape) / t.seconds_per_call;
  const double bytes = 4.0 * static_cast<double>(Count(shape.m, shape.k) + Count(shape.m, shape.n)) +
                       static_cast<double>(Count(shape.n, shape.k) + scales.size());
  t.operand_bytes_per_s = bytes / t.seconds_per_call;
  return t;
}

}  // namespace deepinfer::bench
