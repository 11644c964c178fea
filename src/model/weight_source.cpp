#include "model/weight_source.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.h"
#include "base/math.h"
#include "base/thread_pool.h"

namespace deepinfer {

namespace {

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string DTypeList(std::initializer_list<DType> dtypes) {
  std::string s;
  for (DType t : dtypes) s += (s.empty() ? "" : " or ") + std::string(DTypeName(t));
  return s;
}

// splitmix64: a small deterministic generator; the dummy weights depend only on (seed, name).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float Uniform(float a) {  // uniform in [-a, a)
    return (static_cast<float>(Next() >> 40) * (1.f / 16777216.f) * 2.f - 1.f) * a;
  }

 private:
  uint64_t state_;
};

// Independent streams per chunk or row, so the fill runs in parallel and the values depend only
// on (seed, name, index), never on the thread count.
Rng StreamFor(uint64_t stream, int64_t index) {
  Rng mix(stream + 0x632be59bd9b4e019ull * static_cast<uint64_t>(index + 1));
  return Rng(mix.Next());
}
constexpr int64_t kDummyChunk = 1 << 16;  // values per stream of a dense dummy tensor
constexpr int64_t kDummyRowGrain = 16;    // rows per parallel task of a quantized dummy weight

float Pow2Ceil(float v) { return std::exp2(std::ceil(std::log2(v))); }

}  // namespace

// ---- checkpoint ---------------------------------------------------------------------------

CheckpointWeightSource::CheckpointWeightSource(std::unique_ptr<Checkpoint> checkpoint)
    : checkpoint_(std::move(checkpoint)) {}

std::string CheckpointWeightSource::Describe() const { return "checkpoint " + checkpoint_->dir(); }

const TensorEntry& CheckpointWeightSource::Entry(const std::string& name) {
  requested_.insert(name);
  return checkpoint_->Get(name);
}

TensorView CheckpointWeightSource::Tensor(const std::string& name, const std::vector<int64_t>& shape,
                                          std::initializer_list<DType> dtypes, DummyInit) {
  const TensorEntry& e = Entry(name);
  if (std::find(dtypes.begin(), dtypes.end(), e.dtype) == dtypes.end()) {
    DI_THROW("{}: tensor '{}' has dtype {}, expected {}", e.file, name, DTypeName(e.dtype),
             DTypeList(dtypes));
  }
  if (e.shape != shape) {
    DI_THROW("{}: tensor '{}' has shape {}, expected {}", e.file, name, e.ShapeString(),
             ShapeToString(shape));
  }
  return e.View();
}

LinearWeight CheckpointWeightSource::Linear(const std::string& prefix, int64_t out, int64_t in,
                                            ShippedFormat) {
  const std::string wname = prefix + ".weight", sname = prefix + ".scale";
  const TensorEntry& e = Entry(wname);
  LinearWeight w;
  w.out_features = out;
  w.in_features = in;
  auto expect_shape = [&](const TensorEntry& t, const std::vector<int64_t>& shape, const char* what) {
    if (t.shape != shape) {
      DI_THROW("{}: tensor '{}' has shape {}, expected {} ({})", t.file, t.name, t.ShapeString(),
               ShapeToString(shape), what);
    }
  };
  switch (e.dtype) {
    case DType::kBF16:
    case DType::kF16:
    case DType::kF32:
      expect_shape(e, {out, in}, "a dense [out, in] weight");
      w.format = WeightFormat::kDense;
      w.data = e.View();
      return w;
    case DType::kF8E4M3: {
      expect_shape(e, {out, in}, "an FP8 [out, in] weight");
      const TensorEntry* s = checkpoint_->Find(sname);
      if (s == nullptr) {
        DI_THROW("{}: missing tensor '{}' (the FP8 weight '{}' needs its 128x128 block scales)",
                 checkpoint_->dir(), sname, wname);
      }
      requested_.insert(sname);
      if (s->dtype != DType::kF8E8M0 && s->dtype != DType::kF32) {
        DI_THROW("{}: tensor '{}' has dtype {}, expected F8_E8M0 or F32", s->file, sname,
                 DTypeName(s->dtype));
      }
      expect_shape(*s, {DivCeil(out, kFp8BlockSize), DivCeil(in, kFp8BlockSize)},
                   "one scale per 128x128 block");
      w.format = WeightFormat::kFp8;
      w.data = e.View();
      w.scale = s->View();
      return w;
    }
    case DType::kI8:
    case DType::kU8:
    case DType::kFP4E2M1x2: {
      if (in % kFp4BlockSize != 0) {
        DI_THROW("{}: FP4 weight '{}' has {} input features, not a multiple of 32", e.file, wname, in);
      }
      expect_shape(e, {out, in / 2}, "packed FP4, two values per byte");
      const TensorEntry* s = checkpoint_->Find(sname);
      if (s == nullptr) {
        DI_THROW("{}: missing tensor '{}' (the FP4 weight '{}' needs its 1x32 scales)",
                 checkpoint_->dir(), sname, wname);
      }
      requested_.insert(sname);
      if (s->dtype != DType::kF8E8M0) {
        DI_THROW("{}: tensor '{}' has dtype {}, expected F8_E8M0", s->file, sname, DTypeName(s->dtype));
      }
      expect_shape(*s, {out, in / kFp4BlockSize}, "one scale per 32 input values");
      w.format = WeightFormat::kFp4;
      w.data = e.View();
      w.scale = s->View();
      return w;
    }
    default:
      DI_THROW("{}: tensor '{}' has dtype {}, expected BF16, F16, F32, F8_E4M3 (+ scale) or packed "
               "FP4 I8 (+ scale)",
               e.file, wname, DTypeName(e.dtype));
  }
}

