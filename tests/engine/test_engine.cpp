// The engine loop end to end on the demo model (issue 4, acceptance 2 and 3).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "engine/workload.h"

namespace deepinfer::testing {
namespace {

TEST(Engine, OverlappedEqualsSynchronousOnARandomizedWorkload) {
  auto tok = Tokenizer::FromFile(DemoModelDir() + "/tokenizer.json");
  const std::vector<WorkItem> items = MakeWorkload(2026, 200, tok->vocab_size());
  EngineOptions o = DemoEngineOptions();
  AddStressChecks(o, tok->vocab_size());
  o.async_scheduling = false;
  const EngineRun sync = RunOnFreshEngine(o, items, *tok);
  o.async_scheduling = true;
  const EngineRun overlapped = RunOnFreshEngine(o, items, *tok);

  std::map<std::string, int> finishes;
  int mismatches = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    ++finishes[sync.results[i].finish];
    if (sync.results[i].tokens != overlapped.results[i].tokens || sync.results[i].text != overlapped.results[i].text) {
      ++mismatches;
      ADD_FAILURE() << "request " << i << " differs: sync '" << sync.results[i].text << "' (" << sync.results[i].finish
                    << ") vs overlapped '" << overlapped.results[i].text << "' (" << overlapped.results[i].finish << ")";
    }
  }
  std::printf("200 requests: %d differ; finishes:", mismatches);
  for (const auto& [k, v] : finishes) std::printf(" %s=%d", k.c_str(), v);
  std::printf("; preemptions sync=%ld overlapped=%ld; prompt tokens cached sync=%ld overlapped=%ld of %ld\n",
              static_cast<long>(sync.stats.num_preemptions), static_cast<long>(overlapped.stats.num_preemptions),
              static_cast<long>(sync.stats.prompt_tokens_cached), static_cast<long>(overlapped.stats.prompt_tokens_cached),
              static_cast<long>(sync.stats.prompt_tokens_total));
  // The workload exercised what it claims to.
  EXPECT_GT(finishes["length"], 20);
  EXPECT_GT(finishes["stop_string"], 5);
  EXPECT_GT(finishes["client_abort"], 5);
  EXPECT_GT(sync.stats.num_preemptions, 5);
  EXPECT_GT(overlapped.stats.num_preemptions, 5);
  EXPECT_GT(sync.stats.prompt_tokens_cached, 1000);
  EXPECT_GT(overlapped.stats.prompt_tokens_cached, 1000);
}

}  // namespace
}  // namespace deepinfer::testing

namespace deepinfer::testing {
namespace {

TEST(Engine, DrainAbortsWhatIsStillRunningAndAbortReachesTheStream) {
  EngineOptions o = DemoEngineOptions();
  EngineCore engine(o);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {
    GenerationRequest r;
    r.prompt = {0, 431, 355, 288};
    r.sampling.max_tokens = 400;
    r.sampling.ignore_eos = true;
    streams.push_back(engine.Submit(std::move(r)).value());
  }
  // One request aborted explicitly; the drain times out on the other three and aborts them.
  engine.Abort(streams[0]->id());
  engine.Drain(std::chrono::milliseconds(50));
  for (auto& s : streams) {
    bool done = false;
    FinishReason finish = FinishReason::kNone;
    for (const StreamEvent& e : s->Drain()) {
      for (const auto& d : e.deltas) {
        if (d.finish != FinishReason::kNone) finish = d.finish;
      }
      done |= e.done;
    }
    EXPECT_TRUE(done);
    EXPECT_EQ(finish, FinishReason::kAbort);
  }
  EXPECT_TRUE(engine.WaitIdle(std::chrono::seconds(10)));
  EXPECT_EQ(engine.Stats().num_blocks_used, 0);
  EXPECT_EQ(engine.Stats().requests_aborted, 4);
  // Once draining, new work is refused with kUnavailable.
  GenerationRequest late;
  late.prompt = {0, 1};
  EXPECT_EQ(engine.Submit(std::move(late)).status().code(), StatusCode::kUnavailable);
}

TEST(Engine, SubmitRejectsBadRequestsWithTheRightStatus) {
  EngineOptions o = DemoEngineOptions();
  EngineCore engine(o);
  GenerationRequest r;
  EXPECT_EQ(engine.Submit(r).status().code(), StatusCode::kInvalidArgument);  // empty prompt
  r.prompt = {0, 99999999};
  EXPECT_EQ(engine.Submit(r).status().code(), StatusCode::kInvalidArgument);  // id outside the vocabulary
  r.prompt = {0, 1};
  r.sampling.max_tokens = 100000;
  EXPECT_EQ(engine.Submit(r).status().code(), StatusCode::kOutOfRange);       // over max_model_len
  r.sampling.max_tokens = 4;
  r.sampling.temperature = 1e9f;
  EXPECT_EQ(engine.Submit(r).status().code(), StatusCode::kInvalidArgument);  // bad sampling value
}

}  // namespace
}  // namespace deepinfer::testing

