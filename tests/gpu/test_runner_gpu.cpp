// The runner on the GPU: sampling on the device, results read back one step behind, and each
// step's input tokens taken on the device from the tokens the previous step sampled.
//
// Thirteen steps (one prefill, twelve decodes) for six sequences with different sampling
// options are all launched before the first is waited for, so every decode step is queued while
// the previous one is in flight and reads its token from device memory. The reference replays
// the same steps afterwards with the same model on a second state, one at a time, with the
// logits copied to the host and sampled by sampling::Sample (the CPU backend's sampler) given the
// runner's tokens as history: every sampled token must be the host sampler's, logprobs equal to
// an f32 rounding (the device sums the softmax in another order), and top logprob ids equal.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/workload.h"
#include "gpu/gpu_test_util.h"
#include "model/model.h"
#include "runner/model_runner.h"
#include "sampling/sampler.h"

namespace deepinfer::testing {
namespace {

struct SeqSpec {
  SamplingParams sampling;
  TokenIds prompt;
  uint64_t seed = 0;
};

std::vector<SeqSpec> MakeSeqs(int32_t vocab) {
  std::mt19937 rng(77);
  std::vector<SeqSpec> seqs(6);
  seqs[0].sampling.temperature = 0.f;  // greedy
  seqs[1].sampling.temperature = 0.8f, seqs[1].sampling.top_p = 0.9f, seqs[1].sampling.top_k = 50;
  seqs[2].sampling.temperature = 1.0f, seqs[2].sampling.min_p = 0.05f;
  // Penalties: the runner lets the previous step land first (the history is read on the host).
  seqs[3].sampling.temperature = 0.7f, seqs[3].sampling.repetition_penalty = 1.3f;
  seqs[3].sampling.presence_penalty = 0.5f, seqs[3].sampling.frequency_penalty = 0.3f;
  seqs[4].sampling.temperature = 1.0f, seqs[4].sampling.min_tokens = 6;
  seqs[4].sampling.stop_token_ids = {5, 17, 200};
  seqs[5].sampling.temperature = 0.9f, seqs[5].sampling.logprobs = 5;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int len = 20 + static_cast<int>(rng() % 70);
    for (int j = 0; j < len; ++j) seqs[i].prompt.push_back(static_cast<TokenId>(2 + rng() % (vocab - 2)));
    seqs[i].seed = 1000 + 7919 * i;
    seqs[i].sampling.max_tokens = 64;
  }
  return seqs;
}

// Step 1 prefills every prompt; steps 2 … decode_steps+1 decode one token each. All launched
// before the first is waited for.
std::vector<StepResult> RunAllLaunchedUpFront(const Model& model, const RunnerOptions& ro,
                                              const std::vector<SeqSpec>& specs, int decode_steps) {
  ModelRunner runner(model, ro);
  const int num_seqs = static_cast<int>(specs.size());
  std::vector<SchedulerOutput> steps;
  for (int s = 0; s <= decode_steps; ++s) {
    SchedulerOutput out;
    out.step_id = static_cast<uint64_t>(s + 1);
    for (int i = 0; i < num_seqs; ++i) {
      const SeqSpec& spec = specs[i];
      const int64_t prompt_len = static_cast<int64_t>(spec.prompt.size());
      if (s == 0) {
        NewSequence ns;
        ns.seq_id = static_cast<SeqId>(i + 1);
        ns.tokens = spec.prompt;
        ns.prompt_len = prompt_len;
        ns.sampling = spec.sampling;
        ns.rng_seed = spec.seed;
        ns.slot = i;
        ns.block_ids = {i + 1};
        out.new_seqs.push_back(ns);
        out.chunks.push_back({ns.seq_id, 0, prompt_len, true, prompt_len});
      } else {
        out.chunks.push_back({static_cast<SeqId>(i + 1), prompt_len + s - 1, 1, true, prompt_len});
      }
    }
    steps.push_back(out);
  }
  for (const SchedulerOutput& out : steps) runner.Launch(out);
  std::vector<StepResult> results;
  for (const SchedulerOutput& out : steps) results.push_back(runner.Wait(out.step_id));
  return results;
}

TEST(GpuRunner, DeviceSamplingAndDeviceFedTokensEqualTheHostPath) {
  DI_REQUIRE_GPU();
  LoadOptions lo;
  lo.device = DeviceId{DeviceType::kCuda, 0};
  LoadedModel loaded = LoadModel(DemoModelDir(), lo);
  const Model& model = *loaded.model;
  const int64_t vocab = model.config().vocab_size;
  const std::vector<SeqSpec> specs = MakeSeqs(static_cast<int32_t>(vocab));
  // At sanitizer sizes 5 decode steps (6 outputs, what the min_tokens check below reads): racecheck
  // of 12 grew past 69 GB of host memory (2026-12-01).
  const int num_seqs = static_cast<int>(specs.size()), decode_steps = test::SanitizerSizes() ? 5 : 12;

  RunnerOptions ro;
  ro.num_slots = num_seqs;
  ro.num_blocks = num_seqs + 1;  // one 128-token block per sequence, plus the null block
  ro.block_size = 128;
  ro.max_step_tokens = 1024;
  ro.eos_token_ids = {1};
  const std::vector<StepResult> results = RunAllLaunchedUpFront(model, ro, specs, decode_steps);

  // The runner's tokens per sequence, in step order.
  std::vector<TokenIds> outputs(num_seqs);
  for (const StepResult& r : results) {
    ASSERT_EQ(r.sampled.size(), static_cast<size_t>(num_seqs));
    for (const SampledToken& t : r.sampled) outputs[t.seq_id - 1].push_back(t.token);
  }

  // Replay: the same steps, one at a time, logits to the host, the host sampler.
  std::unique_ptr<ModelState> state = model.CreateState(num_seqs, num_seqs + 1, 128, 1024);
  std::vector<TokenIds> history(num_seqs);
  for (int i = 0; i < num_seqs; ++i) history[i] = specs[i].prompt;
  const std::vector<int32_t> blocks = {1, 2, 3, 4, 5, 6};
  int token_mismatches = 0, logprob_checks = 0;
  float worst_logprob = 0.f;
  for (int s = 0; s <= decode_steps; ++s) {
    ForwardBatch batch;
    std::vector<int32_t> ids;
    for (int i = 0; i < num_seqs; ++i) {
      const int64_t prompt_len = static_cast<int64_t>(specs[i].prompt.size());
      SequenceChunk c;
      c.token_offset = static_cast<int64_t>(ids.size());
      c.start_pos = s == 0 ? 0 : prompt_len + s - 1;
      c.num_tokens = s == 0 ? prompt_len : 1;
      c.state_slot = i;
      c.block_table = &blocks[i];
      c.num_blocks = 1;
      c.prompt_end = prompt_len;
      ids.insert(ids.end(), history[i].begin() + c.start_pos, history[i].begin() + c.start_pos + c.num_tokens);
      batch.seqs.push_back(c);
    }
    batch.token_ids = ids.data();
    batch.num_tokens = static_cast<int64_t>(ids.size());
    std::vector<float> logits(static_cast<size_t>(num_seqs * vocab));
    model.Forward(batch, *state, TensorView(logits.data(), DType::kF32, {num_seqs, vocab}));
    for (int i = 0; i < num_seqs; ++i) {
      const SampledToken& got = results[s].sampled[i];
      ASSERT_EQ(got.seq_id, static_cast<SeqId>(i + 1));
      sampling::SequenceContext ctx;
      ctx.params = &specs[i].sampling;
      ctx.tokens = &history[i];
      ctx.prompt_len = static_cast<int64_t>(specs[i].prompt.size());
      ctx.rng_seed = specs[i].seed;
      ctx.eos_token_ids = &ro.eos_token_ids;
      const SampledToken want = sampling::Sample(logits.data() + i * vocab, vocab, ctx);
      if (got.token != want.token) {
        ++token_mismatches;
        ADD_FAILURE() << "step " << s << " sequence " << i << ": device sampled " << got.token << ", host "
                      << want.token;
      }
      if (specs[i].sampling.logprobs >= 0) {
        ++logprob_checks;
        // Both are log-softmax of the same f32 logits: f32 rounding of a value of order 10.
        EXPECT_NEAR(got.logprob, want.logprob, 1e-5f * (1.f + std::fabs(want.logprob)));
        worst_logprob = std::max(worst_logprob, std::fabs(got.logprob - want.logprob));
        ASSERT_EQ(got.top.size(), want.top.size());
        for (size_t j = 0; j < want.top.size(); ++j) {
          EXPECT_EQ(got.top[j].token, want.top[j].token) << "step " << s << " top " << j;
          EXPECT_NEAR(got.top[j].logprob, want.top[j].logprob, 1e-5f * (1.f + std::fabs(want.top[j].logprob)));
        }
      }
      history[i].push_back(got.token);
    }
  }
  // min_tokens: no stop id among the first 6 outputs of sequence 4.
  for (int j = 0; j < 6; ++j) {
    const TokenId t = outputs[4][j];
    EXPECT_TRUE(t != 1 && t != 5 && t != 17 && t != 200) << "stop id " << t << " at output " << j;
  }
  std::printf("GPU runner: %d steps x %d sequences, %d token mismatches; %d logprob rows, worst |diff| %.2g\n",
              decode_steps + 1, num_seqs, token_mismatches, logprob_checks, worst_logprob);
  // Device timing covers every step once.
  for (size_t s = 1; s < results.size(); ++s) {
    EXPECT_GT(results[s].device_busy_seconds, 0.0);
    EXPECT_GE(results[s].device_idle_before_seconds, 0.0);
  }
}

// Decode steps as CUDA graphs (captured when the runner starts, from steps made of padding
// sequences alone; six sequences run in the 8-sequence bucket with two padding sequences, both
// parities) give the eager runner's tokens and logprobs bit for bit.
TEST(GpuRunner, CudaGraphReplayEqualsEager) {
  DI_REQUIRE_GPU();
  LoadOptions lo;
  lo.device = DeviceId{DeviceType::kCuda, 0};
  LoadedModel loaded = LoadModel(DemoModelDir(), lo);
  const std::vector<SeqSpec> specs = MakeSeqs(static_cast<int32_t>(loaded.model->config().vocab_size));
  RunnerOptions ro;
  ro.num_slots = 8;
  ro.num_blocks = 9;
  ro.block_size = 128;
  ro.max_step_tokens = 1024;
  ro.eos_token_ids = {1};
  const int decode_steps = test::SanitizerSizes() ? 2 : 12;
  const std::vector<StepResult> eager = RunAllLaunchedUpFront(*loaded.model, ro, specs, decode_steps);
  ro.cuda_graphs = true;
  ro.max_model_len = 512;
  const std::vector<StepResult> graphed = RunAllLaunchedUpFront(*loaded.model, ro, specs, decode_steps);
  ASSERT_EQ(eager.size(), graphed.size());
  int differ = 0, graph_steps = 0;
  for (size_t s = 0; s < eager.size(); ++s) {
    EXPECT_FALSE(eager[s].cuda_graph);
    graph_steps += graphed[s].cuda_graph ? 1 : 0;
    ASSERT_EQ(eager[s].sampled.size(), graphed[s].sampled.size());
    for (size_t r = 0; r < eager[s].sampled.size(); ++r) {
      const SampledToken& a = eager[s].sampled[r];
      const SampledToken& b = graphed[s].sampled[r];
      if (a.token != b.token || a.logprob != b.logprob || a.top.size() != b.top.size()) {
        ++differ;
        ADD_FAILURE() << "step " << s << " row " << r << ": eager " << a.token << " graph " << b.token;
      }
    }
  }
  EXPECT_EQ(graph_steps, static_cast<int>(eager.size()) - 1) << "every step after the prefill is a decode step";
  std::printf("GPU runner with CUDA graphs: %zu steps (%d replayed a graph), %d rows differ from eager\n", eager.size(),
              graph_steps, differ);
}

}  // namespace
}  // namespace deepinfer::testing
