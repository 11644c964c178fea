// Scheduler scenarios: exact block ids, per-step token counts, the one-step-late stop of the
// overlapped loop, deferred release, preemption, prefix hits; randomized operation sequences
// with the integrity checker after every operation. Step results are written by hand (the
// runner's role), as vLLM's scheduler tests do.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include "scheduler/scheduler.h"

namespace deepinfer {
namespace {

using Ids = std::vector<int32_t>;
constexpr TokenId kEos = 1;

TokenIds Prompt(int32_t base, int32_t n) {
  TokenIds t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), base);
  return t;
}

struct Harness {
  explicit Harness(int32_t blocks = 16, int32_t budget = 256, int32_t seqs = 4, int32_t packs = 4) {
    cache::CacheConfig cc;
    cc.num_blocks = blocks;
    cc.block_size = 128;
    cc.num_slots = seqs;
    cc.num_packs = packs;
    cache = std::make_unique<cache::StateCacheManager>(cc);
    SchedulerConfig sc;
    sc.max_num_seqs = seqs;
    sc.max_num_batched_tokens = budget;
    sc.max_model_len = 4096;
    sc.eos_token_ids = {kEos};
    sched = std::make_unique<Scheduler>(sc, *cache);
  }
  void Add(SeqId id, TokenIds prompt, int32_t max_tokens = 16) {
    SequenceSpec s;
    s.seq_id = id;
    s.prompt = std::move(prompt);
    s.sampling.max_tokens = max_tokens;
    s.sampling.temperature = 0;
    sched->Add(std::move(s));
  }
  // The runner's answer: `token_for(seq)` for every sampling chunk.
  StepResult Result(const SchedulerOutput& out, const std::map<SeqId, TokenId>& tokens = {}) {
    StepResult r;
    r.step_id = out.step_id;
    for (const auto& c : out.chunks) {
      if (!c.sample) continue;
      SampledToken st;
      st.seq_id = c.seq_id;
      auto it = tokens.find(c.seq_id);
      st.token = it == tokens.end() ? 100 : it->second;
      r.sampled.push_back(st);
    }
    for (const auto& ps : out.pack_samples) {  // the runner samples these from stored logits
      SampledToken st;
      st.seq_id = ps.seq_id;
      st.token = 100;
      r.sampled.push_back(st);
    }
    return r;
  }
  // Schedule, run, update, complete: the synchronous loop.
  SchedulerOutput SyncStep(const std::map<SeqId, TokenId>& tokens = {}) {
    SchedulerOutput out = sched->Schedule();
    last_updates = sched->Update(out, Result(out, tokens));
    sched->OnStepCompleted(out.step_id);
    EXPECT_EQ(sched->CheckIntegrity(), "");
    return out;
  }
  std::unique_ptr<cache::StateCacheManager> cache;
  std::unique_ptr<Scheduler> sched;
  std::vector<SequenceUpdate> last_updates;
};

const ScheduledChunk* ChunkOf(const SchedulerOutput& out, SeqId id) {
  for (const auto& c : out.chunks) {
    if (c.seq_id == id) return &c;
  }
  return nullptr;
}

TEST(Scheduler, TokenBudgetChunksLongPromptsThenAdmitsTheNext) {
  Harness h(16, 256);
  h.Add(1, Prompt(1000, 300));
  h.Add(2, Prompt(2000, 100));
  SchedulerOutput s1 = h.SyncStep();
  ASSERT_EQ(s1.chunks.size(), 1u);  // A takes the whole budget
  EXPECT_EQ(s1.chunks[0].start_pos, 0);
  EXPECT_EQ(s1.chunks[0].num_tokens, 256);
  EXPECT_FALSE(s1.chunks[0].sample);
  ASSERT_EQ(s1.new_seqs.size(), 1u);
  EXPECT_EQ(s1.new_seqs[0].block_ids, (Ids{1, 2}));
  EXPECT_EQ(s1.new_seqs[0].slot, 0);

  SchedulerOutput s2 = h.SyncStep();  // A's last 44 tokens, then B's 100
  ASSERT_EQ(s2.chunks.size(), 2u);
  EXPECT_EQ(s2.chunks[0].seq_id, 1u);
  EXPECT_EQ(s2.chunks[0].start_pos, 256);
  EXPECT_EQ(s2.chunks[0].num_tokens, 44);
  EXPECT_TRUE(s2.chunks[0].sample);
  ASSERT_EQ(s2.diffs.size(), 1u);
  EXPECT_EQ(s2.diffs[0].new_block_ids, (Ids{3}));
  // A's prompt ends at 300 = 2·128 + 44: its resume pack copies the partial block 3 into 4.
  ASSERT_EQ(s2.post_copies.size(), 2u);
  EXPECT_EQ(s2.post_copies[0].from_block, 3);
  EXPECT_EQ(s2.post_copies[0].to_block, 4);
  EXPECT_EQ(s2.chunks[1].seq_id, 2u);
  EXPECT_EQ(s2.chunks[1].num_tokens, 100);
  EXPECT_EQ(s2.new_seqs[0].block_ids, (Ids{5}));
  EXPECT_EQ(s2.post_copies[1].from_block, 5);  // and B's prompt end (100 tokens) into 6
  EXPECT_EQ(s2.post_copies[1].to_block, 6);
  EXPECT_EQ(s2.num_tokens(), 144);

  SchedulerOutput s3 = h.SyncStep();  // both decode: one token each, decodes first
  EXPECT_EQ(s3.num_tokens(), 2);
  EXPECT_EQ(ChunkOf(s3, 1)->start_pos, 300);
  EXPECT_EQ(ChunkOf(s3, 2)->start_pos, 100);
}

