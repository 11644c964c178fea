// Helpers for the CUDA-vs-CPU kernel tests: device arrays, seeded random fills, and comparisons
// that report the worst element.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "device/cuda_error.h"

namespace deepinfer::test {

// A device copy of a host vector (or uninitialized storage), freed on destruction.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t n) : n_(n) {
    if (n_ > 0) DI_CUDA_CHECK(cudaMalloc(&ptr_, n_ * sizeof(T)), "cudaMalloc");
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    if (n_ > 0) DI_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  ~DeviceArray() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : ptr_(o.ptr_), n_(o.n_) { o.ptr_ = nullptr, o.n_ = 0; }

  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  std::vector<T> ToHost() const {
    std::vector<T> host(n_);
    DI_CUDA_CHECK(cudaDeviceSynchronize(), "kernel");
    if (n_ > 0) DI_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }
  void Fill(uint8_t byte) { DI_CUDA_CHECK(cudaMemset(ptr_, byte, n_ * sizeof(T)), "memset"); }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

std::vector<float> RandomFloats(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f);
std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed);
// BF16 bit patterns of random values in [lo, hi).
std::vector<uint16_t> RandomBf16(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f);
// Random e4m3 codes, NaN codes (0x7f, 0xff) excluded.
std::vector<uint8_t> RandomE4m3(size_t n, uint64_t seed);
// Random e8m0 scale codes in [lo, hi] (127 = 1.0).
std::vector<uint8_t> RandomE8m0(size_t n, uint64_t seed, uint8_t lo = 120, uint8_t hi = 130);
// The bit patterns of floats (for bit-exact comparisons that also tell -0 from 0 and NaN payloads).
std::vector<uint32_t> Bits(const std::vector<float>& x);

// Element-wise |got − want| <= atol + rtol·|want| (NaN equal to NaN, an infinity equal to the same
// infinity); on failure names the
// worst element. Also records the max abs diff as a test property (for the closing notes).
::testing::AssertionResult AllClose(const std::vector<float>& got, const std::vector<float>& want, float atol,
                                    float rtol, const std::string& what = "");
// Bit-exact equality of two arrays of any trivially comparable type.
template <typename T>
::testing::AssertionResult AllEqual(const std::vector<T>& got, const std::vector<T>& want, const std::string& what = "") {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " != " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == want[i])) return ::testing::AssertionFailure() << what << ": first difference at " << i;
  }
  return ::testing::AssertionSuccess();
}

// Whether the tests run at sanitizer sizes: DEEPINFER_SANITIZER_SIZES=1, which
// scripts/gpu-sanitize-parallel.sh sets. compute-sanitizer racecheck slows a whole forward some
// thousands of times (a golden test of 0.05 s takes 270–430 s) and a device call lasts at most 10
// minutes, so the whole-model tests then launch the same kernels at the same shapes fewer times:
// shorter prompts, fewer steps, fewer requests. Their assertions stay; only the counts the full
// sizes are chosen to reach (preemptions, prefix hits, replayed graphs) are not asserted.
bool SanitizerSizes();

// Skips the test when no CUDA device is present (a CUDA build run on a CPU-only machine).
#define DI_REQUIRE_GPU()                                                        \
  do {                                                                          \
    int di_count_ = 0;                                                          \
    if (cudaGetDeviceCount(&di_count_) != cudaSuccess || di_count_ == 0) {      \
      GTEST_SKIP() << "no CUDA device";                                         \
    }                                                                           \
  } while (0)

// kSet(mode) for the scope, then kSet(-1): one of the kernels' switch hooks (a kernel choice on
// (1) or off (0) for the whole process, then back to the environment's).
template <void (*kSet)(int)>
class ScopedSwitch {
 public:
  explicit ScopedSwitch(int mode) { kSet(mode); }
  ~ScopedSwitch() { kSet(-1); }
  ScopedSwitch(const ScopedSwitch&) = delete;
  ScopedSwitch& operator=(const ScopedSwitch&) = delete;
};

}  // namespace deepinfer::test
