#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "base/error.h"

namespace deepinfer::sampling {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void ApplyPenalties(float* logits, int64_t vocab, const SequenceContext& ctx) {
  const SamplingParams& p = *ctx.params;
  const bool repetition = p.repetition_penalty != 1.0f;
  const bool output_penalties = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  if (!repetition && !output_penalties) return;
  const TokenIds& toks = *ctx.tokens;
  std::unordered_map<TokenId, int32_t> output_counts;
  for (size_t i = static_cast<size_t>(ctx.prompt_len); i < toks.size(); ++i) ++output_counts[toks[i]];
  if (repetition) {
    std::vector<bool> seen(static_cast<size_t>(vocab), false);
    for (TokenId t : toks) {
      if (t >= 0 && t < vocab) seen[t] = true;
    }
    for (int64_t t = 0; t < vocab; ++t) {
      if (!seen[t]) continue;
      logits[t] = logits[t] > 0 ? logits[t] / p.repetition_penalty : logits[t] * p.repetition_penalty;
    }
  }
  for (const auto& [t, count] : output_counts) {
    if (t < 0 || t >= vocab) continue;
    logits[t] -= p.frequency_penalty * static_cast<float>(count) + p.presence_penalty;
  }
}

void SuppressStops(float* logits, int64_t vocab, const SequenceContext& ctx) {
  const int64_t outputs = static_cast<int64_t>(ctx.tokens->size()) - ctx.prompt_len;
  if (outputs >= ctx.params->min_tokens) return;
  auto kill = [&](TokenId t) {
    if (t >= 0 && t < vocab) logits[t] = kNegInf;
  };
  if (ctx.eos_token_ids != nullptr) {
    for (TokenId t : *ctx.eos_token_ids) kill(t);
  }
  for (TokenId t : ctx.params->stop_token_ids) kill(t);
}

int32_t Argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

// Probabilities over [0, n) after temperature, min_p, top_k, top_p (zeros for removed ids).
std::vector<double> Filtered(const float* logits, int64_t n, const SamplingParams& p) {
  std::vector<double> prob(static_cast<size_t>(n));
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(logits[i]) / p.temperature);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double z = static_cast<double>(logits[i]) / p.temperature;
    prob[i] = std::isfinite(z) ? std::exp(z - mx) : 0.0;
    sum += prob[i];
  }
  for (double& v : prob) v /= sum;
  if (p.min_p > 0.f) {
    const double cut = p.min_p * *std::max_element(prob.begin(), prob.end());
    for (double& v : prob) {
      if (v < cut) v = 0;
    }
  }
  if ((p.top_k > 0 && p.top_k < n) || p.top_p < 1.f) {
    std::vector<int32_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return prob[a] > prob[b]; });
    const int64_t k = p.top_k > 0 ? std::min<int64_t>(p.top_k, n) : n;
    for (int64_t r = k; r < n; ++r) prob[order[r]] = 0;
    if (p.top_p < 1.f) {
      double kept = 0;
      for (int64_t r = 0; r < k; ++r) kept += prob[order[r]];
      double cum = 0;
      for (int64_t r = 0; r < k; ++r) {
        // Keep the smallest prefix whose mass reaches top_p of what is left.
        if (cum >= p.top_p * kept) {
          prob[order[r]] = 0;
        } else {
          cum += prob[order[r]];
        }
      }
    }
  }
  sum = std::accumulate(prob.begin(), prob.end(), 0.0);
  for (double& v : prob) v /= sum;
  return prob;
}

void FillLogprobs(const float* raw, int64_t vocab, TokenId token, int32_t top, SampledToken& out) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < vocab; ++i) mx = std::max(mx, static_cast<double>(raw[i]));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(raw[i]) - mx);
  const double log_z = mx + std::log(sum);
  out.logprob = static_cast<float>(raw[token] - log_z);
  if (top <= 0) return;
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = std::min<int64_t>(top, vocab);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return raw[a] > raw[b] || (raw[a] == raw[b] && a < b); });
  for (int64_t i = 0; i < k; ++i) out.top.push_back({order[i], static_cast<float>(raw[order[i]] - log_z)});
}

int64_t Sampleable(int64_t vocab, const SequenceContext& ctx) {
  return ctx.sampleable_vocab > 0 ? std::min(vocab, ctx.sampleable_vocab) : vocab;
}

}  // namespace

double UniformDraw(uint64_t seed, uint64_t index) {
  const uint64_t z = Mix(Mix(seed + 0x9e3779b97f4a7c15ull) ^ (index * 0xd1b54a32d192ed03ull + 1));
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

std::vector<double> SamplingDistribution(std::vector<float> logits, const SequenceContext& ctx) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  ApplyPenalties(logits.data(), vocab, ctx);
  SuppressStops(logits.data(), vocab, ctx);
  if (ctx.params->greedy()) return {};
  return Filtered(logits.data(), Sampleable(vocab, ctx), *ctx.params);
}

SampledToken Sample(float* logits, int64_t vocab, const SequenceContext& ctx) {
  DI_CHECK(ctx.params != nullptr && ctx.tokens != nullptr, "sampling context incomplete");
  const SamplingParams& p = *ctx.params;
  std::vector<float> raw;
  if (p.logprobs >= 0) raw.assign(logits, logits + vocab);
  ApplyPenalties(logits, vocab, ctx);
  SuppressStops(logits, vocab, ctx);
  const int64_t n = Sampleable(vocab, ctx);
  SampledToken out;
  if (p.greedy()) {
    out.token = Argmax(logits, n);
  } else {
    const std::vector<double> prob = Filtered(logits, n, p);
    const uint64_t draw = static_cast<uint64_t>(ctx.tokens->size()) - static_cast<uint64_t>(ctx.prompt_len);
    const double u = UniformDraw(ctx.rng_seed, draw);
    double cum = 0;
    out.token = -1;
    int32_t last_nonzero = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (prob[i] <= 0) continue;
      last_nonzero = static_cast<int32_t>(i);
      cum += prob[i];
      if (u < cum) {
        out.token = static_cast<int32_t>(i);
        break;
      }
    }
    if (out.token < 0) out.token = last_nonzero;  // u within rounding of 1
  }
  if (p.logprobs >= 0) FillLogprobs(raw.data(), vocab, out.token, p.logprobs, out);
  return out;
}

SamplerRowParams DeviceRowParams(const SamplingParams& params, uint64_t rng_seed, int64_t prompt_len,
                                 int64_t num_outputs) {
  SamplerRowParams p;
  p.temperature = params.temperature;
  p.top_p = params.top_p;
  p.top_k = params.top_k;
  p.min_p = params.min_p;
  p.repetition_penalty = params.repetition_penalty;
  p.presence_penalty = params.presence_penalty;
  p.frequency_penalty = params.frequency_penalty;
  p.min_tokens = params.min_tokens;
  p.logprobs = params.logprobs;
  p.rng_seed = rng_seed;
  p.prompt_len = prompt_len;
  p.num_outputs = num_outputs;
  return p;
}

}  // namespace deepinfer::sampling
