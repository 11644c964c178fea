#include "kernels/cuda/sampler.h"

#include <climits>

#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kThreads = 1024;  // one block per row
constexpr int kWarps = kThreads / kWarpSize;
constexpr uint32_t kFullMask = 0xffffffffu;

// ---- Counter-based uniform (the device twin of sampling::UniformDraw) ---------------------------

__device__ __forceinline__ uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform double in [0, 1): the top 53 bits of the mixed counter times 2^-53 (both steps exact).
__device__ __forceinline__ double UniformDrawDevice(uint64_t seed, uint64_t index) {
  const uint64_t z = Mix(Mix(seed + 0x9e3779b97f4a7c15ull) ^ (index * 0xd1b54a32d192ed03ull + 1));
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

// ---- Block reductions (fixed order for kThreads: deterministic) --------------------------------

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};

// Every thread gets op over the block. `op` is commutative, so the xor butterfly leaves the same
// bits in every lane. `scratch`: kWarps values of shared memory.
template <typename T, typename Op>
__device__ T BlockReduce(T v, T* scratch, Op op) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(kFullMask, v, offset));
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[lane];  // kWarps == kWarpSize
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// The better of two (value, id) candidates: the larger value, then the lower id.
__device__ __forceinline__ void ArgmaxCombine(double& v, int32_t& id, double ov, int32_t oid) {
  if (ov > v || (ov == v && oid < id)) v = ov, id = oid;
}

// Block argmax of (v, id) pairs, ties to the lower id; every thread gets the id.
__device__ int32_t BlockArgmax(double v, int32_t id, double* vscratch, int32_t* iscratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    ArgmaxCombine(v, id, __shfl_xor_sync(kFullMask, v, offset), __shfl_xor_sync(kFullMask, id, offset));
  }
  __syncthreads();
  if (lane == 0) vscratch[warp] = v, iscratch[warp] = id;
  __syncthreads();
  v = vscratch[lane];
  id = iscratch[lane];
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    ArgmaxCombine(v, id, __shfl_xor_sync(kFullMask, v, offset), __shfl_xor_sync(kFullMask, id, offset));
  }
  return id;
}

// ---- Radix select over the order (key desc, id asc) ---------------------------------------------
//
// Elements are ids [0, n) with an unsigned order key (larger ranks first; at most key_bits bits).
// The composite (key, rid) with rid = id_max − id orders them exactly as the host's stable sort
// by descending value (ties to the lower id) and is unique per element. Passes of 8-bit digits
// from the top narrow the candidate set (elements matching the chosen prefix) with per-digit
// histograms of counts (integer atomics) and, in mass mode, of masses (exact 2^-62 fixed point,
// integer atomics): the result never depends on the order of the atomics.

constexpr int kDigitBits = 8;
constexpr int kBins = 1 << kDigitBits;
constexpr int kBinsPerLane = kBins / kWarpSize;
constexpr int kMaxGroupSums = 4;  // mass adds: warp-level sums when a warp hits at most this many bins
constexpr double kMassScale = 0x1p62;

// Passes the elements ranked at or before the selected one: (key & kmask, rid & rmask) >=
// (kprefix, rprefix), lexicographically. The default passes everything.
struct Threshold {
  uint64_t kprefix = 0, kmask = 0;
  uint32_t rprefix = 0, rmask = 0;
  uint32_t id_max = 0;

  __device__ bool Passes(uint64_t key, int64_t id) const {
    const uint64_t k = key & kmask;
    const uint32_t rid = id_max - static_cast<uint32_t>(id);
    return k > kprefix || (k == kprefix && (rid & rmask) >= rprefix);
  }
};

struct SelectState {
  uint64_t kprefix, kmask;
  uint32_t rprefix, rmask;
  uint64_t target;  // count mode: rank among the candidates; mass mode: mass budget left
  int done;
};

