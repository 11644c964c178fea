#include "device/cuda_stream.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/demangle.h"
#include "base/error.h"
#include "base/switches.h"
#include "device/cuda_error.h"
#include "device/graph_paths.h"

namespace deepinfer {

CudaStream::CudaStream(int device_index) {
  DI_CUDA_CHECK(cudaSetDevice(device_index), "cudaSetDevice");
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void CudaStream::Synchronize() const { DI_CUDA_CHECK(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

CudaEvent::CudaEvent(bool timing) {
  DI_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming),
                "cudaEventCreate");
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

void CudaEvent::Record(cudaStream_t stream) { DI_CUDA_CHECK(cudaEventRecord(event_, stream), "cudaEventRecord"); }

void CudaEvent::Synchronize() const { DI_CUDA_CHECK(cudaEventSynchronize(event_), "cudaEventSynchronize"); }

bool CudaEvent::Done() const {
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) return false;
  DI_CUDA_CHECK(status, "cudaEventQuery");
  return true;
}

void CudaEvent::StreamWait(cudaStream_t stream) const {
  DI_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0), "cudaStreamWaitEvent");
}

float CudaEvent::ElapsedMs(const CudaEvent& start, const CudaEvent& end) {
  float ms = 0;
  DI_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, end.event_), "cudaEventElapsedTime");
  return ms;
}

StreamBranches::StreamBranches(int device_index, int branches) {
  DI_CHECK(branches >= 1, "StreamBranches takes at least one side stream, got {}", branches);
  forked_ = std::make_unique<CudaEvent>();
  for (int i = 0; i < branches; ++i) {
    streams_.push_back(std::make_unique<CudaStream>(device_index));
    done_.push_back(std::make_unique<CudaEvent>());
  }
}

void StreamBranches::Fork(cudaStream_t main, int first, int count) {
  DI_CHECK(first >= 0 && count >= 0 && first + count <= size(), "fork of side streams [{}, {}) of {}", first,
           first + count, size());
  if (count == 0) return;
  forked_->Record(main);
  int waiting = first;
  try {
    for (; waiting < first + count; ++waiting) forked_->StreamWait(stream(waiting));
  } catch (...) {
    // The streams forked so far rejoin `main`: a capture must not end with one left out.
    try {
      Join(main, first, waiting - first);
    } catch (...) {
    }
    throw;
  }
}

void StreamBranches::Join(cudaStream_t main, int first, int count) {
  DI_CHECK(first >= 0 && count >= 0 && first + count <= size(), "join of side streams [{}, {}) of {}", first,
           first + count, size());
  for (int i = first; i < first + count; ++i) {
    done_[static_cast<size_t>(i)]->Record(stream(i));
    done_[static_cast<size_t>(i)]->StreamWait(main);
  }
}

CudaGraph::~CudaGraph() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
}

void CudaGraph::BeginCapture(cudaStream_t stream) {
  DI_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
}

bool ProgrammaticDependentLaunch() {
  static const bool on = ParseOnOffSwitch("DEEPINFER_PDL", std::getenv("DEEPINFER_PDL"), /*if_unset=*/true);
  return on;
}

