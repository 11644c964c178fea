// CPU-only build: streams, events and pinned memory exist only with the CUDA backend. Creating
// one is a configuration error; the empty objects (default pinned buffer) are harmless.
#include <utility>

#include "base/error.h"
#include "device/cuda_stream.h"

namespace deepinfer {

namespace {
[[noreturn]] void NoCuda(const char* what) {
  DI_THROW("{} requested but this build has no CUDA backend; configure with the 'cuda' preset", what);
}
}  // namespace

CudaStream::CudaStream(int) { NoCuda("a CUDA stream"); }
CudaStream::~CudaStream() = default;
void CudaStream::Synchronize() const { NoCuda("a CUDA stream"); }

CudaEvent::CudaEvent(bool) { NoCuda("a CUDA event"); }
CudaEvent::~CudaEvent() = default;
void CudaEvent::Record(cudaStream_t) { NoCuda("a CUDA event"); }
void CudaEvent::Synchronize() const { NoCuda("a CUDA event"); }
bool CudaEvent::Done() const { NoCuda("a CUDA event"); }
void CudaEvent::StreamWait(cudaStream_t) const { NoCuda("a CUDA event"); }
float CudaEvent::ElapsedMs(const CudaEvent&, const CudaEvent&) { NoCuda("a CUDA event"); }

void EnqueueHostCallback(cudaStream_t, void (*)(void*), void*) { NoCuda("a CUDA host callback"); }
void SynchronizeDevice(int) { NoCuda("a CUDA device"); }

StreamBranches::StreamBranches(int, int) { NoCuda("CUDA stream branches"); }
void StreamBranches::Fork(cudaStream_t, int, int) { NoCuda("CUDA stream branches"); }
void StreamBranches::Join(cudaStream_t, int, int) { NoCuda("CUDA stream branches"); }

CudaGraph::~CudaGraph() = default;
void CudaGraph::BeginCapture(cudaStream_t) { NoCuda("a CUDA graph"); }
void CudaGraph::EndCapture(cudaStream_t, bool) { NoCuda("a CUDA graph"); }
void CudaGraph::Launch(cudaStream_t) const { NoCuda("a CUDA graph"); }

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) NoCuda("page-locked host memory");
}
PinnedBuffer::~PinnedBuffer() = default;
PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  data_ = std::exchange(other.data_, nullptr);
  bytes_ = std::exchange(other.bytes_, 0);
  return *this;
}

}  // namespace deepinfer
