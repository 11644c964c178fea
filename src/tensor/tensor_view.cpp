#include "tensor/tensor_view.h"

#include <fmt/format.h>

namespace deepinfer {

TensorView::TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape,
                       DeviceId device)
    : data_(data), dtype_(dtype), device_(device), ndim_(static_cast<int>(shape.size())) {
  DI_CHECK(ndim_ <= kMaxDims, "at most {} dimensions", kMaxDims);
  int i = 0;
  for (int64_t s : shape) shape_[i++] = s;
  SetContiguousStrides();
}

TensorView::TensorView(void* data, DType dtype, const int64_t* shape, int ndim, DeviceId device)
    : data_(data), dtype_(dtype), device_(device), ndim_(ndim) {
  DI_CHECK(ndim_ >= 0 && ndim_ <= kMaxDims, "at most {} dimensions", kMaxDims);
  for (int i = 0; i < ndim; ++i) shape_[i] = shape[i];
  SetContiguousStrides();
}

void TensorView::SetContiguousStrides() {
  int64_t s = 1;
  for (int i = ndim_ - 1; i >= 0; --i) {
    strides_[i] = s;
    s *= shape_[i];
  }
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= shape_[i];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t s = 1;
  for (int i = ndim_ - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != s) return false;
    s *= shape_[i];
  }
  return true;
}

TensorView TensorView::Row(int64_t r) const {
  DI_CHECK(ndim_ >= 1 && r >= 0 && r < shape_[0], "row {} out of range {}", r, ShapeString());
  TensorView v = *this;
  v.data_ = static_cast<char*>(data_) + r * strides_[0] * static_cast<int64_t>(DTypeSize(dtype_));
  for (int i = 1; i < ndim_; ++i) {
    v.shape_[i - 1] = shape_[i];
    v.strides_[i - 1] = strides_[i];
  }
  v.ndim_ = ndim_ - 1;
  return v;
}

TensorView TensorView::Slice(int64_t begin, int64_t end) const {
  DI_CHECK(ndim_ >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
           "slice [{}, {}) out of range {}", begin, end, ShapeString());
  TensorView v = *this;
  v.data_ =
      static_cast<char*>(data_) + begin * strides_[0] * static_cast<int64_t>(DTypeSize(dtype_));
  v.shape_[0] = end - begin;
  return v;
}

TensorView TensorView::Columns(int64_t begin, int64_t end) const {
  DI_CHECK(ndim_ == 2 && 0 <= begin && begin <= end && end <= shape_[1], "columns [{}, {}) out of range {}", begin,
           end, ShapeString());
  TensorView v = *this;
  v.data_ =
      static_cast<char*>(data_) + begin * strides_[1] * static_cast<int64_t>(DTypeSize(dtype_));
  v.shape_[1] = end - begin;
  return v;
}

TensorView TensorView::Reshape(std::initializer_list<int64_t> shape) const {
  DI_CHECK(is_contiguous(), "reshape needs a contiguous tensor");
  TensorView v(data_, dtype_, shape, device_);
  DI_CHECK(v.numel() == numel(), "reshape {} -> {} changes the element count", ShapeString(),
           v.ShapeString());
  return v;
}

std::string TensorView::ShapeString() const {
  std::string s = "[";
  for (int i = 0; i < ndim_; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape_[i]);
  }
  return s + "]";
}

}  // namespace deepinfer
