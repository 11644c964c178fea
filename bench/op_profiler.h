// EventOpProfiler: ops::OpProfiler that times every op of a step with a pair of CUDA events and
// groups the times by the model's scope (a layer, the head) and the op's name. An op that another
// op's CUDA branch calls is part of the outer op's time.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device/cuda_stream.h"
#include "ops/op_context.h"

namespace deepinfer::bench {

struct OpTime {
  double seconds = 0;  // device time between the op's begin and end events, summed
  int64_t calls = 0;
};

class EventOpProfiler : public ops::OpProfiler {
 public:
  void Begin(const char* op, cudaStream_t stream) override;
  void End(cudaStream_t stream) override;
  void SetScope(const char* scope) override { scope_ = scope; }
  // Waits for the recorded events and adds their times to the totals; the events are reused.
  void Collect();
  // (scope, op) -> time, over every step collected.
  const std::map<std::pair<std::string, std::string>, OpTime>& totals() const { return totals_; }
  void Clear() { totals_.clear(); }

 private:
  struct Span {
    std::string scope, op;
    size_t begin = 0, end = 0;  // indices into events_
  };
  CudaEvent& NextEvent();

  std::string scope_;
  std::vector<std::unique_ptr<CudaEvent>> events_;
  size_t used_ = 0;
  std::vector<Span> spans_;
  int depth_ = 0;  // ops begun and not ended (nested ops are timed as part of the outer one)
  std::map<std::pair<std::string, std::string>, OpTime> totals_;
};

}  // namespace deepinfer::bench
