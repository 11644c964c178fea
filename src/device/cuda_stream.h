// RAII handles for CUDA streams, events and pinned host memory, usable from host C++ files. In a
// CPU-only build constructing one throws (there is no device to run on).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

using cudaStream_t = struct CUstream_st*;
using cudaEvent_t = struct CUevent_st*;
using cudaGraphExec_t = struct CUgraphExec_st*;

namespace deepinfer {

class CudaStream {
 public:
  explicit CudaStream(int device_index);  // a non-blocking stream (no implicit sync with stream 0)
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }
  void Synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

class CudaEvent {
 public:
  explicit CudaEvent(bool timing = false);
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return event_; }
  void Record(cudaStream_t stream);
  void Synchronize() const;          // host waits for the recorded work
  bool Done() const;                 // recorded work finished (never blocks)
  void StreamWait(cudaStream_t stream) const;  // `stream` waits for the recorded work
  // Milliseconds between two recorded timing events (both complete).
  static float ElapsedMs(const CudaEvent& start, const CudaEvent& end);

 private:
  cudaEvent_t event_ = nullptr;
};

// Side streams on which work queued on a main stream splits into concurrent branches and joins
// again. Captured from a stream being recorded into a CUDA graph, a fork and its join become
// parallel branches of the graph. Fork and Join are stream operations only: the host never waits.
class StreamBranches {
 public:
  StreamBranches(int device_index, int branches);  // `branches` non-blocking side streams
  StreamBranches(const StreamBranches&) = delete;
  StreamBranches& operator=(const StreamBranches&) = delete;
  int size() const { return static_cast<int>(streams_.size()); }
  cudaStream_t stream(int branch) const { return streams_.at(static_cast<size_t>(branch))->get(); }
  // Work queued afterwards on side streams [first, first + count) runs after the work queued on
  // `main` so far.
  void Fork(cudaStream_t main, int first, int count);
  // Work queued afterwards on `main` runs after the work queued so far on side streams
  // [first, first + count). Every fork must be joined before a capture of `main` ends.
  void Join(cudaStream_t main, int first, int count);

 private:
  std::vector<std::unique_ptr<CudaStream>> streams_;
  std::unique_ptr<CudaEvent> forked_;
  std::vector<std::unique_ptr<CudaEvent>> done_;  // one a side stream
};

// A CUDA graph captured from a stream and instantiated, replayed with Launch.
class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  // Work queued on `stream` (by this thread) from BeginCapture to EndCapture is recorded, not run.
  // EndCapture makes every kernel-to-kernel edge of the recorded graph that links a chain (the
  // only edge out of the one kernel and into the other; not a fork or join of StreamBranches) a
  // programmatic dependency (programmatic dependent launch: the next kernel's launch overlaps the
  // previous one's work; each kernel waits for its predecessor in PdlPrologue,
  // kernels/cuda/cuda_common.cuh) on devices of compute capability 9.0 and later, unless
  // DEEPINFER_PDL=0 or `programmatic_edges` is false (ProgrammaticEdgesForTokens, graph_paths.h:
  // the step's size); ProgrammaticEdges() counts those of the last capture.
  static void BeginCapture(cudaStream_t stream);
  void EndCapture(cudaStream_t stream, bool programmatic_edges = true);
  size_t ProgrammaticEdges() const { return programmatic_edges_; }
  // The last capture's nodes, and of those its kernel launches (the step's launch count), and
  // the most kernels on one path through it (LongestKernelChain: what runs one after another
  // however its branches overlap; all of them for a one-stream capture).
  size_t Nodes() const { return nodes_; }
  size_t KernelNodes() const { return kernel_nodes_; }
  size_t CriticalPathKernels() const { return longest_kernel_chain_; }
  void Launch(cudaStream_t stream) const;
  bool ready() const { return exec_ != nullptr; }

 private:
  cudaGraphExec_t exec_ = nullptr;
  size_t programmatic_edges_ = 0;
  size_t nodes_ = 0, kernel_nodes_ = 0, longest_kernel_chain_ = 0;
};

// Whether CUDA graphs get programmatic kernel-to-kernel edges: DEEPINFER_PDL unset, empty or 1
// (the default), not with 0; anything else is an error. Read once.
bool ProgrammaticDependentLaunch();

// Waits until every stream of the device is idle.
void SynchronizeDevice(int device_index);

// Runs fn(data) on a runtime thread once the work queued on `stream` so far has finished. fn must
// not call the CUDA API (it may lock a mutex and notify a condition variable).
void EnqueueHostCallback(cudaStream_t stream, void (*fn)(void*), void* data);

// Page-locked host memory for asynchronous copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace deepinfer
