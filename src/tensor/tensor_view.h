// TensorView: a non-owning view of device or host memory: pointer, dtype, shape, strides, device.
// Strides are in elements (for packed FP4 one element is a byte holding two values). A view never
// frees; ownership lives in device::Buffer or in a mapped file.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "base/error.h"
#include "tensor/dtype.h"

namespace deepinfer {

enum class DeviceType : uint8_t { kCpu, kCuda };

struct DeviceId {
  DeviceType type = DeviceType::kCpu;
  int index = 0;
  bool operator==(const DeviceId&) const = default;
  bool is_cpu() const { return type == DeviceType::kCpu; }
};

inline constexpr int kMaxDims = 5;

class TensorView {
 public:
  TensorView() = default;
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape,
             DeviceId device = {});
  TensorView(void* data, DType dtype, const int64_t* shape, int ndim, DeviceId device = {});

  void* raw() const { return data_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  DeviceId device() const { return device_; }
  int ndim() const { return ndim_; }
  int64_t size(int d) const { return shape_[Axis(d)]; }
  int64_t stride(int d) const { return strides_[Axis(d)]; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  bool empty() const { return data_ == nullptr; }
  bool is_contiguous() const;

  // Row r of the leading dimension, as a view with one dimension fewer.
  TensorView Row(int64_t r) const;
  // Rows [begin, end) of the leading dimension.
  TensorView Slice(int64_t begin, int64_t end) const;
  // Columns [begin, end) of a 2-d view: the same rows and row stride (so not contiguous unless the
  // range holds every column).
  TensorView Columns(int64_t begin, int64_t end) const;
  // Same memory, new contiguous shape with the same number of elements.
  TensorView Reshape(std::initializer_list<int64_t> shape) const;

  std::string ShapeString() const;  // "[4, 256]"

 private:
  int Axis(int d) const {
    const int a = d < 0 ? d + ndim_ : d;
    DI_CHECK(a >= 0 && a < ndim_, "axis {} out of range for a {}-d tensor", d, ndim_);
    return a;
  }
  void SetContiguousStrides();

  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  DeviceId device_{};
  int ndim_ = 0;
  std::array<int64_t, kMaxDims> shape_{};
  std::array<int64_t, kMaxDims> strides_{};
};

}  // namespace deepinfer
