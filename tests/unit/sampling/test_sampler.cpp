// Sampler statistics (issue 4, acceptance 4): for a fixed logit vector and each combination of
// transforms, 10,000 draws must match the target distribution (chi-square, p > 0.001). The
// target is computed here from the definitions, independently of the sampler's code: softmax
// of penalized, temperature-scaled logits; min_p relative to the most likely token; top_k of
// the most likely; top_p the smallest most-likely-first set reaching p of the remaining mass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "sampling/sampler.h"

namespace deepinfer::sampling {
namespace {

// Upper tail of the chi-square distribution, Q(k/2, x/2) (regularized incomplete gamma).
double ChiSquareSurvival(double x, int dof) {
  const double a = dof / 2.0, z = x / 2.0;
  if (z <= 0) return 1.0;
  const double log_prefix = a * std::log(z) - z - std::lgamma(a);
  if (z < a + 1) {  // series for P
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 500; ++n) {
      term *= z / (a + n);
      sum += term;
    }
    return 1.0 - std::exp(log_prefix) * sum;
  }
  // continued fraction for Q (Lentz)
  double b = z + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 500; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (std::fabs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    h *= d * c;
  }
  return std::exp(log_prefix) * h;
}

const std::vector<float> kLogits = {2.0f, 1.5f, 1.2f, 1.0f, 0.8f, 0.5f, 0.3f, 0.0f, -0.2f, -0.5f,
                                    -0.8f, -1.0f, -1.5f, -2.0f, -3.0f, 0.9f, 1.1f, 0.1f, -0.1f, 0.6f};
const TokenIds kPromptAndOutputs = {3, 7, 7, 1, 5, 5, 5, 9};  // prompt = first 3
constexpr int64_t kPromptLen = 3;

std::vector<double> Target(const SamplingParams& p) {
  const int64_t n = static_cast<int64_t>(kLogits.size());
  std::vector<double> z(kLogits.begin(), kLogits.end());
  std::map<TokenId, int> output_counts;
  for (size_t i = kPromptLen; i < kPromptAndOutputs.size(); ++i) ++output_counts[kPromptAndOutputs[i]];
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (TokenId t : kPromptAndOutputs) seen[t] = true;
  for (int64_t t = 0; t < n; ++t) {
    if (seen[t] && p.repetition_penalty != 1.0f) z[t] = z[t] > 0 ? z[t] / p.repetition_penalty : z[t] * p.repetition_penalty;
    if (output_counts.count(static_cast<TokenId>(t))) {
      z[t] -= p.frequency_penalty * output_counts[static_cast<TokenId>(t)] + p.presence_penalty;
    }
  }
  std::vector<double> prob(static_cast<size_t>(n));
  double mx = *std::max_element(z.begin(), z.end()) / p.temperature, sum = 0;
  for (int64_t t = 0; t < n; ++t) sum += (prob[t] = std::exp(z[t] / p.temperature - mx));
  for (double& v : prob) v /= sum;
  const double top = *std::max_element(prob.begin(), prob.end());
  std::vector<bool> keep(static_cast<size_t>(n), true);
  for (int64_t t = 0; t < n; ++t) keep[t] = prob[t] >= p.min_p * top;
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const double pa = keep[a] ? prob[a] : 0, pb = keep[b] ? prob[b] : 0;
    return pa > pb;
  });
  if (p.top_k > 0) {
    for (int64_t r = p.top_k; r < n; ++r) keep[order[r]] = false;
  }
  double remaining = 0;
  for (int64_t t = 0; t < n; ++t) remaining += keep[t] ? prob[t] : 0;
  double cum = 0;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t t = order[r];
    if (!keep[t]) continue;
    if (cum >= p.top_p * remaining) keep[t] = false;
    else cum += prob[t];
  }
  double total = 0;
  for (int64_t t = 0; t < n; ++t) total += keep[t] ? prob[t] : 0;
  for (int64_t t = 0; t < n; ++t) prob[t] = keep[t] ? prob[t] / total : 0;
  return prob;
}

