// Per-step scratch tensors of a forward, on the model's device. Host: one zero-filled buffer per
// tensor. CUDA: bump allocation from chunks that are kept across steps (after the first steps of
// a given shape nothing is allocated), 256-byte aligned; uploads are queued without the host
// waiting for the device: small ones (<= 64 KiB) straight from pageable memory, which the driver
// stages at once, larger ones through page-locked staging areas (the host waits only when one
// must grow). Reset() releases every tensor of the step; views from before a
// Reset() must not be used after it.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <vector>

#include "device/buffer.h"
#include "device/cuda_stream.h"
#include "ops/op_context.h"
#include "tensor/tensor_view.h"

namespace deepinfer {

// DEEPINFER_GRAPH_ONE_UPLOAD (read once; unset or 1: on, 0: off): whether a CUDA-graph step's
// uploads are one copy at its start into a device area its owner keeps beside the staging
// (Workspace::ResetForGraph's `uploads`), instead of one copy node per upload.
bool GraphUploadsInOneCopy();

class Workspace {
 public:
  explicit Workspace(DeviceId device);
  ~Workspace();

  TensorView Alloc(DType dtype, std::initializer_list<int64_t> shape);
  // A tensor holding `host` (n elements of dtype), copied on ctx's stream. The host data may
  // change as soon as this returns.
  TensorView Upload(const ops::OpContext& ctx, const void* host, DType dtype, std::initializer_list<int64_t> shape);
  // Starts a step whose work is queued on ctx's stream. On CUDA the uploads alternate between
  // two staging areas; one is reused only after the stream has passed the step that filled it
  // (so with at most two steps in flight the host does not wait). Uploads may be queued on other
  // streams too (a step's branches) if those join ctx's stream before the next Reset.
  void Reset(const ops::OpContext& ctx);
  // The same for a CUDA-graph step: until the next Reset every upload is copied into `staging`
  // (page-locked, `bytes` long) at consecutive offsets, whatever its size, with no alternation.
  // Without `uploads` each upload is its own copy, queued where Upload is called. With `uploads`
  // (device memory, `bytes` long) the step's one copy of the whole staging into it is queued here,
  // on ctx's stream before any of the step's work, and each uploaded tensor is its slice of
  // `uploads` (a graph replay then runs one copy node instead of one per upload; the host fills the
  // staging before the replay, ForwardBatch::record_only).
  void ResetForGraph(const ops::OpContext& ctx, void* staging, size_t bytes, void* uploads = nullptr);
  // Bytes the uploads since the last Reset took (each rounded up to the alignment): what a graph's
  // staging must hold for a step of the same shapes.
  size_t staged_bytes() const { return staged_bytes_; }

  // A point in the step's allocations to return to: Rewind(Mark()) releases every tensor
  // allocated since, and later Allocs reuse their memory (on CUDA in the same order, so a replayed
  // step gets the same addresses). The forward rewinds after each layer, so a step needs one
  // layer's temporaries, not the sum over layers. On CUDA the reuse is ordered by the step's
  // stream: every kernel using a released tensor must already be queued on it, or on a stream
  // that has joined it since. Uploads' staging
  // is not rewound.
  struct Position {
    size_t host_buffers = 0;
    std::vector<size_t> chunk_used;
  };
  Position Mark() const;
  void Rewind(const Position& position);

  DeviceId device() const { return device_; }
  // Device bytes held by the chunks (CUDA).
  size_t bytes_reserved() const;
  // The most bytes the step's tensors have held at once since the last Reset (each allocation
  // rounded up to the alignment on CUDA): what the step needs.
  size_t peak_bytes_in_use() const { return peak_in_use_; }

 private:
  struct Chunk {
    Buffer buffer;
    size_t used = 0;
  };
  struct Staging {
    PinnedBuffer buffer;
    size_t used = 0;
    std::unique_ptr<CudaEvent> drained;  // recorded after the last copy out of this area
    bool recorded = false;
  };
  void* Carve(size_t bytes);
  void* Stage(const ops::OpContext& ctx, const void* host, size_t bytes);

  DeviceId device_;
  std::vector<Buffer> host_buffers_;
  std::vector<Chunk> chunks_;
  Staging staging_[2];
  int current_ = 0;
  std::vector<cudaStream_t> staged_streams_;  // the streams that have staged since the last Reset
  char* graph_staging_ = nullptr;  // set between ResetForGraph and the next Reset
  size_t graph_staging_bytes_ = 0;
  char* graph_uploads_ = nullptr;  // ResetForGraph's `uploads`, until the next Reset
  size_t staged_bytes_ = 0;
  size_t in_use_ = 0, peak_in_use_ = 0;
};

}  // namespace deepinfer