namespace {

// Replaces every plain edge between two kernel nodes of `graph` by a programmatic one (the
// upstream kernel's programmatic port: it fires once all of its blocks have run
// griddepcontrol.launch_dependents or exited), where the edge is its upstream node's only way out
// and its downstream node's only way in: a link of a chain, as a one-stream capture makes. The
// forks and joins of concurrent branches (StreamBranches) keep plain edges. Returns how many it
// replaced.
size_t MakeKernelEdgesProgrammatic(cudaGraph_t graph) {
  size_t count = 0;
  DI_CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &count), "cudaGraphGetEdges");
  std::vector<cudaGraphNode_t> from(count), to(count);
  std::vector<cudaGraphEdgeData> data(count);
  DI_CUDA_CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &count), "cudaGraphGetEdges");
  auto is_kernel = [](cudaGraphNode_t node) {
    cudaGraphNodeType type;
    DI_CUDA_CHECK(cudaGraphNodeGetType(node, &type), "cudaGraphNodeGetType");
    return type == cudaGraphNodeTypeKernel;
  };
  std::map<cudaGraphNode_t, int> outgoing, incoming;
  for (size_t i = 0; i < count; ++i) {
    ++outgoing[from[i]];
    ++incoming[to[i]];
  }
  size_t replaced = 0;
  for (size_t i = 0; i < count; ++i) {
    if (data[i].type != cudaGraphDependencyTypeDefault || outgoing[from[i]] != 1 || incoming[to[i]] != 1 ||
        !is_kernel(from[i]) || !is_kernel(to[i])) {
      continue;
    }
    DI_CUDA_CHECK(cudaGraphRemoveDependencies(graph, &from[i], &to[i], &data[i], 1), "cudaGraphRemoveDependencies");
    cudaGraphEdgeData programmatic{};
    programmatic.from_port = cudaGraphKernelNodePortProgrammatic;
    programmatic.type = cudaGraphDependencyTypeProgrammatic;
    DI_CUDA_CHECK(cudaGraphAddDependencies(graph, &from[i], &to[i], &programmatic, 1), "cudaGraphAddDependencies");
    ++replaced;
  }
  return replaced;
}

// A kernel node's function, demangled, and its launch shape ("grid x,y,z block x,y,z smem B").
std::pair<std::string, std::string> KernelNodeName(cudaGraphNode_t node) {
  cudaKernelNodeParams params{};
  if (cudaGraphKernelNodeGetParams(node, &params) != cudaSuccess) {
    (void)cudaGetLastError();  // a node this API cannot describe is listed, not fatal
    return {"?", "?"};
  }
  const char* mangled = nullptr;
  if (cudaFuncGetName(&mangled, params.func) != cudaSuccess) {
    (void)cudaGetLastError();
    mangled = nullptr;
  }
  char shape[128];
  std::snprintf(shape, sizeof shape, "grid %u,%u,%u block %u,%u,%u smem %u", params.gridDim.x, params.gridDim.y,
                params.gridDim.z, params.blockDim.x, params.blockDim.y, params.blockDim.z, params.sharedMemBytes);
  return {Demangled(mangled), shape};
}

// DEEPINFER_GRAPH_KERNELS=FILE: appends each captured graph's longest kernel path (one line a
// kernel: its place on the path, function and launch shape) and its kernels counted by function,
// for reading which launches make a step's critical path.
void AppendGraphKernels(const char* file, const std::vector<cudaGraphNode_t>& nodes, const std::vector<bool>& is_kernel,
                        const std::vector<size_t>& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> out(std::fopen(file, "a"), std::fclose);
  DI_CHECK(out != nullptr, "DEEPINFER_GRAPH_KERNELS: cannot open {} for appending", file);
  std::map<size_t, std::pair<std::string, std::string>> names;  // kernel node -> (function, shape)
  std::map<std::string, size_t> by_function;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!is_kernel[i]) continue;
    const auto& name = names.emplace(i, KernelNodeName(nodes[i])).first->second;
    ++by_function[name.first];
  }
  std::fprintf(out.get(), "graph nodes %zu kernels %zu longest_path %zu\n", nodes.size(), names.size(), path.size());
  for (size_t place = 0; place < path.size(); ++place) {
    const auto& [name, shape] = names.at(path[place]);
    std::fprintf(out.get(), "path %zu\t%s\t%s\n", place, shape.c_str(), name.c_str());
  }
  for (const auto& [name, count] : by_function) std::fprintf(out.get(), "count %zu\t%s\n", count, name.c_str());
  std::fprintf(out.get(), "end\n");
}

