#include "model/workspace.h"

#include <algorithm>

#include "ops/ops.h"

namespace deepinfer {

namespace {
constexpr size_t kAlignment = 256;
constexpr size_t kMinChunkBytes = size_t{64} << 20;
}  // namespace

void* Workspace::Carve(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  if (device_.is_cpu()) {
    host_buffers_.emplace_back(bytes);
    return host_buffers_.back().data();
  }
  const size_t need = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  for (Chunk& c : chunks_) {
    if (c.buffer.size() - c.used >= need) {
      void* p = static_cast<char*>(c.buffer.data()) + c.used;
      c.used += need;
      return p;
    }
  }
  chunks_.push_back({Buffer(std::max(need, kMinChunkBytes), device_), need});
  return chunks_.back().buffer.data();
}

TensorView Workspace::Alloc(DType dtype, std::initializer_list<int64_t> shape) {
  const TensorView shaped(nullptr, dtype, shape);
  return TensorView(Carve(shaped.nbytes()), dtype, shape, device_);
}

TensorView Workspace::Upload(const ops::OpContext& ctx, const void* host, DType dtype,
                             std::initializer_list<int64_t> shape) {
  TensorView t = Alloc(dtype, shape);
  ops::CopyBytes(ctx, t.raw(), host, t.nbytes());
  return t;
}

void Workspace::Reset() {
  host_buffers_.clear();
  for (Chunk& c : chunks_) c.used = 0;
}

size_t Workspace::bytes_reserved() const {
  size_t total = 0;
  for (const Chunk& c : chunks_) total += c.buffer.size();
  return total;
}

}  // namespace deepinfer
