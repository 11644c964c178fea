// A deterministic randomized workload driven through a real EngineCore the way a client does:
// staggered submission, stop strings applied on the detokenized text (then Abort), client
// aborts after a chosen number of tokens, max_tokens limits. Every request's visible result
// (token ids and text) is recorded for comparison between engine configurations.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::testing {

struct WorkItem {
  TokenIds prompt;
  SamplingParams sampling;
  int32_t abort_after = -1;  // the client aborts once it has this many tokens (-1: never)
};

struct WorkResult {
  TokenIds tokens;           // as the client kept them
  std::string text;
  std::string finish;        // "stop", "length", "stop_string", "client_abort"
  int64_t cached_prompt_tokens = 0;
};

// `count` requests over `vocab` token ids; about a third share one of three 150-token
// prefixes (so the prefix cache has something to find).
std::vector<WorkItem> MakeWorkload(uint64_t seed, int count, int32_t vocab);

// Runs `items` with at most `max_outstanding` requests submitted at a time (the next one is
// submitted as one completes). Returns results in item order.
std::vector<WorkResult> RunWorkload(EngineCore& engine, const Tokenizer& tokenizer,
                                    const std::vector<WorkItem>& items, int max_outstanding);

// The shipped demo model (DEEPINFER_SOURCE_DIR in the environment overrides the build's source
// dir: the GPU machine runs the tests from a carried binary).
std::string DemoModelDir();

// The demo model with a tight cache: 12 sequences, 384 tokens per step, 40 blocks of 128, 8 packs.
EngineOptions DemoEngineOptions();

// On top of `o`: poisoned released blocks, the integrity checker after every step, a forced
// preemption every 9 steps and resume packs every block, so a randomized workload exercises them.
void AddStressChecks(EngineOptions& o, int64_t sampleable_vocab);

struct EngineRun {
  std::vector<WorkResult> results;
  EngineStats stats;
};

// Runs `items` (24 outstanding) on a fresh engine with options `o`, then expects it to go idle
// within `idle_timeout` with every block and slot released and the cache's integrity intact. (The
// GPU tests under compute-sanitizer racecheck pass minutes: one instrumented step takes seconds.)
EngineRun RunOnFreshEngine(const EngineOptions& o, const std::vector<WorkItem>& items, const Tokenizer& tokenizer,
                           std::chrono::seconds idle_timeout = std::chrono::seconds(30));

}  // namespace deepinfer::testing