struct SelectShared {
  uint32_t count[kBins];
  unsigned long long mass[kBins];
  SelectState state;
};

// Adds this lane's element (bin < 0: none) to the histograms. Whole warps call it.
template <bool kMass>
__device__ void HistogramAdd(int bin, unsigned long long mass, SelectShared& sh) {
  if (__ballot_sync(kFullMask, bin >= 0) == 0) return;  // warp-uniform
  const int lane = threadIdx.x % kWarpSize;
  const uint32_t peers = __match_any_sync(kFullMask, bin);
  const bool leader = bin >= 0 && lane == __ffs(peers) - 1;
  if (leader) atomicAdd(&sh.count[bin], static_cast<uint32_t>(__popc(peers)));
  if constexpr (kMass) {
    const uint32_t leaders = __ballot_sync(kFullMask, leader);
    if (__popc(leaders) <= kMaxGroupSums) {
      // Few bins (tied or flat values): one warp sum and one atomic per bin.
      for (uint32_t rest = leaders; rest != 0; rest &= rest - 1) {
        const int src = __ffs(rest) - 1;
        const int b = __shfl_sync(kFullMask, bin, src);
        unsigned long long v = bin == b ? mass : 0ull;
        for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
        if (lane == src) atomicAdd(&sh.mass[b], v);
      }
    } else if (bin >= 0) {
      atomicAdd(&sh.mass[bin], mass);
    }
  }
}

// Warp 0 after a histogram pass: picks the digit and updates sh.state. Lane l holds the bins
// kBins−1−8l … kBins−8−8l (descending: the higher ranked first).
template <bool kMass>
__device__ void ChooseBin(SelectShared& sh, bool in_key, int shift, int width, bool last_digit) {
  const int lane = threadIdx.x;
  uint32_t c[kBinsPerLane];
  unsigned long long m[kBinsPerLane];
  uint32_t lane_count = 0;
  unsigned long long lane_mass = 0;
  for (int j = 0; j < kBinsPerLane; ++j) {
    const int b = kBins - 1 - (lane * kBinsPerLane + j);
    c[j] = sh.count[b];
    m[j] = kMass ? sh.mass[b] : 0ull;
    lane_count += c[j];
    lane_mass += m[j];
  }
  uint32_t above_count = lane_count;
  unsigned long long above_mass = lane_mass;
  for (int offset = 1; offset < kWarpSize; offset <<= 1) {
    const uint32_t oc = __shfl_up_sync(kFullMask, above_count, offset);
    const unsigned long long om = __shfl_up_sync(kFullMask, above_mass, offset);
    if (lane >= offset) above_count += oc, above_mass += om;
  }
  above_count -= lane_count;  // exclusive: the elements of the higher bins
  above_mass -= lane_mass;
  const uint64_t target = sh.state.target;
  __syncwarp();  // every lane has read the state before one lane rewrites it

  int pick = -1;
  uint32_t pick_count = 0;
  uint64_t new_target = 0;
  if constexpr (!kMass) {
    // The bin holding rank `target`.
    if (above_count <= target && target < above_count + lane_count) {
      uint64_t acc = above_count;
      for (int j = 0; j < kBinsPerLane; ++j) {
        if (pick < 0 && target < acc + c[j]) pick = j, pick_count = c[j], new_target = target - acc;
        acc += c[j];
      }
    }
  } else {
    // The last non-empty bin whose first element's preceding mass is below the budget.
    int cand = -1;
    uint32_t cand_count = 0;
    unsigned long long cand_above = 0, acc = above_mass;
    for (int j = 0; j < kBinsPerLane; ++j) {
      if (c[j] > 0 && acc < target) cand = j, cand_count = c[j], cand_above = acc;
      acc += m[j];
    }
    const uint32_t has = __ballot_sync(kFullMask, cand >= 0);
    if (has != 0 && lane == 31 - __clz(has)) {
      pick = cand;
      pick_count = cand_count;
      new_target = target - cand_above;
    }
  }
  const bool none = __ballot_sync(kFullMask, pick >= 0) == 0;
  if (pick >= 0) {
    const uint32_t b = static_cast<uint32_t>(kBins - 1 - (lane * kBinsPerLane + pick));
    const uint32_t digit_mask = (1u << width) - 1u;
    SelectState& st = sh.state;
    if (in_key) {
      st.kprefix |= static_cast<uint64_t>(b) << shift;
      st.kmask |= static_cast<uint64_t>(digit_mask) << shift;
    } else {
      st.rprefix |= b << shift;
      st.rmask |= digit_mask << shift;
    }
    st.target = new_target;
    // Count mode may stop once the target is the bin's last element (the whole bin passes).
    const bool whole_bin = kMass ? pick_count == 1 : new_target + 1 == pick_count;
    st.done = last_digit || whole_bin ? 1 : 0;
  } else if (none && lane == 0) {
    sh.state.done = 1;  // unreachable for valid targets; stops with the prefix so far
  }
}