TokenId Draw(const SamplingParams& p, uint64_t seed) {
  std::vector<float> logits = kLogits;
  SequenceContext ctx;
  ctx.params = &p;
  ctx.tokens = &kPromptAndOutputs;
  ctx.prompt_len = kPromptLen;
  ctx.rng_seed = seed;
  return Sample(logits.data(), static_cast<int64_t>(logits.size()), ctx).token;
}

struct Combo {
  const char* name;
  SamplingParams p;
};

std::vector<Combo> Combos() {
  std::vector<Combo> out;
  auto add = [&](const char* name, auto edit) {
    SamplingParams p;
    p.temperature = 1.0f;
    edit(p);
    out.push_back({name, p});
  };
  add("plain", [](SamplingParams&) {});
  add("temperature 0.6", [](SamplingParams& p) { p.temperature = 0.6f; });
  add("temperature 1.7", [](SamplingParams& p) { p.temperature = 1.7f; });
  add("top_k 5", [](SamplingParams& p) { p.top_k = 5; });
  add("top_p 0.7", [](SamplingParams& p) { p.top_p = 0.7f; });
  add("min_p 0.15", [](SamplingParams& p) { p.min_p = 0.15f; });
  add("top_k 8 + top_p 0.8 + t 0.8", [](SamplingParams& p) { p.top_k = 8; p.top_p = 0.8f; p.temperature = 0.8f; });
  add("min_p 0.05 + top_p 0.9", [](SamplingParams& p) { p.min_p = 0.05f; p.top_p = 0.9f; });
  add("repetition 1.3", [](SamplingParams& p) { p.repetition_penalty = 1.3f; });
  add("presence 0.8 + frequency 0.4", [](SamplingParams& p) { p.presence_penalty = 0.8f; p.frequency_penalty = 0.4f; });
  add("all", [](SamplingParams& p) {
    p.temperature = 1.2f; p.top_k = 10; p.top_p = 0.95f; p.min_p = 0.02f;
    p.repetition_penalty = 1.1f; p.presence_penalty = 0.3f; p.frequency_penalty = 0.2f;
  });
  return out;
}

TEST(Sampler, TenThousandDrawsMatchTheTargetForEveryCombination) {
  constexpr int kDraws = 10000;
  for (const Combo& combo : Combos()) {
    const std::vector<double> target = Target(combo.p);
    std::vector<int> counts(target.size(), 0);
    for (int i = 0; i < kDraws; ++i) ++counts[Draw(combo.p, 1000003ull * i + 17)];
    // Pool categories with a small expectation so every chi-square cell expects >= 5.
    double chi2 = 0, pooled_exp = 0, pooled_obs = 0;
    int cells = 0;
    for (size_t t = 0; t < target.size(); ++t) {
      if (target[t] == 0) {
        EXPECT_EQ(counts[t], 0) << combo.name << ": token " << t << " is filtered out but was drawn";
        continue;
      }
      const double e = target[t] * kDraws;
      if (e < 5) {
        pooled_exp += e;
        pooled_obs += counts[t];
        continue;
      }
      chi2 += (counts[t] - e) * (counts[t] - e) / e;
      ++cells;
    }
    if (pooled_exp > 0) {
      chi2 += (pooled_obs - pooled_exp) * (pooled_obs - pooled_exp) / pooled_exp;
      ++cells;
    }
    const double p_value = cells > 1 ? ChiSquareSurvival(chi2, cells - 1) : 1.0;
    std::printf("%-30s chi2 %7.2f over %2d cells, p = %.4f\n", combo.name, chi2, cells, p_value);
    EXPECT_GT(p_value, 0.001) << combo.name;
  }
}

TEST(Sampler, ChiSquareCatchesAWrongDistribution) {
  // The same statistic rejects draws from a distribution the target does not describe (here:
  // temperature 1.0 draws checked against the temperature-0.6 target).
  SamplingParams drawn, claimed;
  drawn.temperature = 1.0f;
  claimed.temperature = 0.6f;
  const auto target = Target(claimed);
  std::vector<int> counts(target.size(), 0);
  for (int i = 0; i < 10000; ++i) ++counts[Draw(drawn, 7919ull * i + 3)];
  double chi2 = 0;
  int cells = 0;
  for (size_t t = 0; t < target.size(); ++t) {
    const double e = target[t] * 10000;
    if (e < 5) continue;
    chi2 += (counts[t] - e) * (counts[t] - e) / e;
    ++cells;
  }
  EXPECT_LT(ChiSquareSurvival(chi2, cells - 1), 1e-6);
}

