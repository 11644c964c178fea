// Device memory carving. The engine measures free device memory once at start-up, takes one
// allocation of the size it decided on, and carves weights, state pools and workspace out of it
// in a fixed order: no allocator runs on the step path, and the layout is reproducible.
//
// ArenaLayout is the bookkeeping alone (offsets, labels, alignment), so it is testable without a
// device; DeviceArena couples it with one cudaMalloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor_view.h"

namespace deepinfer {

struct ArenaRegion {
  std::string label;
  size_t offset = 0;  // bytes from the arena's base, a multiple of the alignment
  size_t bytes = 0;   // as asked
};

class ArenaLayout {
 public:
  static constexpr size_t kAlignment = 256;  // cudaMalloc's own alignment: any vector load is aligned

  explicit ArenaLayout(size_t capacity) : capacity_(capacity) {}

  // Reserves `bytes` (0 allowed: an empty region at the current end) and returns its offset.
  // Throws, naming the label, the request and what is left, when it does not fit.
  size_t Carve(size_t bytes, std::string label);

  size_t capacity() const { return capacity_; }
  size_t used() const { return end_; }
  size_t available() const { return capacity_ - end_; }
  const std::vector<ArenaRegion>& regions() const { return regions_; }

  // "" when regions are aligned, in increasing order, non-overlapping and inside the capacity.
  std::string CheckIntegrity() const;
  // One line per region: label, offset, MiB.
  std::string Describe() const;

 private:
  size_t capacity_;
  size_t end_ = 0;
  std::vector<ArenaRegion> regions_;
};

// One device allocation carved by an ArenaLayout.
class DeviceArena {
 public:
  // Takes `bytes` on CUDA device `device_index`.
  DeviceArena(int device_index, size_t bytes);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // Free and total memory of the device now (cudaMemGetInfo).
  static void MemoryInfo(int device_index, size_t* free_bytes, size_t* total_bytes);

  void* Carve(size_t bytes, std::string label);
  TensorView CarveTensor(DType dtype, std::initializer_list<int64_t> shape, std::string label);
  const ArenaLayout& layout() const { return layout_; }
  DeviceId device() const { return {DeviceType::kCuda, device_index_}; }

 private:
  int device_index_;
  char* base_ = nullptr;
  ArenaLayout layout_;
};

}  // namespace deepinfer