__device__ __forceinline__ int IdBits(int64_t n) {
  return n > 1 ? 64 - __clzll(static_cast<unsigned long long>(n - 1)) : 0;
}

// Count mode (kMass false): the threshold passing exactly the ranks 0 … target (target < n).
// Mass mode: the threshold passing every element whose preceding mass (the sum of mass_of over
// the elements ranked before it) is below target (> 0), i.e. the smallest prefix of the order
// whose mass reaches target. key_of(i): the key of id i; mass_of(key): its mass (mass mode).
// Called by the whole block.
template <bool kMass, typename KeyOf, typename MassOf>
__device__ Threshold RadixSelect(int64_t n, int key_bits, uint64_t target, KeyOf key_of, MassOf mass_of,
                                 SelectShared& sh) {
  const int id_bits = IdBits(n);
  const uint32_t id_max = static_cast<uint32_t>((1ull << id_bits) - 1ull);
  if (threadIdx.x == 0) sh.state = SelectState{0, 0, 0, 0, target, 0};
  int key_left = key_bits, id_left = id_bits;
  while (key_left > 0 || id_left > 0) {
    const bool in_key = key_left > 0;
    const int width = min(kDigitBits, in_key ? key_left : id_left);
    const int shift = (in_key ? key_left : id_left) - width;
    for (int b = threadIdx.x; b < kBins; b += kThreads) sh.count[b] = 0, sh.mass[b] = 0;
    __syncthreads();  // also publishes the state
    const uint64_t kprefix = sh.state.kprefix, kmask = sh.state.kmask;
    const uint32_t rprefix = sh.state.rprefix, rmask = sh.state.rmask;
    const uint32_t digit_mask = (1u << width) - 1u;
    for (int64_t base = 0; base < n; base += kThreads) {  // same trip count in every lane
      const int64_t i = base + threadIdx.x;
      int bin = -1;
      unsigned long long mass = 0;
      if (i < n) {
        const uint64_t key = key_of(i);
        const uint32_t rid = id_max - static_cast<uint32_t>(i);
        if ((key & kmask) == kprefix && (rid & rmask) == rprefix) {
          bin = static_cast<int>(((in_key ? key : static_cast<uint64_t>(rid)) >> shift) & digit_mask);
          if constexpr (kMass) mass = mass_of(key);
        }
      }
      HistogramAdd<kMass>(bin, mass, sh);
    }
    if (in_key) {
      key_left -= width;
    } else {
      id_left -= width;
    }
    __syncthreads();
    if (threadIdx.x < kWarpSize) ChooseBin<kMass>(sh, in_key, shift, width, key_left == 0 && id_left == 0);
    __syncthreads();
    if (sh.state.done) break;  // uniform: read after the barrier, rewritten only after the next one
  }
  Threshold t;
  t.kprefix = sh.state.kprefix;
  t.kmask = sh.state.kmask;
  t.rprefix = sh.state.rprefix;
  t.rmask = sh.state.rmask;
  t.id_max = id_max;
  __syncthreads();  // everyone has read the state before a later select resets it
  return t;
}

