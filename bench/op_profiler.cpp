#include "bench/op_profiler.h"

#include "base/error.h"

namespace deepinfer::bench {

CudaEvent& EventOpProfiler::NextEvent() {
  if (used_ == events_.size()) events_.push_back(std::make_unique<CudaEvent>(true));
  return *events_[used_++];
}

void EventOpProfiler::Begin(const char* op, cudaStream_t stream) {
  if (depth_++ > 0) return;  // an op called from another op's CUDA branch counts as the outer op
  Span s{scope_, op, used_, 0};
  NextEvent().Record(stream);
  spans_.push_back(std::move(s));
}

void EventOpProfiler::End(cudaStream_t stream) {
  DI_CHECK(depth_ > 0, "an op ended that never began");
  if (--depth_ > 0) return;
  spans_.back().end = used_;
  NextEvent().Record(stream);
}

void EventOpProfiler::Collect() {
  DI_CHECK(depth_ == 0, "collecting inside an op");
  if (used_ > 0) events_[used_ - 1]->Synchronize();
  for (const Span& s : spans_) {
    OpTime& t = totals_[{s.scope, s.op}];
    t.seconds += CudaEvent::ElapsedMs(*events_[s.begin], *events_[s.end]) * 1e-3;
    ++t.calls;
  }
  spans_.clear();
  used_ = 0;
}

}  // namespace deepinfer::bench
