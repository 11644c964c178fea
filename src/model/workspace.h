// Per-step scratch tensors of a forward, on the model's device. Host: one zero-filled buffer per
// tensor. CUDA: bump allocation from chunks that are kept across steps (after the first steps of
// a given shape nothing is allocated), 256-byte aligned. Reset() releases every tensor of the
// step; views from before a Reset() must not be used after it.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <vector>

#include "device/buffer.h"
#include "ops/op_context.h"
#include "tensor/tensor_view.h"

namespace deepinfer {

class Workspace {
 public:
  explicit Workspace(DeviceId device) : device_(device) {}

  TensorView Alloc(DType dtype, std::initializer_list<int64_t> shape);
  // A tensor holding `host` (n elements of dtype), copied on ctx's stream.
  TensorView Upload(const ops::OpContext& ctx, const void* host, DType dtype, std::initializer_list<int64_t> shape);
  void Reset();

  DeviceId device() const { return device_; }
  size_t bytes_reserved() const;

 private:
  struct Chunk {
    Buffer buffer;
    size_t used = 0;
  };
  void* Carve(size_t bytes);

  DeviceId device_;
  std::vector<Buffer> host_buffers_;
  std::vector<Chunk> chunks_;
};

}  // namespace deepinfer