// Order key of a probability (>= 0, never −0): its bits.
__device__ __forceinline__ uint64_t ProbKey(double p) { return static_cast<uint64_t>(__double_as_longlong(p)); }
constexpr int kProbKeyBits = 63;

// A probability (given by its key) in exact-sum fixed point: 2^-62 units, at most 2^62 each.
__device__ __forceinline__ unsigned long long ProbMass(uint64_t key) {
  return __double2ull_rn(__longlong_as_double(static_cast<long long>(key)) * kMassScale);
}
struct ProbMassOf {
  __device__ unsigned long long operator()(uint64_t key) const { return ProbMass(key); }
};

// Order key of a float (not NaN): monotone in the value, −0 equal to +0.
__device__ __forceinline__ uint64_t FloatKey(float f) {
  if (f == 0.f) f = 0.f;
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
constexpr int kFloatKeyBits = 32;

// ---- The sampler ----------------------------------------------------------------------------------

constexpr int32_t kClaimed = 1 << 30;  // penalty flags: claim bit; the low bits count outputs

struct SamplerShared {
  SelectShared select;
  alignas(8) unsigned char params[sizeof(SamplerRowParams)];  // raw: __shared__ allows no initializers
  double dscratch[kWarps];
  unsigned long long uscratch[kWarps];
  int32_t iscratch[kWarps];
  double segment_mass[kWarps];
  double segment_base;
  int32_t segment;
  int32_t token;
  int32_t top_count;
  int32_t top_id[kSamplerMaxLogprobs];
  float top_value[kSamplerMaxLogprobs];
};

// Penalties and stop suppression on the row's transformed logits work[0, n) (z = logit, or
// logit / temperature), as sampling's ApplyPenalties / SuppressStops: each distinct history token
// t < vocab is transformed once, by the thread whose atomicOr claims it, in f32 with the host's
// operations in the host's order (explicit roundings: no contraction).
__device__ void ApplyPenaltiesAndStops(const SamplerRowParams& p, const float* raw, int64_t vocab, int64_t n,
                                       bool greedy, const int32_t* tokens, const int32_t* stop_ids, double* work,
                                       int32_t* flags) {
  const bool repetition = p.repetition_penalty != 1.0f;
  const bool output_penalties = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  if (repetition || output_penalties) {
    const int32_t* history = tokens + p.history_offset;
    const int64_t len = p.prompt_len + p.num_outputs;
    const int64_t first = repetition ? 0 : p.prompt_len;  // the output loop alone sees outputs only
    for (int64_t i = first + threadIdx.x; i < len; i += kThreads) {
      const int32_t t = history[i];
      if (t >= 0 && t < vocab) atomicExch(&flags[t], 0);
    }
    __syncthreads();
    for (int64_t i = p.prompt_len + threadIdx.x; i < len; i += kThreads) {
      const int32_t t = history[i];
      if (t >= 0 && t < vocab) atomicAdd(&flags[t], 1);
    }
    __syncthreads();
    const double temperature = p.temperature;
    for (int64_t i = first + threadIdx.x; i < len; i += kThreads) {
      const int32_t t = history[i];
      if (t < 0 || t >= vocab) continue;
      const int32_t old = atomicOr(&flags[t], kClaimed);
      if ((old & kClaimed) != 0 || t >= n) continue;
      const int32_t count = old & (kClaimed - 1);
      float v = raw[t];
      if (repetition) v = v > 0.f ? __fdiv_rn(v, p.repetition_penalty) : __fmul_rn(v, p.repetition_penalty);
      if (count > 0) {
        v = __fsub_rn(v, __fadd_rn(__fmul_rn(p.frequency_penalty, static_cast<float>(count)), p.presence_penalty));
      }
      const double x = v;
      work[t] = greedy ? x : x / temperature;
    }
  }
  __syncthreads();
  if (p.num_outputs < p.min_tokens) {
    const unsigned long long neg_inf = static_cast<unsigned long long>(__double_as_longlong(-INFINITY));
    for (int64_t j = threadIdx.x; j < p.num_stop_ids; j += kThreads) {
      const int32_t t = stop_ids[p.stop_ids_offset + j];
      if (t >= 0 && t < n) atomicExch(reinterpret_cast<unsigned long long*>(&work[t]), neg_inf);
    }
  }
  __syncthreads();
}

// Non-greedy: softmax of work[0, n) (z values) in double → min_p → top_k → top_p → one draw by
// inverse CDF in id order. work ends as the kept probabilities (before the final normalization).
__device__ int32_t DrawToken(const SamplerRowParams& p, int64_t n, double* work, SamplerShared& sh) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;

  double mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) mx = fmax(mx, work[i]);
  mx = BlockReduce(mx, sh.dscratch, MaxOp());
  double sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const double z = work[i];
    const double e = isfinite(z) ? exp(z - mx) : 0.0;
    work[i] = e;
    sum += e;
  }
  sum = BlockReduce(sum, sh.dscratch, SumOp());
  // The largest probability is exp(0) / sum = 1 / sum, as the host's max_element finds.
  const bool min_p = p.min_p > 0.f;
  const double cut = min_p ? static_cast<double>(p.min_p) * (1.0 / sum) : 0.0;
  int32_t nonzero = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    double v = work[i] / sum;
    if (min_p && v < cut) v = 0;
    work[i] = v;
    nonzero += v > 0 ? 1 : 0;
  }
  nonzero = BlockReduce(nonzero, sh.iscratch, SumOp());

  // top_k: ranks >= k are zero; a no-op when at most k probabilities are non-zero.
  auto prob_key = [work](int64_t i) { return ProbKey(work[i]); };
  Threshold top_k, top_p;
  if (p.top_k > 0 && p.top_k < n && p.top_k < nonzero) {
    top_k = RadixSelect<false>(n, kProbKeyBits, static_cast<uint64_t>(p.top_k - 1), prob_key, ProbMassOf(), sh.select);
  }
  // top_p: the smallest prefix of the top_k order whose mass reaches top_p of the top_k mass.
  if (p.top_p < 1.f) {
    unsigned long long kept = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const uint64_t key = ProbKey(work[i]);
      if (top_k.Passes(key, i)) kept += ProbMass(key);
    }
    kept = BlockReduce(kept, sh.uscratch, SumOp());
    unsigned long long budget = __double2ull_rn(static_cast<double>(p.top_p) * static_cast<double>(kept));
    if (budget == 0) budget = 1;  // keeps the first element
    top_p = RadixSelect<true>(n, kProbKeyBits, budget, prob_key, ProbMassOf(), sh.select);
  }

  double kept_sum = 0;
  int32_t last_kept = -1;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    double v = work[i];
    if (v > 0) {
      const uint64_t key = ProbKey(v);
      if (!top_k.Passes(key, i) || !top_p.Passes(key, i)) {
        v = 0;
        work[i] = 0;
      }
    }
    kept_sum += v;
    if (v > 0) last_kept = static_cast<int32_t>(i);
  }
  kept_sum = BlockReduce(kept_sum, sh.dscratch, SumOp());
  last_kept = BlockReduce(last_kept, sh.iscratch, MaxOp());

  // Inverse CDF over q = work / kept_sum in id order: warp w owns the ids [w·seg, (w+1)·seg).
  const double u = UniformDrawDevice(p.rng_seed, static_cast<uint64_t>(p.num_outputs));
  const int64_t seg = CeilDiv(n, kWarps);
  const int64_t lo = min(n, warp * seg), hi = min(n, lo + seg);
  double seg_mass = 0;
  for (int64_t i = lo + lane; i < hi; i += kWarpSize) {
    const double v = work[i];
    if (v > 0) seg_mass += v / kept_sum;
  }
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) seg_mass += __shfl_xor_sync(kFullMask, seg_mass, offset);
  if (lane == 0) sh.segment_mass[warp] = seg_mass;
  __syncthreads();
  if (threadIdx.x == 0) {
    double acc = 0;
    int32_t s = -1;
    for (int w = 0; w < kWarps; ++w) {
      if (u < acc + sh.segment_mass[w]) {
        s = w;
        break;
      }
      acc += sh.segment_mass[w];
    }
    sh.segment = s;
    sh.segment_base = acc;
    // u within rounding of 1 (or nothing kept): the last kept id, as the host.
    sh.token = last_kept >= 0 ? last_kept : static_cast<int32_t>(n - 1);
  }
  __syncthreads();
  if (warp == sh.segment) {
    double cum = sh.segment_base;
    int64_t found = -1, seg_last = -1;
    for (int64_t base = lo; base < hi; base += kWarpSize) {  // warp-uniform trip count and exit
      const int64_t i = base + lane;
      double q = 0;
      if (i < hi) {
        const double v = work[i];
        if (v > 0) q = v / kept_sum;
      }
      double incl = q;
      for (int offset = 1; offset < kWarpSize; offset <<= 1) {
        const double o = __shfl_up_sync(kFullMask, incl, offset);
        if (lane >= offset) incl += o;
      }
      const uint32_t hits = __ballot_sync(kFullMask, q > 0 && u < cum + incl);
      const uint32_t nonzeros = __ballot_sync(kFullMask, q > 0);
      if (nonzeros != 0) seg_last = base + 31 - __clz(nonzeros);
      if (hits != 0) {
        found = base + __ffs(hits) - 1;
        break;
      }
      cum += __shfl_sync(kFullMask, incl, kWarpSize - 1);
    }
    // No crossing inside the segment (rounding between its sum and its scan): its last kept id.
    if (lane == 0 && (found >= 0 || seg_last >= 0)) sh.token = static_cast<int32_t>(found >= 0 ? found : seg_last);
  }
  __syncthreads();
  return sh.token;
}