TEST(Scheduler, PrefillChunksEndAtResumePackPoints) {
  Harness h(40, 4096);
  SchedulerConfig sc;
  // pack_interval_blocks = 16 by default: a 2500-token prompt is cut at 2048.
  h.Add(1, Prompt(0, 2500));
  SchedulerOutput s1 = h.SyncStep();
  EXPECT_EQ(s1.chunks[0].num_tokens, 2048);
  ASSERT_EQ(s1.post_copies.size(), 1u);        // a pack at 2048
  EXPECT_EQ(s1.post_copies[0].from_slot, 0);
  EXPECT_EQ(s1.post_copies[0].to_slot, 4);     // pack 0 lives in slot num_slots + 0
  EXPECT_EQ(s1.post_copies[0].from_block, 0);  // block-aligned: nothing partial to copy
  SchedulerOutput s2 = h.SyncStep();
  EXPECT_EQ(s2.chunks[0].num_tokens, 452);
  ASSERT_EQ(s2.post_copies.size(), 1u);        // and one at the prompt end (2500 = 19·128 + 68)
  EXPECT_EQ(s2.post_copies[0].to_slot, 5);
  EXPECT_EQ(s2.post_copies[0].from_block, 20);  // the block holding rows of tokens 2432..2499
  EXPECT_EQ(s2.post_copies[0].to_block, 21);    // the pack's own copy
}

TEST(Scheduler, OverlappedStopIsAppliedOneStepLateAndReleaseWaits) {
  Harness h(8, 256);
  h.Add(1, Prompt(10, 50), /*max_tokens=*/100);
  // Step 1: prefill (samples token t1). Step 2 is scheduled before step 1's result is known.
  SchedulerOutput s1 = h.sched->Schedule();
  SchedulerOutput s2 = h.sched->Schedule();
  ASSERT_EQ(s2.chunks.size(), 1u);
  EXPECT_EQ(s2.chunks[0].start_pos, 50);  // feeds the in-flight token t1
  EXPECT_EQ(s2.chunks[0].num_tokens, 1);
  // Step 1's token is EOS: the sequence finishes now; step 2 is already running.
  auto u1 = h.sched->Update(s1, h.Result(s1, {{1, kEos}}));
  ASSERT_EQ(u1.size(), 1u);
  EXPECT_EQ(u1[0].finish, FinishReason::kStop);
  h.sched->OnStepCompleted(s1.step_id);
  EXPECT_EQ(h.sched->CheckIntegrity(), "");
  // Step 3 must not release it yet: step 2 still uses its slot and blocks (1, and 2 held by
  // the resume pack of the prompt end). It does save the end-of-sequence pack already: that
  // copy runs after step 2, and a next turn arriving now can restore it in step 3.
  SchedulerOutput s3 = h.sched->Schedule();
  EXPECT_TRUE(s3.finished_seq_ids.empty());
  ASSERT_EQ(s3.pre_copies.size(), 1u);
  EXPECT_EQ(s3.pre_copies[0].from_slot, 0);
  EXPECT_EQ(s3.pre_copies[0].from_block, 1);
  EXPECT_EQ(s3.pre_copies[0].to_block, 3);
  EXPECT_EQ(h.cache->pool().num_used(), 3);
  EXPECT_EQ(h.cache->pool().RefCount(1), 1);
  // Step 2's token is discarded; after step 2 completes the next schedule releases it.
  auto u2 = h.sched->Update(s2, h.Result(s2, {{1, 77}}));
  EXPECT_TRUE(u2.empty());
  h.sched->OnStepCompleted(s2.step_id);
  h.sched->Update(s3, h.Result(s3));
  h.sched->OnStepCompleted(s3.step_id);
  SchedulerOutput s4 = h.sched->Schedule();
  EXPECT_EQ(s4.finished_seq_ids, (std::vector<SeqId>{1}));
  EXPECT_TRUE(s4.pre_copies.empty());
  EXPECT_EQ(h.cache->pool().num_used(), 2);  // only the two packs' partial copies
  EXPECT_EQ(h.cache->pool().RefCount(1), 0);
  EXPECT_EQ(h.sched->CheckIntegrity(), "");
}