namespace deepinfer::testing {
namespace {

std::vector<TokenIds> Collect(RequestStream& s, int n, RequestUsage* usage) {
  std::vector<TokenIds> out(static_cast<size_t>(n));
  bool done = false;
  while (!done) {
    s.WaitFor(std::chrono::milliseconds(100));
    for (const StreamEvent& e : s.Drain()) {
      for (const auto& d : e.deltas) out[d.index].insert(out[d.index].end(), d.tokens.begin(), d.tokens.end());
      if (e.done) {
        done = true;
        *usage = e.usage;
      }
    }
  }
  return out;
}

TEST(Engine, IdenticalPromptsResumeAtTheEndAndSiblingsShareThePrompt) {
  auto tok = Tokenizer::FromFile(DemoModelDir() + "/tokenizer.json");
  const TokenIds prompt = tok->Encode("<｜begin▁of▁sentence｜><｜User｜>What does \"ocean\" mean?<｜Assistant｜></think>");
  auto run = [&](bool cache) {
    EngineOptions o = DemoEngineOptions();
    o.enable_prefix_caching = cache;
    EngineCore engine(o);
    std::vector<std::vector<TokenIds>> outs;
    std::vector<RequestUsage> usage(3);
    for (int i = 0; i < 2; ++i) {  // the same greedy request twice, one after the other
      GenerationRequest r{prompt, {}, ""};
      r.sampling.temperature = 0.f;
      r.sampling.max_tokens = 20;
      outs.push_back(Collect(*engine.Submit(r).value(), 1, &usage[i]));
      EXPECT_TRUE(engine.WaitIdle(std::chrono::seconds(10)));
    }
    // n = 4 seeded samples of a new prompt: sibling 0 computes it, siblings 1-3 wait for its
    // prompt-end pack and restore it (3 × the prompt from the cache).
    const int64_t cached_before = engine.Stats().prompt_tokens_cached;
    GenerationRequest r{tok->Encode("Once upon a time, there was a"), {}, ""};
    const int64_t prompt2 = static_cast<int64_t>(r.prompt.size());
    r.sampling.temperature = 0.9f;
    r.sampling.seed = 11;
    r.sampling.n = 4;
    r.sampling.max_tokens = 12;
    outs.push_back(Collect(*engine.Submit(r).value(), 4, &usage[2]));
    EXPECT_TRUE(engine.WaitIdle(std::chrono::seconds(10)));
    EXPECT_EQ(engine.Stats().num_blocks_used, 0);
    EXPECT_EQ(engine.Stats().prompt_tokens_cached - cached_before, cache ? 3 * prompt2 : 0);
    return std::make_pair(outs, usage);
  };
  const auto [cached, cached_usage] = run(true);
  const auto [plain, plain_usage] = run(false);
  EXPECT_EQ(cached, plain) << "a whole-prompt hit samples from the same logits the computation gives";
  EXPECT_EQ(cached[0], cached[1]);
  EXPECT_EQ(cached_usage[0].cached_prompt_tokens, 0);
  EXPECT_EQ(cached_usage[1].cached_prompt_tokens, static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(plain_usage[1].cached_prompt_tokens, 0);
}

}  // namespace
}  // namespace deepinfer::testing