// Log-softmax of the raw row: the sampled token's value and the top alternatives.
__device__ void FillLogprobs(const SamplerRowParams& p, const float* raw, int64_t vocab, int32_t token, int64_t row,
                             float* sampled_logprobs, int32_t* top_ids, float* top_logprobs, SamplerShared& sh) {
  int32_t* ids = top_ids != nullptr ? top_ids + row * kSamplerMaxLogprobs : nullptr;
  float* values = top_logprobs != nullptr ? top_logprobs + row * kSamplerMaxLogprobs : nullptr;
  const int64_t top = p.logprobs < 0 ? 0 : min(static_cast<int64_t>(min(p.logprobs, kSamplerMaxLogprobs)), vocab);
  if (p.logprobs >= 0) {
    double mx = -INFINITY;
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) mx = fmax(mx, static_cast<double>(raw[i]));
    mx = BlockReduce(mx, sh.dscratch, MaxOp());
    double sum = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) sum += exp(static_cast<double>(raw[i]) - mx);
    sum = BlockReduce(sum, sh.dscratch, SumOp());
    const double log_z = mx + log(sum);
    if (threadIdx.x == 0 && sampled_logprobs != nullptr) {
      sampled_logprobs[row] = static_cast<float>(static_cast<double>(raw[token]) - log_z);
    }
    if (top > 0 && (ids != nullptr || values != nullptr)) {
      auto float_key = [raw](int64_t i) { return FloatKey(raw[i]); };
      const Threshold t =
          RadixSelect<false>(vocab, kFloatKeyBits, static_cast<uint64_t>(top - 1), float_key, ProbMassOf(), sh.select);
      if (threadIdx.x == 0) sh.top_count = 0;
      __syncthreads();
      for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
        if (t.Passes(FloatKey(raw[i]), i)) {
          const int slot = atomicAdd(&sh.top_count, 1);
          if (slot < kSamplerMaxLogprobs) sh.top_id[slot] = static_cast<int32_t>(i), sh.top_value[slot] = raw[i];
        }
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        // Exactly `top` entries passed; order them by (value desc, id asc).
        const int count = min(sh.top_count, kSamplerMaxLogprobs);
        for (int a = 1; a < count; ++a) {
          const int32_t id = sh.top_id[a];
          const float v = sh.top_value[a];
          int b = a - 1;
          while (b >= 0 && (sh.top_value[b] < v || (sh.top_value[b] == v && sh.top_id[b] > id))) {
            sh.top_id[b + 1] = sh.top_id[b];
            sh.top_value[b + 1] = sh.top_value[b];
            --b;
          }
          sh.top_id[b + 1] = id;
          sh.top_value[b + 1] = v;
        }
        for (int j = 0; j < count; ++j) {
          if (ids != nullptr) ids[j] = sh.top_id[j];
          if (values != nullptr) values[j] = static_cast<float>(static_cast<double>(sh.top_value[j]) - log_z);
        }
      }
    }
  } else if (threadIdx.x == 0 && sampled_logprobs != nullptr) {
    sampled_logprobs[row] = 0.f;
  }
  for (int64_t j = top + threadIdx.x; j < kSamplerMaxLogprobs; j += kThreads) {
    if (ids != nullptr) ids[j] = -1;
    if (values != nullptr) values[j] = -INFINITY;
  }
}