// A captured graph's size: its nodes, how many of them are kernels, and the most kernels on one
// path through it (LongestKernelChain).
struct GraphShape {
  size_t nodes = 0, kernels = 0, longest_kernel_chain = 0;
};

GraphShape ShapeOf(cudaGraph_t graph) {
  size_t count = 0;
  DI_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count), "cudaGraphGetNodes");
  std::vector<cudaGraphNode_t> nodes(count);
  DI_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count), "cudaGraphGetNodes");
  GraphShape shape;
  shape.nodes = count;
  std::map<cudaGraphNode_t, size_t> index;
  std::vector<bool> is_kernel(count);
  for (size_t i = 0; i < count; ++i) {
    index[nodes[i]] = i;
    cudaGraphNodeType type;
    DI_CUDA_CHECK(cudaGraphNodeGetType(nodes[i], &type), "cudaGraphNodeGetType");
    is_kernel[i] = type == cudaGraphNodeTypeKernel;
    shape.kernels += is_kernel[i] ? 1 : 0;
  }
  size_t edge_count = 0;
  DI_CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &edge_count), "cudaGraphGetEdges");
  std::vector<cudaGraphNode_t> from(edge_count), to(edge_count);
  DI_CUDA_CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), nullptr, &edge_count), "cudaGraphGetEdges");
  std::vector<std::pair<size_t, size_t>> edges;
  edges.reserve(edge_count);
  for (size_t i = 0; i < edge_count; ++i) edges.emplace_back(index.at(from[i]), index.at(to[i]));
  const std::vector<size_t> path = LongestKernelPath(is_kernel, edges);
  shape.longest_kernel_chain = path.size();
  if (const char* file = std::getenv("DEEPINFER_GRAPH_KERNELS"); file != nullptr && *file != 0) {
    AppendGraphKernels(file, nodes, is_kernel, path);
  }
  return shape;
}

// Programmatic dependent launch needs compute capability 9.0 (Hopper) or later; older devices keep
// plain edges (their kernels' PdlPrologue compiles to nothing).
bool CurrentDeviceLaunchesProgrammatically() {
  int device = 0, major = 0;
  DI_CUDA_CHECK(cudaGetDevice(&device), "cudaGetDevice");
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
  return major >= 9;
}

}  // namespace

void CudaGraph::EndCapture(cudaStream_t stream, bool programmatic_edges) {
  cudaGraph_t graph = nullptr;
  DI_CUDA_CHECK(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  exec_ = nullptr;
  programmatic_edges_ = 0;
  nodes_ = kernel_nodes_ = longest_kernel_chain_ = 0;
  try {
    const GraphShape shape = ShapeOf(graph);
    nodes_ = shape.nodes;
    kernel_nodes_ = shape.kernels;
    longest_kernel_chain_ = shape.longest_kernel_chain;
    if (programmatic_edges && ProgrammaticDependentLaunch() && CurrentDeviceLaunchesProgrammatically()) {
      programmatic_edges_ = MakeKernelEdgesProgrammatic(graph);
    }
  } catch (...) {
    cudaGraphDestroy(graph);
    throw;
  }
  const cudaError_t status = cudaGraphInstantiate(&exec_, graph, 0);
  cudaGraphDestroy(graph);
  DI_CUDA_CHECK(status, "cudaGraphInstantiate");
}

void CudaGraph::Launch(cudaStream_t stream) const {
  DI_CUDA_CHECK(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
}

void SynchronizeDevice(int device_index) {
  DI_CUDA_CHECK(cudaSetDevice(device_index), "cudaSetDevice");
  DI_CUDA_CHECK(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

void EnqueueHostCallback(cudaStream_t stream, void (*fn)(void*), void* data) {
  DI_CUDA_CHECK(cudaLaunchHostFunc(stream, fn, data), "cudaLaunchHostFunc");
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) DI_CUDA_CHECK(cudaHostAlloc(&data_, bytes, cudaHostAllocDefault), "cudaHostAlloc");
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

}  // namespace deepinfer
