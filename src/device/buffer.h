// Owning memory: Buffer is a move-only RAII allocation on the host (64-byte aligned) or on a
// CUDA device. Views over it are TensorViews; a view must not outlive its Buffer.
#pragma once

#include <cstddef>
#include <utility>

#include "tensor/tensor_view.h"

namespace deepinfer {

class Buffer {
 public:
  Buffer() = default;
  // Allocates `bytes` on `device`; host memory is zero-filled, device memory is not.
  Buffer(size_t bytes, DeviceId device = {});
  ~Buffer();
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return bytes_; }
  DeviceId device() const { return device_; }

  TensorView View(DType dtype, std::initializer_list<int64_t> shape) const;

 private:
  void Release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  DeviceId device_{};
};

// Host tensor with its own storage: shape + dtype + Buffer. For weights materialized on load,
// scratch space and test data.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::initializer_list<int64_t> shape);
  HostTensor(DType dtype, const int64_t* shape, int ndim);

  const TensorView& view() const { return view_; }
  template <typename T>
  T* data() const {
    return view_.data<T>();
  }
  int64_t numel() const { return view_.numel(); }

 private:
  Buffer buffer_;
  TensorView view_;
};

}  // namespace deepinfer