// One block per row.
__global__ void __launch_bounds__(kThreads)
    SampleRowsKernel(const float* logits, int64_t ld_logits, int64_t vocab, int64_t n,
                     const SamplerRowParams* params, const int32_t* tokens, const int32_t* stop_ids, double* work_all,
                     int32_t* flags_all, int32_t* sampled, float* sampled_logprobs, int32_t* top_ids,
                     float* top_logprobs) {
  PdlPrologue();
  __shared__ SamplerShared sh;
  const int64_t row = blockIdx.x;
  SamplerRowParams& p = *reinterpret_cast<SamplerRowParams*>(sh.params);
  if (threadIdx.x == 0) p = params[row];
  __syncthreads();
  const float* raw = logits + row * ld_logits;
  double* work = work_all + row * vocab;
  int32_t* flags = flags_all + row * vocab;
  const bool greedy = p.temperature == 0.0f || p.top_k == 1;

  // z = logit (greedy) or logit / temperature, in double as the host.
  const double temperature = p.temperature;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const double x = raw[i];
    work[i] = greedy ? x : x / temperature;
  }
  __syncthreads();
  ApplyPenaltiesAndStops(p, raw, vocab, n, greedy, tokens, stop_ids, work, flags);

  int32_t token;
  if (greedy) {
    // First maximum over [0, n): each thread scans its ids in increasing order.
    double best = -INFINITY;
    int32_t best_id = INT_MAX;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const double v = work[i];
      if (best_id == INT_MAX || v > best) best = v, best_id = static_cast<int32_t>(i);
    }
    token = BlockArgmax(best, best_id, sh.dscratch, sh.iscratch);
  } else {
    token = DrawToken(p, n, work, sh);
  }
  if (threadIdx.x == 0) sampled[row] = token;
  FillLogprobs(p, raw, vocab, token, row, sampled_logprobs, top_ids, top_logprobs, sh);
}