TEST(Sampler, SeedsReproduceAndDiffer) {
  SamplingParams p;
  p.temperature = 1.0f;
  std::vector<TokenId> a, b, c;
  for (int i = 0; i < 200; ++i) {
    a.push_back(Draw(p, 42 + 1000ull * i));
    b.push_back(Draw(p, 42 + 1000ull * i));
    c.push_back(Draw(p, 43 + 1000ull * i));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Sampler, GreedyIsArgmaxAfterPenaltiesWithLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0.f;
  EXPECT_EQ(Draw(p, 1), 0);
  std::vector<float> tied = {1.f, 3.f, 3.f, 2.f};
  SequenceContext ctx;
  ctx.params = &p;
  TokenIds none;
  ctx.tokens = &none;
  EXPECT_EQ(Sample(tied.data(), 4, ctx).token, 1);
  // Token 0 (logit 2.0) was generated before: 2.0 / 2 = 1.0 falls below token 1's 1.5.
  p.repetition_penalty = 2.0f;
  std::vector<float> logits = kLogits;
  TokenIds history = {0};
  ctx.tokens = &history;
  EXPECT_EQ(Sample(logits.data(), 20, ctx).token, 1);
}

TEST(Sampler, MinTokensSuppressesEosAndStopTokens) {
  SamplingParams p;
  p.temperature = 0.f;
  p.min_tokens = 10;  // 5 outputs so far
  p.stop_token_ids = {1};
  std::vector<TokenId> eos = {0};
  std::vector<float> logits = kLogits;
  SequenceContext ctx;
  ctx.params = &p;
  ctx.tokens = &kPromptAndOutputs;
  ctx.prompt_len = kPromptLen;
  ctx.eos_token_ids = &eos;
  EXPECT_EQ(Sample(logits.data(), 20, ctx).token, 2);  // 0 (EOS) and 1 (stop id) suppressed
}

TEST(Sampler, LogprobsAreTheRawLogSoftmaxWithTopAlternatives) {
  SamplingParams p;
  p.temperature = 0.f;
  p.logprobs = 3;
  p.repetition_penalty = 1.5f;  // does not change the reported logprobs
  std::vector<float> logits = kLogits;
  SequenceContext ctx;
  ctx.params = &p;
  ctx.tokens = &kPromptAndOutputs;
  ctx.prompt_len = kPromptLen;
  const SampledToken st = Sample(logits.data(), 20, ctx);
  double z = 0;
  for (float v : kLogits) z += std::exp(static_cast<double>(v));
  ASSERT_EQ(st.top.size(), 3u);
  EXPECT_EQ(st.top[0].token, 0);
  EXPECT_EQ(st.top[1].token, 1);
  EXPECT_EQ(st.top[2].token, 2);
  EXPECT_NEAR(st.top[0].logprob, 2.0 - std::log(z), 1e-5);
  EXPECT_NEAR(st.logprob, kLogits[st.token] - std::log(z), 1e-5);
}

TEST(Sampler, NeverSamplesBeyondTheTokenizersVocabulary) {
  SamplingParams p;
  p.temperature = 5.0f;
  SequenceContext ctx;
  ctx.params = &p;
  TokenIds none;
  ctx.tokens = &none;
  ctx.sampleable_vocab = 10;
  std::vector<float> logits(100, 0.f);
  logits[50] = 100.f;  // padding row with a huge logit
  for (uint64_t s = 0; s < 500; ++s) {
    ctx.rng_seed = s;
    std::vector<float> l = logits;
    EXPECT_LT(Sample(l.data(), 100, ctx).token, 10);
  }
}

}  // namespace
}  // namespace deepinfer::sampling