// ---- dummy --------------------------------------------------------------------------------

DummyWeightSource::DummyWeightSource(uint64_t seed, int64_t num_experts)
    : seed_(seed), num_experts_(num_experts) {}

std::string DummyWeightSource::Describe() const {
  return "dummy weights (seed " + std::to_string(seed_) + ")";
}

TensorView DummyWeightSource::Allocate(DType dtype, const std::vector<int64_t>& shape) {
  TensorView shaped(nullptr, dtype, shape.data(), static_cast<int>(shape.size()));
  buffers_.emplace_back(shaped.nbytes());
  bytes_ += shaped.nbytes();
  return TensorView(buffers_.back().data(), dtype, shape.data(), static_cast<int>(shape.size()));
}

TensorView DummyWeightSource::Tensor(const std::string& name, const std::vector<int64_t>& shape,
                                     std::initializer_list<DType> dtypes, DummyInit init) {
  requested_.insert(name);
  const DType dtype = *dtypes.begin();
  TensorView t = Allocate(dtype, shape);
  Rng rng(seed_ ^ XXH3_64bits(name.data(), name.size()));
  const int64_t n = t.numel();
  const int64_t fan_in = shape.empty() ? 1 : shape.back();
  DI_CHECK(init == DummyInit::kExpertIds || dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
           "dummy tensor '{}': unsupported dtype {}", name, DTypeName(dtype));
  if (init == DummyInit::kExpertIds) {
    DI_CHECK(dtype == DType::kI64 && shape.size() == 2, "expert-id tensor must be I64 [rows, k]");
    const int64_t k = shape[1];
    std::vector<int64_t> ids(static_cast<size_t>(num_experts_));
    for (int64_t r = 0; r < shape[0]; ++r) {
      std::iota(ids.begin(), ids.end(), 0);
      for (int64_t j = 0; j < k; ++j) {  // partial Fisher-Yates: k distinct experts
        const int64_t pick = j + static_cast<int64_t>(rng.Next() % static_cast<uint64_t>(num_experts_ - j));
        std::swap(ids[j], ids[pick]);
        t.data<int64_t>()[r * k + j] = ids[j];
      }
    }
    return t;
  }
  // Chunks of kDummyChunk values, each from its own stream, filled in parallel.
  const uint64_t stream = seed_ ^ XXH3_64bits(name.data(), name.size());
  ParallelFor(DivCeil(n, kDummyChunk), 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      Rng chunk_rng = StreamFor(stream, c);
      for (int64_t i = c * kDummyChunk; i < std::min(n, (c + 1) * kDummyChunk); ++i) {
        float v = 0.f;
        switch (init) {
          case DummyInit::kLinear: v = chunk_rng.Uniform(1.f / std::sqrt(static_cast<float>(fan_in))); break;
          case DummyInit::kNormWeight: v = 1.f + chunk_rng.Uniform(0.05f); break;
          case DummyInit::kSmall: v = chunk_rng.Uniform(0.02f); break;
          case DummyInit::kZeroish: v = chunk_rng.Uniform(0.001f); break;
          case DummyInit::kExpertIds: break;
        }
        switch (dtype) {
          case DType::kF32: t.data<float>()[i] = v; break;
          case DType::kBF16: t.data<uint16_t>()[i] = F32ToBf16(v); break;
          case DType::kF16: t.data<uint16_t>()[i] = F32ToF16(v); break;
          default: break;  // rejected above
        }
      }
    }
  });
  return t;
}