__global__ void UniformDrawsKernel(const uint64_t* seeds, const uint64_t* indices, int64_t n, double* out) {
  PdlPrologue();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = UniformDrawDevice(seeds[i], indices[i]);
}

__global__ void CopyIndexedTokensKernel(int32_t* ids, const int32_t* dst_index, const int32_t* src,
                                        const int32_t* src_index, int64_t n) {
  PdlPrologue();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) ids[dst_index[i]] = src[src_index[i]];
}

}  // namespace

size_t SamplerScratchBytes(int64_t rows, int64_t vocab) {
  if (rows <= 0 || vocab <= 0) return 0;
  return static_cast<size_t>(rows) * static_cast<size_t>(vocab) * (sizeof(double) + sizeof(int32_t));
}

void SampleRows(const float* logits, int64_t ld_logits, int64_t rows, int64_t vocab, int64_t sampleable_vocab,
                const SamplerRowParams* params, const int32_t* tokens, const int32_t* stop_ids, void* scratch,
                int32_t* sampled, float* sampled_logprobs, int32_t* top_ids, float* top_logprobs,
                cudaStream_t stream) {
  const char* name = "sample_rows";
  if (rows < 0 || rows > INT_MAX) ThrowCudaError(__FILE__, __LINE__, name, "bad row count");
  if (rows == 0) return;
  if (vocab <= 0 || vocab > INT_MAX) ThrowCudaError(__FILE__, __LINE__, name, "vocab must be in [1, 2^31)");
  if (ld_logits < 0) ThrowCudaError(__FILE__, __LINE__, name, "negative ld_logits");
  if (logits == nullptr || params == nullptr || scratch == nullptr || sampled == nullptr) {
    ThrowCudaError(__FILE__, __LINE__, name, "null logits, params, scratch or output");
  }
  if ((reinterpret_cast<uintptr_t>(scratch) & 7u) != 0) {
    ThrowCudaError(__FILE__, __LINE__, name, "scratch not 8-byte aligned");
  }
  const int64_t n = sampleable_vocab > 0 && sampleable_vocab < vocab ? sampleable_vocab : vocab;
  double* work = static_cast<double*>(scratch);
  int32_t* flags = reinterpret_cast<int32_t*>(work + rows * vocab);
  SampleRowsKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, ld_logits, vocab, n, params, tokens,
                                                                        stop_ids, work, flags, sampled,
                                                                        sampled_logprobs, top_ids, top_logprobs);
  DI_CUDA_LAUNCH_CHECK(name);
}

