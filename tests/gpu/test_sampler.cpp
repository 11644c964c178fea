// The GPU sampler against sampling::Sample on the host, 64 rows per batch with their own seeds and
// draw indices, at V4's vocabulary (129280) and a small one (1000), on logits with and without
// exact ties (ties at the maximum for greedy, at the top_k boundary, inside the top_p prefix).
//
// Tolerances: sampled tokens and top-logprob ids are integers and must be identical (the device
// probabilities differ from the host's by a few ulp only, since the sums run in another order:
// a disagreement needs a draw within ~1e-13 of a cumulative boundary, which random data does not
// hit; top_p values are never dyadic where probabilities tie exactly, see kernels/cuda/sampler.h).
// Logprobs: |diff| <= 1e-5, the host and the device both compute in double and round once to f32
// (one f32 ulp at |logprob| ~ 12 is 1e-6).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/sampling_params.h"
#include "core/scheduler_output.h"
#include "gpu/gpu_test_util.h"
#include "kernels/cuda/sampler.h"
#include "sampling/sampler.h"

namespace deepinfer {
namespace {

using test::AllClose;
using test::AllEqual;
using test::DeviceArray;

constexpr int64_t kRows = 64;
constexpr int64_t kV4Vocab = 129280;
constexpr int64_t kTop = cuda::kSamplerMaxLogprobs;

struct HostRow {
  SamplingParams params;
  TokenIds tokens;  // prompt + outputs so far
  int64_t prompt_len = 0;
  uint64_t seed = 0;
  std::vector<TokenId> eos;
};

struct Results {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<int32_t> top_ids;     // [rows, kTop], −1 past the row's count
  std::vector<float> top_values;
};

// The device parameters of host rows: histories and stop ids appended to one token buffer each.
std::vector<cuda::SamplerRowParams> DeviceParams(const std::vector<HostRow>& rows, std::vector<int32_t>& token_buf,
                                                 std::vector<int32_t>& stop_buf) {
  std::vector<cuda::SamplerRowParams> params(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const HostRow& h = rows[r];
    const SamplingParams& s = h.params;
    cuda::SamplerRowParams& g = params[r];
    g = sampling::DeviceRowParams(s, h.seed, h.prompt_len, static_cast<int64_t>(h.tokens.size()) - h.prompt_len);
    g.history_offset = static_cast<int64_t>(token_buf.size());
    token_buf.insert(token_buf.end(), h.tokens.begin(), h.tokens.end());
    g.stop_ids_offset = static_cast<int64_t>(stop_buf.size());
    stop_buf.insert(stop_buf.end(), h.eos.begin(), h.eos.end());
    stop_buf.insert(stop_buf.end(), s.stop_token_ids.begin(), s.stop_token_ids.end());
    g.num_stop_ids = static_cast<int32_t>(static_cast<int64_t>(stop_buf.size()) - g.stop_ids_offset);
  }
  return params;
}

Results RunGpu(const std::vector<float>& logits, int64_t ld, int64_t vocab, int64_t sampleable,
               const std::vector<cuda::SamplerRowParams>& params, const std::vector<int32_t>& token_buf,
               const std::vector<int32_t>& stop_buf) {
  const int64_t r_count = static_cast<int64_t>(params.size());
  DeviceArray<float> d_logits(logits);
  DeviceArray<cuda::SamplerRowParams> d_params(params);
  DeviceArray<int32_t> d_tokens(token_buf), d_stops(stop_buf);
  DeviceArray<uint8_t> d_scratch(cuda::SamplerScratchBytes(r_count, vocab));
  DeviceArray<int32_t> d_sampled(r_count), d_top_ids(r_count * kTop);
  DeviceArray<float> d_logprobs(r_count), d_top_values(r_count * kTop);
  cuda::SampleRows(d_logits.get(), ld, r_count, vocab, sampleable, d_params.get(), d_tokens.get(), d_stops.get(),
                   d_scratch.get(), d_sampled.get(), d_logprobs.get(), d_top_ids.get(), d_top_values.get(), nullptr);
  return {d_sampled.ToHost(), d_logprobs.ToHost(), d_top_ids.ToHost(), d_top_values.ToHost()};
}

Results RunGpu(const std::vector<float>& logits, int64_t ld, int64_t vocab, int64_t sampleable,
               const std::vector<HostRow>& rows) {
  std::vector<int32_t> token_buf, stop_buf;
  const std::vector<cuda::SamplerRowParams> params = DeviceParams(rows, token_buf, stop_buf);
  return RunGpu(logits, ld, vocab, sampleable, params, token_buf, stop_buf);
}

Results RunCpu(const std::vector<float>& logits, int64_t ld, int64_t vocab, int64_t sampleable,
               const std::vector<HostRow>& rows) {
  const int64_t r_count = static_cast<int64_t>(rows.size());
  Results out{std::vector<int32_t>(r_count), std::vector<float>(r_count), std::vector<int32_t>(r_count * kTop, -1),
              std::vector<float>(r_count * kTop, -std::numeric_limits<float>::infinity())};
  for (int64_t r = 0; r < r_count; ++r) {
    const HostRow& h = rows[r];
    std::vector<float> row(logits.begin() + r * ld, logits.begin() + r * ld + vocab);
    sampling::SequenceContext ctx;
    ctx.params = &h.params;
    ctx.tokens = &h.tokens;
    ctx.prompt_len = h.prompt_len;
    ctx.rng_seed = h.seed;
    ctx.eos_token_ids = &h.eos;
    ctx.sampleable_vocab = sampleable;
    const SampledToken s = sampling::Sample(row.data(), vocab, ctx);
    out.tokens[r] = s.token;
    out.logprobs[r] = s.logprob;
    for (size_t j = 0; j < s.top.size() && j < static_cast<size_t>(kTop); ++j) {
      out.top_ids[r * kTop + j] = s.top[j].token;
      out.top_values[r * kTop + j] = s.top[j].logprob;
    }
  }
  return out;
}

// Rows whose tokens differ, for the failure message.
std::string TokenDiffs(const Results& got, const Results& want) {
  std::ostringstream os;
  int shown = 0;
  for (size_t r = 0; r < want.tokens.size() && shown < 8; ++r) {
    if (got.tokens[r] != want.tokens[r]) {
      os << " row " << r << ": gpu " << got.tokens[r] << " cpu " << want.tokens[r] << ";";
      ++shown;
    }
  }
  return os.str();
}

void ExpectSame(const Results& got, const Results& want, const std::string& what) {
  EXPECT_TRUE(AllEqual(got.tokens, want.tokens, what + " tokens")) << TokenDiffs(got, want);
  // Both in double, one rounding to f32: a few f32 ulps at most.
  EXPECT_TRUE(AllClose(got.logprobs, want.logprobs, 1e-5f, 0.f, what + " logprob"));
  EXPECT_TRUE(AllEqual(got.top_ids, want.top_ids, what + " top ids"));
  std::vector<float> g, w;
  for (size_t i = 0; i < want.top_ids.size(); ++i) {
    if (want.top_ids[i] < 0) continue;
    g.push_back(got.top_values[i]);
    w.push_back(want.top_values[i]);
  }
  EXPECT_TRUE(AllClose(g, w, 1e-5f, 0.f, what + " top logprobs"));
}

// Logits of `rows` rows, each of one kind: smooth (normal, per-row scale), quantized (exact ties
// everywhere: at the maximum, at any top_k boundary, across the top_p prefix), flat (uniform),
// coarse integers with the maximum repeated, and a few special rows (all equal; −inf masked ids).
std::vector<float> MakeLogits(int64_t rows, int64_t vocab, uint64_t seed) {
  std::vector<float> logits(rows * vocab);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = logits.data() + r * vocab;
    const float scale = 0.5f + static_cast<float>(r % 7);
    switch (r % 4) {
      case 0:
        for (int64_t i = 0; i < vocab; ++i) row[i] = normal(rng) * scale;
        break;
      case 1:
        for (int64_t i = 0; i < vocab; ++i) row[i] = std::round(normal(rng) * scale * 2.f) * 0.5f;
        break;
      case 2:
        for (int64_t i = 0; i < vocab; ++i) row[i] = uniform(rng) * static_cast<float>(1 + r % 3);
        break;
      default: {
        for (int64_t i = 0; i < vocab; ++i) row[i] = std::round(normal(rng) * 2.f);
        const float mx = *std::max_element(row, row + vocab);
        for (int k = 0; k < 3; ++k) row[rng() % vocab] = mx + 1.f;  // a tied maximum
        break;
      }
    }
    if (r == 5) std::fill(row, row + vocab, 0.25f);
    if (r % 16 == 7) {
      for (int64_t i = 0; i < vocab; i += 10) row[i] = -std::numeric_limits<float>::infinity();
    }
  }
  return logits;
}

// Ids of the `count` largest logits of a row (ties to the lower id).
std::vector<TokenId> TopIds(const float* row, int64_t vocab, int count) {
  std::vector<TokenId> ids(vocab);
  for (int64_t i = 0; i < vocab; ++i) ids[i] = static_cast<TokenId>(i);
  std::partial_sort(ids.begin(), ids.begin() + count, ids.end(),
                    [&](TokenId a, TokenId b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  ids.resize(count);
  return ids;
}

// Rows with distinct seeds and draw indices: a prompt of 3 + r % 5 random tokens and r·7 % 50
// outputs.
std::vector<HostRow> MakeRows(int64_t rows, int64_t vocab, const SamplingParams& params, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<HostRow> out(rows);
  for (int64_t r = 0; r < rows; ++r) {
    HostRow& h = out[r];
    h.params = params;
    h.prompt_len = 3 + r % 5;
    const int64_t outputs = (r * 7) % 50;
    for (int64_t i = 0; i < h.prompt_len + outputs; ++i) h.tokens.push_back(static_cast<TokenId>(rng() % vocab));
    h.seed = rng();
  }
  return out;
}

// Runs both samplers on fresh logits for both vocabularies; `tweak` adjusts rows and logits.
template <typename Tweak>
void CompareConfig(const SamplingParams& params, uint64_t seed, const std::string& what, Tweak tweak,
                   int64_t sampleable_cut = 0) {
  for (const int64_t vocab : {kV4Vocab, int64_t{1000}}) {
    std::vector<float> logits = MakeLogits(kRows, vocab, seed + static_cast<uint64_t>(vocab));
    std::vector<HostRow> rows = MakeRows(kRows, vocab, params, seed * 31 + static_cast<uint64_t>(vocab));
    const int64_t sampleable = sampleable_cut > 0 ? vocab - vocab / sampleable_cut : 0;
    for (int64_t r = 0; r < kRows; ++r) tweak(r, vocab, logits.data() + r * vocab, rows[r]);
    const Results want = RunCpu(logits, vocab, vocab, sampleable, rows);
    const Results got = RunGpu(logits, vocab, vocab, sampleable, rows);
    ExpectSame(got, want, what + " vocab " + std::to_string(vocab));
  }
}

auto NoTweak = [](int64_t, int64_t, float*, HostRow&) {};

SamplingParams Params(float temperature, int32_t top_k = 0, float top_p = 1.f, float min_p = 0.f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

TEST(CudaSampler, UniformDrawMatchesTheHostBitForBit) {
  DI_REQUIRE_GPU();
  std::mt19937_64 rng(3);
  std::vector<uint64_t> seeds, indices;
  const std::vector<uint64_t> edges = {0, 1, 2, 0x9e3779b97f4a7c15ull, 1ull << 32, 1ull << 63, ~0ull, ~0ull - 1};
  for (uint64_t s : edges) {
    for (uint64_t i : edges) seeds.push_back(s), indices.push_back(i);
  }
  for (int k = 0; k < 200000; ++k) {
    seeds.push_back(k % 3 == 0 ? rng() % 16 : rng());
    indices.push_back(k % 2 == 0 ? static_cast<uint64_t>(k) : rng());
  }
  DeviceArray<uint64_t> d_seeds(seeds), d_indices(indices);
  DeviceArray<double> d_out(seeds.size());
  cuda::UniformDraws(d_seeds.get(), d_indices.get(), static_cast<int64_t>(seeds.size()), d_out.get(), nullptr);
  const std::vector<double> got = d_out.ToHost();
  std::vector<uint64_t> got_bits(got.size()), want_bits(got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = sampling::UniformDraw(seeds[i], indices[i]);
    std::memcpy(&got_bits[i], &got[i], sizeof(double));
    std::memcpy(&want_bits[i], &want, sizeof(double));
  }
  EXPECT_TRUE(AllEqual(got_bits, want_bits, "uniform draw bits"));
}

TEST(CudaSampler, Greedy) {
  DI_REQUIRE_GPU();
  // Quantized and coarse rows tie at the maximum: the lower id wins.
  CompareConfig(Params(0.f), 101, "greedy", NoTweak);
  // top_k == 1 is greedy too, whatever the temperature.
  CompareConfig(Params(0.9f, 1), 102, "top_k 1", NoTweak);
}

TEST(CudaSampler, Temperature) {
  DI_REQUIRE_GPU();
  CompareConfig(Params(0.7f), 201, "temperature 0.7", NoTweak);
}

TEST(CudaSampler, TopK) {
  DI_REQUIRE_GPU();
  CompareConfig(Params(1.f, 50), 301, "top_k 50", NoTweak);
}

TEST(CudaSampler, TopP) {
  DI_REQUIRE_GPU();
  CompareConfig(Params(1.f, 0, 0.9f), 401, "top_p 0.9", NoTweak);
}

TEST(CudaSampler, MinP) {
  DI_REQUIRE_GPU();
  CompareConfig(Params(1.f, 0, 1.f, 0.05f), 501, "min_p 0.05", NoTweak);
}

TEST(CudaSampler, TopKTopPTemperature) {
  DI_REQUIRE_GPU();
  CompareConfig(Params(0.6f, 40, 0.8f), 601, "top_k 40 top_p 0.8 temperature 0.6", NoTweak);
  CompareConfig(Params(1.3f, 300, 0.95f, 0.01f), 602, "top_k 300 top_p 0.95 min_p 0.01 temperature 1.3", NoTweak);
}

// The top_k boundary inside a group of exactly equal logits, and top_p cutting inside a tie group:
// 20 ids at 5, 200 ids at 4, the rest below 3; top_k and top_p vary by row.
TEST(CudaSampler, TiedTopKAndTopPBoundaries) {
  DI_REQUIRE_GPU();
  auto tweak = [](int64_t r, int64_t vocab, float* row, HostRow& h) {
    std::mt19937_64 rng(static_cast<uint64_t>(r) * 7919 + static_cast<uint64_t>(vocab));
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < vocab; ++i) row[i] = std::min(2.9f, normal(rng));
    for (int k = 0; k < 220; ++k) row[rng() % vocab] = k < 20 ? 5.f : 4.f;  // collisions: slightly fewer
    const int32_t top_ks[] = {50, 21, 20, 200, 0, 10, 150, 35};
    const float top_ps[] = {1.f, 0.8f, 0.3f, 0.97f, 0.6f, 1.f, 0.45f, 0.7f};
    h.params.top_k = top_ks[r % 8];
    h.params.top_p = top_ps[(r / 8) % 8];
  };
  CompareConfig(Params(1.f), 701, "tied boundaries", tweak);
}

TEST(CudaSampler, Penalties) {
  DI_REQUIRE_GPU();
  SamplingParams p = Params(0.9f);
  p.repetition_penalty = 1.3f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.4f;
  // The history holds the row's top ids (prompt and outputs, repeated), so the penalties move the
  // choice; odd rows are greedy; a few ids out of range are ignored.
  auto tweak = [](int64_t r, int64_t vocab, float* row, HostRow& h) {
    std::mt19937_64 rng(static_cast<uint64_t>(r) + 17);
    const std::vector<TokenId> top = TopIds(row, vocab, 8);
    h.tokens[0] = top[0];
    h.tokens[1] = top[1];
    h.tokens[2] = r % 3 == 0 ? -1 : static_cast<TokenId>(vocab + 5);
    for (int k = 0; k < 12; ++k) h.tokens.push_back(top[rng() % top.size()]);  // outputs, with counts
    if (r % 2 == 1) h.params.temperature = 0.f;
    if (r % 5 == 0) h.params.repetition_penalty = 1.f;  // output penalties alone
    if (r % 5 == 1) h.params.presence_penalty = 0.f, h.params.frequency_penalty = 0.f;  // repetition alone
  };
  CompareConfig(p, 801, "penalties", tweak);
}

TEST(CudaSampler, MinTokensSuppressesStops) {
  DI_REQUIRE_GPU();
  SamplingParams p = Params(1.f);
  p.min_tokens = 25;
  // EOS and a stop id carry the largest logits: they win unless suppressed (outputs < 25 in about
  // half of the rows). Odd rows are greedy.
  auto tweak = [](int64_t r, int64_t vocab, float* row, HostRow& h) {
    const TokenId eos = static_cast<TokenId>(vocab - 3), stop = static_cast<TokenId>(vocab / 2);
    h.eos = {eos, static_cast<TokenId>(vocab + 1)};
    h.params.stop_token_ids = {stop, eos};
    row[eos] = 40.f;
    row[stop] = 39.f;
    if (r % 2 == 1) h.params.temperature = 0.f;
  };
  CompareConfig(p, 901, "min_tokens", tweak);
}

TEST(CudaSampler, SampleableVocabSmallerThanVocab) {
  DI_REQUIRE_GPU();
  SamplingParams p = Params(0.8f);
  p.logprobs = 5;
  // The padding ids carry the largest logits: never sampled, but in the top logprobs.
  auto tweak = [](int64_t r, int64_t vocab, float* row, HostRow& h) {
    for (int64_t i = vocab - vocab / 8; i < vocab; i += 3) row[i] = 30.f + static_cast<float>(i % 7);
    if (r % 3 == 1) h.params.temperature = 0.f;
    if (r % 3 == 2) h.params.top_k = 20;
  };
  CompareConfig(p, 1001, "sampleable", tweak, /*sampleable_cut=*/8);
}

TEST(CudaSampler, Logprobs) {
  DI_REQUIRE_GPU();
  SamplingParams p = Params(1.f);
  p.logprobs = 5;
  auto tweak = [](int64_t r, int64_t, float*, HostRow& h) {
    const int32_t counts[] = {5, 0, 20, -1, 1, 13};
    h.params.logprobs = counts[r % 6];
    if (r % 4 == 3) h.params.temperature = 0.f;
  };
  CompareConfig(p, 1101, "logprobs", tweak);
}

// Every configuration in one batch (per-row parameters), twice (deterministic), and a slice of it
// alone (a row's result does not depend on its neighbours).
TEST(CudaSampler, MixedBatchDeterministicAndBatchInvariant) {
  DI_REQUIRE_GPU();
  const int64_t vocab = kV4Vocab;
  std::vector<float> logits = MakeLogits(kRows, vocab, 1201);
  std::vector<HostRow> rows = MakeRows(kRows, vocab, SamplingParams{}, 1202);
  for (int64_t r = 0; r < kRows; ++r) {
    SamplingParams& p = rows[r].params;
    switch (r % 8) {
      case 0: p.temperature = 0.f; break;
      case 1: p.temperature = 0.7f; break;
      case 2: p.top_k = 50; break;
      case 3: p.top_p = 0.9f; break;
      case 4: p.min_p = 0.05f; break;
      case 5: p.top_k = 40, p.top_p = 0.8f, p.temperature = 0.6f; break;
      case 6: p.repetition_penalty = 1.3f, p.presence_penalty = 0.5f, p.frequency_penalty = 0.4f; break;
      default:
        p.min_tokens = 100;
        rows[r].eos = {7};
        logits[r * vocab + 7] = 50.f;
        break;
    }
    p.logprobs = static_cast<int32_t>(r % 7) - 1;
  }
  const Results want = RunCpu(logits, vocab, vocab, 0, rows);
  const Results got = RunGpu(logits, vocab, vocab, 0, rows);
  ExpectSame(got, want, "mixed");
  const Results again = RunGpu(logits, vocab, vocab, 0, rows);
  EXPECT_TRUE(AllEqual(again.tokens, got.tokens, "rerun tokens"));
  EXPECT_TRUE(AllEqual(again.logprobs, got.logprobs, "rerun logprobs"));
  EXPECT_TRUE(AllEqual(again.top_values, got.top_values, "rerun top logprobs"));
  const int64_t first = 10, count = 9;
  const std::vector<float> slice(logits.begin() + first * vocab, logits.begin() + (first + count) * vocab);
  const std::vector<HostRow> slice_rows(rows.begin() + first, rows.begin() + first + count);
  const Results alone = RunGpu(slice, vocab, vocab, 0, slice_rows);
  const auto part = [&](const auto& v) { return std::vector(v.begin() + first, v.begin() + first + count); };
  EXPECT_TRUE(AllEqual(alone.tokens, part(got.tokens), "slice tokens"));
  EXPECT_TRUE(AllEqual(alone.logprobs, part(got.logprobs), "slice logprobs"));
}

// Tiny vocabularies (fewer ids than top_k, top logprobs or threads) and a batch of no rows.
TEST(CudaSampler, SmallVocabularies) {
  DI_REQUIRE_GPU();
  for (const int64_t vocab : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{33}}) {
    std::vector<float> logits = MakeLogits(kRows, vocab, 1300 + static_cast<uint64_t>(vocab));
    std::vector<HostRow> rows = MakeRows(kRows, vocab, SamplingParams{}, 1400 + static_cast<uint64_t>(vocab));
    for (int64_t r = 0; r < kRows; ++r) {
      SamplingParams& p = rows[r].params;
      p.temperature = r % 4 == 0 ? 0.f : 0.5f + 0.1f * static_cast<float>(r % 9);
      p.top_k = static_cast<int32_t>(r % 5) * 2;
      p.top_p = r % 3 == 0 ? 1.f : 0.7f;
      p.logprobs = static_cast<int32_t>(r % 22) - 1;
    }
    const Results want = RunCpu(logits, vocab, vocab, 0, rows);
    const Results got = RunGpu(logits, vocab, vocab, 0, rows);
    ExpectSame(got, want, "vocab " + std::to_string(vocab));
  }
  cuda::SampleRows(nullptr, 0, 0, 10, 0, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                   nullptr);  // no rows: nothing to do
}

// 20,000 draws (draw indices 0 … 19999) from one row with top_k and top_p: every draw is the
// host's, so the histograms are equal too.
TEST(CudaSampler, DrawHistogramEqualsTheHost) {
  DI_REQUIRE_GPU();
  const int64_t vocab = 1000, draws = 20000;
  std::vector<float> logits = MakeLogits(1, vocab, 1501);  // smooth
  for (int64_t i = 0; i < vocab; i += 37) logits[i] = 2.5f;  // a tie group inside the kept set
  HostRow row;
  row.params = Params(0.8f, 50, 0.9f);
  row.prompt_len = 4;
  row.tokens = {1, 2, 3, 4};
  row.seed = 0x5eedull;
  std::vector<int32_t> token_buf, stop_buf;
  const cuda::SamplerRowParams one = DeviceParams({row}, token_buf, stop_buf)[0];
  std::vector<cuda::SamplerRowParams> params(draws, one);
  for (int64_t d = 0; d < draws; ++d) params[d].num_outputs = d;  // no penalties: the history is not read
  // Every draw reads the one logits row (ld_logits 0).
  const Results got = RunGpu(logits, 0, vocab, 0, params, token_buf, stop_buf);
  std::vector<int32_t> want(draws);
  std::vector<float> scratch;
  for (int64_t d = 0; d < draws; ++d) {
    row.tokens.resize(static_cast<size_t>(row.prompt_len + d), 9);  // d outputs: draw index d
    scratch = logits;
    sampling::SequenceContext ctx;
    ctx.params = &row.params;
    ctx.tokens = &row.tokens;
    ctx.prompt_len = row.prompt_len;
    ctx.rng_seed = row.seed;
    want[d] = sampling::Sample(scratch.data(), vocab, ctx).token;
  }
  EXPECT_TRUE(AllEqual(got.tokens, want, "draws"));
  std::vector<int64_t> got_hist(vocab, 0), want_hist(vocab, 0);
  for (int64_t d = 0; d < draws; ++d) {
    if (got.tokens[d] >= 0 && got.tokens[d] < vocab) ++got_hist[got.tokens[d]];
    ++want_hist[want[d]];
  }
  EXPECT_TRUE(AllEqual(got_hist, want_hist, "histogram"));
  int64_t support = 0;
  for (int64_t c : want_hist) support += c > 0 ? 1 : 0;
  EXPECT_GT(support, 5);  // the filters leave a real distribution, not one token
  EXPECT_LE(support, 50);
}

}  // namespace
}  // namespace deepinfer