TEST(Scheduler, MaxTokensAlreadyCoveredIsNotScheduledAgain) {
  Harness h(8, 256);
  h.Add(1, Prompt(10, 20), /*max_tokens=*/2);
  SchedulerOutput s1 = h.sched->Schedule();  // samples output 1
  SchedulerOutput s2 = h.sched->Schedule();  // samples output 2 (in flight)
  SchedulerOutput s3 = h.sched->Schedule();  // nothing: 2 outputs are covered
  EXPECT_EQ(s1.num_tokens(), 20);
  EXPECT_EQ(s2.num_tokens(), 1);
  EXPECT_EQ(s3.num_tokens(), 0);
  h.sched->Update(s1, h.Result(s1));
  auto u = h.sched->Update(s2, h.Result(s2));
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].finish, FinishReason::kLength);
}

TEST(Scheduler, PreemptsTheNewestWhenBlocksRunOutAndRecomputesIt) {
  // 5 usable blocks; two sequences of 250 tokens need 2 each, and grow past 256.
  Harness h(6, 1024, 2, 0);
  h.Add(1, Prompt(0, 250), 100);
  h.Add(2, Prompt(5000, 250), 100);
  SchedulerOutput s1 = h.SyncStep();
  EXPECT_EQ(s1.new_seqs[0].block_ids, (Ids{1, 2}));
  EXPECT_EQ(s1.new_seqs[1].block_ids, (Ids{3, 4}));
  for (int i = 0; i < 6; ++i) h.SyncStep();  // both decode to 256 tokens
  // Sequence 1 needs its third block (5); then sequence 2 needs one and there is none: it is
  // preempted (it is the newest), its blocks return in reverse order.
  SchedulerOutput s = h.SyncStep();
  EXPECT_EQ(h.sched->Stats().num_preemptions, 1);
  EXPECT_EQ(s.finished_seq_ids, (std::vector<SeqId>{2}));
  EXPECT_EQ(h.cache->pool().FreeQueue(), (Ids{4, 3}));
  EXPECT_EQ(s.num_tokens(), 1);
  EXPECT_EQ(s.diffs[0].new_block_ids, (Ids{5}));
  // It waits at the head of the queue: resumed when sequence 1 finishes, recomputing its 250
  // prompt tokens and 7 outputs from scratch (no prefix cache here).
  EXPECT_EQ(h.sched->Stats().num_waiting, 1);
  SchedulerOutput r;
  for (int i = 0; i < 100 && r.new_seqs.empty(); ++i) r = h.SyncStep();
  ASSERT_EQ(r.new_seqs.size(), 1u);
  EXPECT_EQ(r.new_seqs[0].seq_id, 2u);
  EXPECT_EQ(r.new_seqs[0].tokens.size(), 257u);
  EXPECT_EQ(r.new_seqs[0].num_computed_tokens, 0);
  EXPECT_EQ(ChunkOf(r, 2)->num_tokens, 257);
}

TEST(Scheduler, FinishedConversationTurnIsAPrefixHit) {
  Harness h(16, 1024);
  h.Add(1, Prompt(0, 200), 5);
  for (int i = 0; i < 5; ++i) h.SyncStep({{1, static_cast<TokenId>(900 + i)}});
  h.SyncStep();  // releases sequence 1 and saves its pack
  // The next turn resends prompt + the 5 outputs + a new message.
  TokenIds turn2 = Prompt(0, 200);
  for (int i = 0; i < 4; ++i) turn2.push_back(900 + i);  // 204 tokens folded in
  for (int i = 0; i < 30; ++i) turn2.push_back(3000 + i);
  h.Add(2, turn2, 5);
  SchedulerOutput s = h.SyncStep();
  ASSERT_EQ(s.new_seqs.size(), 1u);
  EXPECT_EQ(s.new_seqs[0].num_computed_tokens, 204);
  EXPECT_GE(s.new_seqs[0].restore.from_slot, 4);
  EXPECT_EQ(s.chunks[0].start_pos, 204);
  EXPECT_EQ(s.chunks[0].num_tokens, 30);
  EXPECT_EQ(h.sched->CachedPromptTokens(2), 204);
}

