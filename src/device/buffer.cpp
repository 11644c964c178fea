#include "device/buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "device/cuda_memory.h"

namespace deepinfer {

namespace {
constexpr size_t kMapThreshold = size_t{1} << 20;
}  // namespace

Buffer::Buffer(size_t bytes, DeviceId device) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  if (device.is_cpu()) {
    if (bytes >= kMapThreshold) {
      // Large host buffers come from the kernel zero-filled and are paged in on first touch.
      data_ = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      DI_CHECK(data_ != MAP_FAILED, "host mapping of {} bytes failed", bytes);
      return;
    }
    const size_t rounded = (bytes + 63) / 64 * 64;
    data_ = std::aligned_alloc(64, rounded);
    DI_CHECK(data_ != nullptr, "host allocation of {} bytes failed", bytes);
    std::memset(data_, 0, rounded);
  } else {
    data_ = CudaMalloc(bytes, device.index);
  }
}

Buffer::~Buffer() { Release(); }

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
  }
  return *this;
}

void Buffer::Release() {
  if (data_ == nullptr) return;
  if (device_.is_cpu()) {
    if (bytes_ >= kMapThreshold) {
      ::munmap(data_, bytes_);
    } else {
      std::free(data_);
    }
  } else {
    CudaFree(data_, device_.index);
  }
  data_ = nullptr;
  bytes_ = 0;
}

TensorView Buffer::View(DType dtype, std::initializer_list<int64_t> shape) const {
  TensorView v(data_, dtype, shape, device_);
  DI_CHECK(v.nbytes() <= bytes_, "view {} of {} bytes exceeds the buffer's {} bytes",
           v.ShapeString(), v.nbytes(), bytes_);
  return v;
}

HostTensor::HostTensor(DType dtype, std::initializer_list<int64_t> shape) {
  TensorView shaped(nullptr, dtype, shape);
  buffer_ = Buffer(shaped.nbytes());
  view_ = TensorView(buffer_.data(), dtype, shape);
}

HostTensor::HostTensor(DType dtype, const int64_t* shape, int ndim) {
  TensorView shaped(nullptr, dtype, shape, ndim);
  buffer_ = Buffer(shaped.nbytes());
  view_ = TensorView(buffer_.data(), dtype, shape, ndim);
}

}  // namespace deepinfer
