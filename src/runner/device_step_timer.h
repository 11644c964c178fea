// Step timing on the device's own timeline: events recorded on the model's stream when a step's
// work begins and ends give the device's busy time per step and its idle time between
// consecutive steps (what the overlapped loop exists to remove). CUDA only: Create() returns
// null for the CPU, or in a build without the CUDA backend.
#pragma once

#include <memory>

#include "tensor/tensor_view.h"

using cudaStream_t = struct CUstream_st*;

namespace deepinfer {

class DeviceStepTimer {
 public:
  virtual ~DeviceStepTimer() = default;
  // Events go on `stream` (null: the legacy default stream).
  static std::unique_ptr<DeviceStepTimer> Create(DeviceId device, cudaStream_t stream = nullptr);

  virtual void StepStarted() = 0;   // queues a step's start event after everything queued so far
  virtual void StepFinished() = 0;  // queues the end event of the step started last
  // For the oldest step started and not yet measured (steps may be queued ahead of it): waits for
  // its end event; busy: its start → end; idle: the previous step's end → its start (negative for
  // the first step).
  virtual void Measure(double* busy_seconds, double* idle_seconds) = 0;
};

}  // namespace deepinfer
