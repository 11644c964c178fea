#include "runner/device_step_timer.h"

#if DEEPINFER_HAS_CUDA
#include <utility>

#include "device/cuda_stream.h"
#endif

namespace deepinfer {

#if DEEPINFER_HAS_CUDA
namespace {

// Events on the legacy default stream, where the model's ops are queued (OpContext stream null).
class CudaStepTimer final : public DeviceStepTimer {
 public:
  void StepStarted() override { start_->Record(nullptr); }
  void StepFinished() override { end_->Record(nullptr); }
  void Measure(double* busy_seconds, double* idle_seconds) override {
    end_->Synchronize();
    *busy_seconds = CudaEvent::ElapsedMs(*start_, *end_) * 1e-3;
    *idle_seconds = has_previous_ ? CudaEvent::ElapsedMs(*previous_end_, *start_) * 1e-3 : -1.0;
    std::swap(previous_end_, end_);
    has_previous_ = true;
  }

 private:
  std::unique_ptr<CudaEvent> start_ = std::make_unique<CudaEvent>(true);
  std::unique_ptr<CudaEvent> end_ = std::make_unique<CudaEvent>(true);
  std::unique_ptr<CudaEvent> previous_end_ = std::make_unique<CudaEvent>(true);
  bool has_previous_ = false;
};

}  // namespace
#endif

std::unique_ptr<DeviceStepTimer> DeviceStepTimer::Create(DeviceId device) {
#if DEEPINFER_HAS_CUDA
  if (device.type == DeviceType::kCuda) return std::make_unique<CudaStepTimer>();
#endif
  (void)device;
  return nullptr;
}

}  // namespace deepinfer