void UniformDraws(const uint64_t* seeds, const uint64_t* indices, int64_t n, double* out, cudaStream_t stream) {
  const char* name = "uniform_draws";
  if (n < 0) ThrowCudaError(__FILE__, __LINE__, name, "negative count");
  if (n == 0) return;
  constexpr int kDrawThreads = 256;
  const int64_t blocks = CeilDiv(n, kDrawThreads);
  if (blocks > INT_MAX) ThrowCudaError(__FILE__, __LINE__, name, "too many draws");
  UniformDrawsKernel<<<static_cast<unsigned>(blocks), kDrawThreads, 0, stream>>>(seeds, indices, n, out);
  DI_CUDA_LAUNCH_CHECK(name);
}

void CopyIndexedTokens(int32_t* ids, const int32_t* dst_index, const int32_t* src, const int32_t* src_index, int64_t n,
                       cudaStream_t stream) {
  const char* name = "copy_indexed_tokens";
  if (n < 0) ThrowCudaError(__FILE__, __LINE__, name, "negative count");
  if (n == 0) return;
  constexpr int kCopyThreads = 128;
  const int64_t blocks = CeilDiv(n, kCopyThreads);
  if (blocks > INT_MAX) ThrowCudaError(__FILE__, __LINE__, name, "too many tokens");
  CopyIndexedTokensKernel<<<static_cast<unsigned>(blocks), kCopyThreads, 0, stream>>>(ids, dst_index, src, src_index, n);
  DI_CUDA_LAUNCH_CHECK(name);
}

}  // namespace deepinfer::cuda
