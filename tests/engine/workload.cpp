#include "engine/workload.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>

#include "base/error.h"
#include "llm/stop_matcher.h"

namespace deepinfer::testing {

std::vector<WorkItem> MakeWorkload(uint64_t seed, int count, int32_t vocab) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1)); };
  std::vector<TokenIds> prefixes(3);
  for (auto& p : prefixes) {
    for (int i = 0; i < 150; ++i) p.push_back(static_cast<TokenId>(uniform(2, vocab - 1)));
  }
  static const char* kStops[] = {"e", "the", ".", "\n", " a"};
  std::vector<WorkItem> items;
  for (int i = 0; i < count; ++i) {
    WorkItem w;
    if (uniform(0, 2) == 0) w.prompt = prefixes[uniform(0, 2)];
    const int64_t extra = uniform(3, 80);
    for (int64_t j = 0; j < extra; ++j) w.prompt.push_back(static_cast<TokenId>(uniform(2, vocab - 1)));
    SamplingParams& s = w.sampling;
    s.max_tokens = static_cast<int32_t>(uniform(1, 24));
    if (uniform(0, 1) == 0) {
      s.temperature = 0.f;  // greedy
    } else {
      s.temperature = 0.8f;
      s.top_p = 0.9f;
      s.top_k = 50;
      s.seed = rng();
    }
    if (uniform(0, 3) == 0) s.stop = {kStops[uniform(0, 4)]};
    if (uniform(0, 6) == 0) s.stop_token_ids = {static_cast<TokenId>(uniform(2, vocab - 1))};
    if (uniform(0, 5) == 0) w.abort_after = static_cast<int32_t>(uniform(1, 6));
    items.push_back(std::move(w));
  }
  return items;
}

namespace {

struct Live {
  std::shared_ptr<RequestStream> stream;
  std::unique_ptr<IncrementalDetokenizer> detok;
  std::unique_ptr<StopStringMatcher> stops;
  bool closed = false;  // the client stopped reading (stop string or abort)
};

}  // namespace

std::vector<WorkResult> RunWorkload(EngineCore& engine, const Tokenizer& tokenizer,
                                    const std::vector<WorkItem>& items, int max_outstanding) {
  std::vector<WorkResult> results(items.size());
  std::vector<Live> live(items.size());
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
  size_t next = 0, open = 0, finished = 0;
  auto submit = [&] {
    while (next < items.size() && open < static_cast<size_t>(max_outstanding)) {
      const WorkItem& w = items[next];
      auto s = engine.Submit(GenerationRequest{w.prompt, w.sampling, ""});
      DI_CHECK(s.ok(), "submit {}: {}", next, s.status().ToString());
      live[next].stream = s.value();
      live[next].stream->SetNotifier([&] {
        std::lock_guard<std::mutex> lock(mu);
        ready = true;
        cv.notify_all();
      });
      live[next].detok = std::make_unique<IncrementalDetokenizer>(tokenizer, true);
      live[next].stops = std::make_unique<StopStringMatcher>(w.sampling.stop);
      ++next;
      ++open;
    }
  };
  submit();
  while (finished < items.size()) {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return ready; });
      ready = false;
    }
    for (size_t i = 0; i < next; ++i) {
      Live& l = live[i];
      if (!l.stream) continue;
      WorkResult& r = results[i];
      for (StreamEvent& ev : l.stream->Drain()) {
        for (const SequenceDelta& d : ev.deltas) {
          for (TokenId t : d.tokens) {
            if (l.closed) break;
            r.tokens.push_back(t);
            r.text += l.stops->Feed(l.detok->Append(t));
            if (l.stops->stopped()) {
              l.closed = true;
              r.finish = "stop_string";
              engine.Abort(l.stream->id());
            } else if (items[i].abort_after > 0 && static_cast<int32_t>(r.tokens.size()) >= items[i].abort_after) {
              l.closed = true;
              r.finish = "client_abort";
              engine.Abort(l.stream->id());
            }
          }
          if (d.finish != FinishReason::kNone && !l.closed) {
            r.finish = FinishReasonName(d.finish);
            r.text += l.stops->Feed(l.detok->Flush()) + l.stops->Finish();
            l.closed = true;
          }
        }
        if (ev.done) {
          r.cached_prompt_tokens = ev.usage.cached_prompt_tokens;
          l.stream.reset();
          --open;
          ++finished;
          break;
        }
      }
    }
    submit();
  }
  return results;
}

std::string DemoModelDir() {
  const char* env = std::getenv("DEEPINFER_SOURCE_DIR");
  return std::string(env != nullptr ? env : DEEPINFER_SOURCE_DIR) + "/models/deepinfer-v4-demo";
}

EngineOptions DemoEngineOptions() {
  EngineOptions o;
  o.model_dir = DemoModelDir();
  o.max_num_seqs = 12;
  o.max_num_batched_tokens = 384;
  o.max_model_len = 512;
  o.block_size = 128;
  o.num_blocks = 40;    // tight: 12 sequences of up to ~300 tokens need ~36 blocks
  o.num_packs = 8;
  o.cache_memory_mb = 0;
  return o;
}

void AddStressChecks(EngineOptions& o, int64_t sampleable_vocab) {
  o.poison_released_blocks = true;        // a read of a released block turns into NaN logits
  o.check_integrity_every_step = true;
  o.preempt_every_n_steps = 9;            // forced preemptions on top of the natural ones
  o.pack_interval_blocks = 1;             // resume packs every 128 prompt tokens: shared prefixes hit
  o.sampleable_vocab = sampleable_vocab;
}

EngineRun RunOnFreshEngine(const EngineOptions& o, const std::vector<WorkItem>& items, const Tokenizer& tokenizer,
                           std::chrono::seconds idle_timeout) {
  EngineCore engine(o);
  EngineRun run;
  run.results = RunWorkload(engine, tokenizer, items, 24);
  EXPECT_TRUE(engine.WaitIdle(idle_timeout)) << "not idle " << idle_timeout.count() << " s after the last result";
  run.stats = engine.Stats();
  EXPECT_EQ(engine.CheckIntegrity(), "");
  EXPECT_EQ(run.stats.num_blocks_used, 0) << "every block is released once the engine is idle";
  EXPECT_EQ(run.stats.num_slots_used, 0);
  return run;
}

}  // namespace deepinfer::testing
