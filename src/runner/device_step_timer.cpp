#include "runner/device_step_timer.h"

#if DEEPINFER_HAS_CUDA
#include <deque>
#include <utility>
#include <vector>

#include "device/cuda_stream.h"
#endif

namespace deepinfer {

#if DEEPINFER_HAS_CUDA
namespace {

// Events on the stream the runner queues the model's work on.
class CudaStepTimer final : public DeviceStepTimer {
 public:
  explicit CudaStepTimer(cudaStream_t stream) : stream_(stream) {}
  void StepStarted() override {
    Span span{Take(), Take()};
    span.start->Record(stream_);
    in_flight_.push_back(std::move(span));
  }
  void StepFinished() override { in_flight_.back().end->Record(stream_); }
  void Measure(double* busy_seconds, double* idle_seconds) override {
    Span span = std::move(in_flight_.front());
    in_flight_.pop_front();
    span.end->Synchronize();
    *busy_seconds = CudaEvent::ElapsedMs(*span.start, *span.end) * 1e-3;
    *idle_seconds = previous_end_ ? CudaEvent::ElapsedMs(*previous_end_, *span.start) * 1e-3 : -1.0;
    if (previous_end_) spare_.push_back(std::move(previous_end_));
    spare_.push_back(std::move(span.start));
    previous_end_ = std::move(span.end);
  }

 private:
  struct Span {
    std::unique_ptr<CudaEvent> start, end;
  };
  std::unique_ptr<CudaEvent> Take() {
    if (spare_.empty()) return std::make_unique<CudaEvent>(true);
    std::unique_ptr<CudaEvent> e = std::move(spare_.back());
    spare_.pop_back();
    return e;
  }

  cudaStream_t stream_;
  std::deque<Span> in_flight_;
  std::vector<std::unique_ptr<CudaEvent>> spare_;
  std::unique_ptr<CudaEvent> previous_end_;
};

}  // namespace
#endif

std::unique_ptr<DeviceStepTimer> DeviceStepTimer::Create(DeviceId device, cudaStream_t stream) {
#if DEEPINFER_HAS_CUDA
  if (device.type == DeviceType::kCuda) return std::make_unique<CudaStepTimer>(stream);
#endif
  (void)device, (void)stream;
  return nullptr;
}

}  // namespace deepinfer
