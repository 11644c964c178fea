#include "device/arena.h"

#include <fmt/format.h>

#include "base/error.h"
#include "device/cuda_memory.h"

namespace deepinfer {

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
}  // namespace

size_t ArenaLayout::Carve(size_t bytes, std::string label) {
  const size_t offset = (end_ + kAlignment - 1) / kAlignment * kAlignment;
  DI_CHECK(offset <= capacity_ && bytes <= capacity_ - offset,
           "device memory: '{}' needs {:.1f} MiB but {:.1f} MiB of the {:.1f} MiB arena are left "
           "(lower --max-num-seqs / --num-blocks or raise --gpu-memory-fraction)",
           label, static_cast<double>(bytes) / kMiB, static_cast<double>(capacity_ - std::min(offset, capacity_)) / kMiB,
           static_cast<double>(capacity_) / kMiB);
  regions_.push_back({std::move(label), offset, bytes});
  end_ = offset + bytes;
  return offset;
}

std::string ArenaLayout::CheckIntegrity() const {
  size_t prev_end = 0;
  for (size_t i = 0; i < regions_.size(); ++i) {
    const ArenaRegion& r = regions_[i];
    if (r.offset % kAlignment != 0) return fmt::format("region {} '{}' at {} is misaligned", i, r.label, r.offset);
    if (r.offset < prev_end) return fmt::format("region {} '{}' overlaps its predecessor", i, r.label);
    if (r.offset + r.bytes > capacity_) return fmt::format("region {} '{}' ends past the capacity", i, r.label);
    prev_end = r.offset + r.bytes;
  }
  if (prev_end != end_) return fmt::format("end {} does not match the last region's end {}", end_, prev_end);
  return "";
}

std::string ArenaLayout::Describe() const {
  std::string out;
  for (const ArenaRegion& r : regions_) {
    out += fmt::format("{:<32} @ {:>14}  {:>10.2f} MiB\n", r.label, r.offset, static_cast<double>(r.bytes) / kMiB);
  }
  out += fmt::format("{:<32}   {:>14}  {:>10.2f} of {:.2f} MiB\n", "total", "", static_cast<double>(end_) / kMiB,
                     static_cast<double>(capacity_) / kMiB);
  return out;
}

DeviceArena::DeviceArena(int device_index, size_t bytes) : device_index_(device_index), layout_(bytes) {
  base_ = static_cast<char*>(CudaMalloc(bytes, device_index));
}

DeviceArena::~DeviceArena() {
  if (base_ != nullptr) CudaFree(base_, device_index_);
}

void DeviceArena::MemoryInfo(int device_index, size_t* free_bytes, size_t* total_bytes) {
  CudaMemoryInfo(device_index, free_bytes, total_bytes);
}

void* DeviceArena::Carve(size_t bytes, std::string label) { return base_ + layout_.Carve(bytes, std::move(label)); }

TensorView DeviceArena::CarveTensor(DType dtype, std::initializer_list<int64_t> shape, std::string label) {
  const TensorView shaped(nullptr, dtype, shape);
  return TensorView(Carve(shaped.nbytes(), std::move(label)), dtype, shape, device());
}

}  // namespace deepinfer