LinearWeight DummyWeightSource::Linear(const std::string& prefix, int64_t out, int64_t in,
                                       ShippedFormat shipped) {
  LinearWeight w;
  w.out_features = out;
  w.in_features = in;
  if (shipped == ShippedFormat::kBf16) {
    w.format = WeightFormat::kDense;
    w.data = Tensor(prefix + ".weight", {out, in}, {DType::kBF16}, DummyInit::kLinear);
    return w;
  }
  requested_.insert(prefix + ".weight");
  requested_.insert(prefix + ".scale");
  const uint64_t stream = seed_ ^ XXH3_64bits(prefix.data(), prefix.size());
  const float bound = 1.f / std::sqrt(static_cast<float>(in));
  if (shipped == ShippedFormat::kFp8) {
    w.format = WeightFormat::kFp8;
    w.data = Allocate(DType::kF8E4M3, {out, in});
    w.scale = Allocate(DType::kF8E8M0, {DivCeil(out, kFp8BlockSize), DivCeil(in, kFp8BlockSize)});
    // One power-of-two scale per 128x128 block chosen so the block's values fit ±448.
    const uint8_t exponent = static_cast<uint8_t>(127 + std::lround(std::log2(Pow2Ceil(bound / 448.f))));
    std::fill(w.scale.data<uint8_t>(), w.scale.data<uint8_t>() + w.scale.numel(), exponent);
    const float s = E8m0ToF32(exponent);
    ParallelFor(out, kDummyRowGrain, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        Rng row_rng = StreamFor(stream, o);
        uint8_t* bytes = w.data.data<uint8_t>() + o * in;
        for (int64_t i = 0; i < in; ++i) bytes[i] = F32ToE4m3(row_rng.Uniform(bound) / s);
      }
    });
    return w;
  }
  DI_CHECK(in % kFp4BlockSize == 0, "dummy FP4 weight '{}': {} inputs not a multiple of 32", prefix, in);
  w.format = WeightFormat::kFp4;
  w.data = Allocate(DType::kI8, {out, in / 2});
  w.scale = Allocate(DType::kF8E8M0, {out, in / kFp4BlockSize});
  ParallelFor(out, kDummyRowGrain, [&](int64_t o0, int64_t o1) {
    std::vector<float> row(static_cast<size_t>(in));
    for (int64_t o = o0; o < o1; ++o) {
      Rng row_rng = StreamFor(stream, o);
      for (int64_t i = 0; i < in; ++i) row[i] = row_rng.Uniform(bound);
      uint8_t* bytes = w.data.data<uint8_t>() + o * (in / 2);
      for (int64_t b = 0; b < in / kFp4BlockSize; ++b) {
        float amax = 0.f;
        for (int64_t i = 0; i < kFp4BlockSize; ++i) amax = std::max(amax, std::fabs(row[b * kFp4BlockSize + i]));
        const float scale = Pow2Ceil(std::max(amax, 1e-30f) / 6.f);
        w.scale.data<uint8_t>()[o * (in / kFp4BlockSize) + b] =
            static_cast<uint8_t>(127 + std::lround(std::log2(scale)));
        for (int64_t i = 0; i < kFp4BlockSize; i += 2) {
          const int64_t c = b * kFp4BlockSize + i;
          bytes[c / 2] = static_cast<uint8_t>(F32ToFp4(row[c] / scale) | (F32ToFp4(row[c + 1] / scale) << 4));
        }
      }
    }
  });
  return w;
}

}  // namespace deepinfer
