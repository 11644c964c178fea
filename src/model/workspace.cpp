#include "model/workspace.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "base/switches.h"
#include "ops/ops.h"

namespace deepinfer {

namespace {
constexpr size_t kAlignment = 256;
constexpr size_t kMinChunkBytes = size_t{64} << 20;
constexpr size_t kMinStagingBytes = size_t{1} << 20;
constexpr size_t kDirectUploadBytes = size_t{64} << 10;
size_t Aligned(size_t bytes) { return (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment; }
}  // namespace

bool GraphUploadsInOneCopy() {
  static const bool on =
      ParseOnOffSwitch("DEEPINFER_GRAPH_ONE_UPLOAD", std::getenv("DEEPINFER_GRAPH_ONE_UPLOAD"), true);
  return on;
}

Workspace::Workspace(DeviceId device) : device_(device) {}

Workspace::~Workspace() {
  // Copies out of the staging areas may still be queued: wait for them before freeing.
  for (Staging& s : staging_) {
    if (s.recorded) s.drained->Synchronize();
  }
}

void* Workspace::Carve(size_t bytes) {
  if (device_.is_cpu()) {
    host_buffers_.emplace_back(std::max<size_t>(bytes, 1));
    in_use_ += host_buffers_.back().size();
    peak_in_use_ = std::max(peak_in_use_, in_use_);
    return host_buffers_.back().data();
  }
  const size_t need = Aligned(bytes);
  in_use_ += need;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
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

void* Workspace::Stage(const ops::OpContext& ctx, const void* host, size_t bytes) {
  Staging& s = staging_[current_];
  const size_t need = Aligned(bytes);
  if (std::find(staged_streams_.begin(), staged_streams_.end(), ctx.stream) == staged_streams_.end()) {
    staged_streams_.push_back(ctx.stream);
  }
  if (s.used + need > s.buffer.size()) {
    // Growing frees the old area, which copies queued this step (on any stream that staged) may
    // still read.
    if (s.used > 0) {
      for (cudaStream_t stream : staged_streams_) {
        CudaEvent queued;
        queued.Record(stream);
        queued.Synchronize();
      }
    }
    const size_t keep = s.used;
    PinnedBuffer bigger(std::max({2 * s.buffer.size(), kMinStagingBytes, keep + need}));
    s.buffer = std::move(bigger);
    s.used = 0;
  }
  void* p = s.buffer.as<char>() + s.used;
  s.used += need;
  std::memcpy(p, host, bytes);
  return p;
}

TensorView Workspace::Alloc(DType dtype, std::initializer_list<int64_t> shape) {
  const TensorView shaped(nullptr, dtype, shape);
  return TensorView(Carve(shaped.nbytes()), dtype, shape, device_);
}

TensorView Workspace::Upload(const ops::OpContext& ctx, const void* host, DType dtype,
                             std::initializer_list<int64_t> shape) {
  const size_t offset = staged_bytes_;
  if (graph_uploads_ != nullptr) {  // the slice of the one copy ResetForGraph queued
    const TensorView shaped(nullptr, dtype, shape);
    staged_bytes_ += Aligned(shaped.nbytes());
    DI_CHECK(staged_bytes_ <= graph_staging_bytes_, "graph staging of {} bytes is too small: the step uploads more",
             graph_staging_bytes_);
    std::memcpy(graph_staging_ + offset, host, shaped.nbytes());
    return TensorView(graph_uploads_ + offset, dtype, shape, device_);
  }
  TensorView t = Alloc(dtype, shape);
  staged_bytes_ += Aligned(t.nbytes());
  if (graph_staging_ != nullptr) {
    DI_CHECK(staged_bytes_ <= graph_staging_bytes_, "graph staging of {} bytes is too small: the step uploads more",
             graph_staging_bytes_);
    std::memcpy(graph_staging_ + offset, host, t.nbytes());
    ops::CopyBytesAsync(ctx, t.raw(), graph_staging_ + offset, t.nbytes());
  } else if (device_.is_cpu()) {
    ops::CopyBytes(ctx, t.raw(), host, t.nbytes());
  } else if (t.nbytes() <= kDirectUploadBytes) {
    // Small: straight from pageable memory (the driver stages it before returning, so `host`
    // may change at once, and does not involve a copy engine).
    ops::CopyBytesAsync(ctx, t.raw(), host, t.nbytes());
  } else {
    ops::CopyBytesAsync(ctx, t.raw(), Stage(ctx, host, t.nbytes()), t.nbytes());
  }
  return t;
}

void Workspace::ResetForGraph(const ops::OpContext& ctx, void* staging, size_t bytes, void* uploads) {
  DI_CHECK(!device_.is_cpu() && staging != nullptr, "graph staging is for a CUDA workspace");
  for (Chunk& c : chunks_) c.used = 0;
  in_use_ = peak_in_use_ = 0;
  staged_bytes_ = 0;
  graph_staging_ = static_cast<char*>(staging);
  graph_staging_bytes_ = bytes;
  graph_uploads_ = static_cast<char*>(uploads);
  if (uploads != nullptr) ops::CopyBytesAsync(ctx, uploads, staging, bytes);
}

void Workspace::Reset(const ops::OpContext& ctx) {
  host_buffers_.clear();
  staged_streams_.clear();
  for (Chunk& c : chunks_) c.used = 0;
  in_use_ = peak_in_use_ = 0;
  staged_bytes_ = 0;
  graph_staging_ = nullptr;
  graph_uploads_ = nullptr;
  if (device_.is_cpu()) return;
  Staging& done = staging_[current_];
  if (!done.drained) done.drained = std::make_unique<CudaEvent>();
  done.drained->Record(ctx.stream);
  done.recorded = true;
  current_ ^= 1;
  Staging& next = staging_[current_];
  if (next.recorded) next.drained->Synchronize();  // the step before the previous one has passed
  next.used = 0;
}

Workspace::Position Workspace::Mark() const {
  Position p;
  p.host_buffers = host_buffers_.size();
  p.chunk_used.reserve(chunks_.size());
  for (const Chunk& c : chunks_) p.chunk_used.push_back(c.used);
  return p;
}

void Workspace::Rewind(const Position& position) {
  DI_CHECK(position.host_buffers <= host_buffers_.size() && position.chunk_used.size() <= chunks_.size(),
           "workspace rewound to a position it has not reached (a Reset in between?)");
  host_buffers_.erase(host_buffers_.begin() + static_cast<std::ptrdiff_t>(position.host_buffers),
                      host_buffers_.end());
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const size_t used = i < position.chunk_used.size() ? position.chunk_used[i] : 0;
    DI_CHECK(used <= chunks_[i].used, "workspace rewound to a position it has not reached (a Reset in between?)");
    chunks_[i].used = used;
  }
  in_use_ = 0;
  for (const Buffer& b : host_buffers_) in_use_ += b.size();
  for (const Chunk& c : chunks_) in_use_ += c.used;
}

size_t Workspace::bytes_reserved() const {
  size_t total = 0;
  for (const Chunk& c : chunks_) total += c.buffer.size();
  return total;
}

}  // namespace deepinfer
