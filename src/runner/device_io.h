// Internal to src/runner: the buffers, streams and events of ModelRunner's CUDA path
// (model_runner_device.cpp), complete where the runner is built and destroyed.
#pragma once

#include <map>
#include <memory>
#include <utility>

#include "device/buffer.h"
#include "device/cuda_stream.h"
#include "model/workspace.h"
#include "ops/op_context.h"
#include "runner/model_runner.h"

namespace deepinfer {

struct ModelRunner::DeviceIo {
  explicit DeviceIo(DeviceId device) : compute(device.index), op{device, compute.get()}, copy_stream(device.index) {
    SynchronizeDevice(device.index);
    for (int p = 0; p < 2; ++p) {
      ws[p] = std::make_unique<Workspace>(device);
      landed[p] = std::make_unique<CudaEvent>();
      sampled[p] = std::make_unique<CudaEvent>();
    }
  }
  ~DeviceIo() {
    // Copies into the result buffers may still be queued if a step failed half-way.
    copy_stream.Synchronize();
  }

  CudaStream compute;  // the model's forward, the sampling and the state copies
  ops::OpContext op;   // on `compute`
  CudaStream copy_stream;
  std::unique_ptr<Workspace> ws[2];
  std::unique_ptr<CudaEvent> sampled[2];  // compute stream: the step's sampling is done
  std::unique_ptr<CudaEvent> landed[2];   // copy stream: the step's results are in `results`
  PinnedBuffer results[2];                // per row: sampled id, logprob, then the top ids and logprobs
  Buffer pack_logits;                     // [num_pack_slots, vocab] f32 on the device
  TensorView last_sampled;                // I32 ids sampled by step `last_number` (in its workspace)
  uint64_t last_number = 0;
  uint64_t next_number = 1;
  uint64_t callbacks = 0;                 // host callbacks queued (OnDeviceStepLanded counts them)

  // A decode step of `bucket` sequences as a CUDA graph, one per (bucket, parity), captured when
  // the runner starts (ModelRunner::CaptureDecodeGraphs). A replay refills `staging` with a
  // record-only forward, then launches.
  struct DecodeGraph {
    CudaGraph graph;
    PinnedBuffer staging;  // its uploads
    Buffer uploads;        // on the device, as long as staging: where one copy takes them (GraphUploadsInOneCopy)
    size_t staged_bytes = 0;
  };
  // Per parity, shared by that parity's graphs (one step of a parity is in flight at a time).
  Buffer graph_ids[2];     // [largest bucket] I32: a graph's input tokens
  Buffer graph_logits[2];  // [largest bucket, vocab] F32: its output
  std::map<std::pair<int64_t, int>, std::unique_ptr<DecodeGraph>> graphs;
};

}  // namespace deepinfer
