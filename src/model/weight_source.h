// Where a model's weights come from: a checkpoint on disk (validated against what the model
// expects) or the "dummy" format (deterministic random values of the right shape and dtype,
// for benchmarks at real shapes without the real files).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "device/buffer.h"
#include "model/safetensors.h"
#include "tensor/linear_weight.h"

namespace deepinfer {

// The storage format a linear layer is shipped in; the dummy source generates this format and a
// checkpoint may hold any format the loader accepts.
enum class ShippedFormat { kBf16, kFp8, kFp4 };

// How a tensor should be initialised by the dummy source.
enum class DummyInit {
  kLinear,     // uniform ±1/sqrt(fan_in) (fan_in = last dimension)
  kNormWeight, // 1 + uniform ±0.05
  kSmall,      // uniform ±0.02
  kZeroish,    // uniform ±0.001
  kExpertIds,  // I64 rows of distinct expert ids in [0, num_experts)
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual std::string Describe() const = 0;

  // A plain tensor. The checkpoint source checks its dtype is one of `dtypes` and its shape;
  // the dummy source creates it with dtypes.front().
  virtual TensorView Tensor(const std::string& name, const std::vector<int64_t>& shape,
                            std::initializer_list<DType> dtypes, DummyInit init) = 0;

  // The linear layer `prefix`.weight (+ `prefix`.scale) of logical shape [out, in]. The
  // checkpoint source accepts BF16/F16/F32, FP8 e4m3 with 128×128 block scales, or packed FP4
  // with 1×32 scales; the dummy source generates `shipped`.
  virtual LinearWeight Linear(const std::string& prefix, int64_t out, int64_t in,
                              ShippedFormat shipped) = 0;

  // Names the model asked for (to report tensors the checkpoint has but the model ignores).
  const std::set<std::string>& requested() const { return requested_; }

 protected:
  std::set<std::string> requested_;
};

class CheckpointWeightSource : public WeightSource {
 public:
  explicit CheckpointWeightSource(std::unique_ptr<Checkpoint> checkpoint);
  std::string Describe() const override;
  TensorView Tensor(const std::string& name, const std::vector<int64_t>& shape,
                    std::initializer_list<DType> dtypes, DummyInit init) override;
  LinearWeight Linear(const std::string& prefix, int64_t out, int64_t in,
                      ShippedFormat shipped) override;
  const Checkpoint& checkpoint() const { return *checkpoint_; }

 private:
  const TensorEntry& Entry(const std::string& name);
  std::unique_ptr<Checkpoint> checkpoint_;
};

class DummyWeightSource : public WeightSource {
 public:
  // `num_experts` bounds the ids written into kExpertIds tensors.
  DummyWeightSource(uint64_t seed, int64_t num_experts);
  std::string Describe() const override;
  TensorView Tensor(const std::string& name, const std::vector<int64_t>& shape,
                    std::initializer_list<DType> dtypes, DummyInit init) override;
  LinearWeight Linear(const std::string& prefix, int64_t out, int64_t in,
                      ShippedFormat shipped) override;
  size_t bytes_allocated() const { return bytes_; }

 private:
  TensorView Allocate(DType dtype, const std::vector<int64_t>& shape);
  uint64_t seed_;
  int64_t num_experts_;
  size_t bytes_ = 0;
  std::vector<Buffer> buffers_;
};

}  // namespace deepinfer