TEST(Scheduler, IdenticalPromptIsSampledFromThePromptEndPack) {
  Harness h(16, 1024);
  h.Add(1, Prompt(0, 200), 3);
  SchedulerOutput s1 = h.SyncStep();
  ASSERT_EQ(s1.post_copies.size(), 1u);
  EXPECT_EQ(s1.post_copies[0].logits_of, 1u);  // the prompt-end pack keeps the last logits
  h.Add(2, Prompt(0, 200), 3);
  SchedulerOutput s2 = h.SyncStep();
  ASSERT_EQ(s2.new_seqs.size(), 1u);
  EXPECT_EQ(s2.new_seqs[0].num_computed_tokens, 200);
  EXPECT_EQ(s2.new_seqs[0].restore.from_slot, s1.post_copies[0].to_slot);
  EXPECT_EQ(ChunkOf(s2, 2), nullptr);            // no forward for it
  ASSERT_EQ(s2.pack_samples.size(), 1u);
  EXPECT_EQ(s2.pack_samples[0].seq_id, 2u);
  ASSERT_EQ(h.last_updates.size(), 2u);           // both sequences got a token this step
  SchedulerOutput s3 = h.SyncStep();
  EXPECT_EQ(ChunkOf(s3, 2)->start_pos, 200);      // then it decodes like any other
  EXPECT_EQ(h.sched->CachedPromptTokens(2), 200);
}

TEST(Scheduler, SiblingsWaitForTheFirstPromptThenRestoreIt) {
  Harness h(16, 1024);
  SequenceSpec first, second;
  first.seq_id = 10;
  first.prompt = Prompt(500, 150);
  first.sampling.max_tokens = 4;
  second = first;
  second.seq_id = 11;
  second.same_prompt_as = 10;
  h.sched->Add(first);
  h.sched->Add(second);
  SchedulerOutput s1 = h.SyncStep();
  ASSERT_EQ(s1.new_seqs.size(), 1u);  // only the first computes the prompt
  EXPECT_EQ(s1.new_seqs[0].seq_id, 10u);
  SchedulerOutput s2 = h.SyncStep();
  ASSERT_EQ(s2.new_seqs.size(), 1u);  // the sibling restores its pack, logits included
  EXPECT_EQ(s2.new_seqs[0].seq_id, 11u);
  EXPECT_EQ(s2.new_seqs[0].num_computed_tokens, 150);
  ASSERT_EQ(s2.pack_samples.size(), 1u);
}

TEST(Scheduler, RandomizedOperationsKeepTheIntegrityChecker) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 10; ++trial) {
    Harness h(24, 300, 4, 3);
    std::deque<SchedulerOutput> in_flight;
    SeqId next = 1;
    std::vector<SeqId> live;
    int finished = 0, aborted = 0;
    for (int step = 0; step < 300; ++step) {
      const int op = static_cast<int>(rng() % 10);
      if (op < 3) {  // arrive (shared prefixes common)
        const int32_t base = static_cast<int32_t>(rng() % 3) * 10000;
        h.Add(next, Prompt(base, static_cast<int32_t>(20 + rng() % 400)), static_cast<int32_t>(1 + rng() % 40));
        live.push_back(next++);
      } else if (op == 3 && !live.empty()) {  // abort
        aborted += h.sched->Abort(live[rng() % live.size()]);
      } else {  // one overlapped iteration
        SchedulerOutput out = h.sched->Schedule();
        if (!out.empty()) in_flight.push_back(std::move(out));
        if (in_flight.size() >= 2 || (!in_flight.empty() && rng() % 2)) {
          SchedulerOutput done = std::move(in_flight.front());
          in_flight.pop_front();
          std::map<SeqId, TokenId> tokens;
          for (const auto& c : done.chunks) tokens[c.seq_id] = rng() % 8 == 0 ? kEos : 50 + static_cast<TokenId>(rng() % 50);
          for (const auto& u : h.sched->Update(done, h.Result(done, tokens))) finished += u.finish != FinishReason::kNone;
          h.sched->OnStepCompleted(done.step_id);
        }
      }
      ASSERT_EQ(h.sched->CheckIntegrity(), "") << "trial " << trial << " step " << step;
    }
    EXPECT_GT(finished + aborted, 10);
  }
}

}  // namespace
}  // namespace deepinfer
