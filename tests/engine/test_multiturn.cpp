// Multi-turn conversations through the chat path (issue 4, acceptance 3): every turn resends the
// whole conversation (system prompt, earlier questions and the model's answers as text) plus a
// new question, rendered with the model's chat encoding and re-tokenized, exactly as an API
// client drives the server. From turn 2 on, at least 90% of prompt tokens must come from the
// prefix cache (the resume pack at the end of the previous turn), and every answer must equal
// the answer of a run with the prefix cache disabled.
#include <gtest/gtest.h>

#include "llm/llm.h"

namespace deepinfer {
namespace {

const char* kSystem =
    "You are DeepInfer's demo assistant. You answer questions about words, their meanings and "
    "their uses in English, about Debian packages and how to install and configure them, and you "
    "tell short fortunes when asked. Keep answers short: one or two sentences. When you define a "
    "word, say its part of speech first, then the meaning, then an example of its use. When you "
    "talk about Debian, name the package and the command. Never invent a package name. If a "
    "question is unclear, ask what the user meant. The user is a newcomer to Debian and to "
    "English dictionaries alike, so avoid jargon and explain abbreviations the first time they "
    "appear. These rules hold for the whole conversation, however long it grows, and however the "
    "user phrases the questions that follow.";

const char* kQuestions[] = {
    "What does \"ocean\" mean?",      "What does \"harbor\" mean?",    "Tell me a fortune.",
    "What does \"lantern\" mean?",    "How do I install a package?",   "What does \"meadow\" mean?",
};

struct TurnRecord {
  std::string answer;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
};

std::vector<std::vector<TurnRecord>> RunConversations(bool prefix_cache) {
  EngineOptions o;
  o.model_dir = std::string(DEEPINFER_SOURCE_DIR) + "/models/deepinfer-v4-demo";
  o.enable_prefix_caching = prefix_cache;
  o.max_model_len = 2048;
  o.cache_memory_mb = 64;
  o.max_num_seqs = 4;
  LLM llm(o);
  std::vector<std::vector<TurnRecord>> out;
  for (int conv = 0; conv < 4; ++conv) {
    recipe::ChatRequest req;
    req.thinking = false;
    recipe::Message system;
    system.role = recipe::Role::kSystem;
    system.content = kSystem;
    req.messages.push_back(system);
    std::vector<TurnRecord> turns;
    for (int turn = 0; turn < 6; ++turn) {
      recipe::Message user;
      user.role = recipe::Role::kUser;
      user.parts.push_back(recipe::ContentPart::Text(kQuestions[(conv + turn) % 6]));
      req.messages.push_back(user);
      SamplingParams s;
      s.temperature = 0.f;
      s.max_tokens = 40;
      ChatOutput reply = llm.Chat(req, s);
      EXPECT_TRUE(reply.status.ok()) << reply.status.ToString();
      turns.push_back({reply.message.content, reply.usage.prompt_tokens, reply.usage.cached_prompt_tokens});
      recipe::Message assistant;
      assistant.role = recipe::Role::kAssistant;
      assistant.content = reply.message.content;
      req.messages.push_back(assistant);
    }
    out.push_back(std::move(turns));
  }
  return out;
}

TEST(MultiTurn, PrefixCacheServesLaterTurnsAndChangesNothing) {
  const auto cached = RunConversations(true);
  const auto uncached = RunConversations(false);
  int64_t prompt = 0, hit = 0;
  for (size_t c = 0; c < cached.size(); ++c) {
    for (size_t t = 0; t < cached[c].size(); ++t) {
      EXPECT_EQ(cached[c][t].answer, uncached[c][t].answer) << "conversation " << c << " turn " << t;
      EXPECT_EQ(uncached[c][t].cached_tokens, 0);
      if (t == 0) continue;
      prompt += cached[c][t].prompt_tokens;
      hit += cached[c][t].cached_tokens;
      std::printf("conversation %zu turn %zu: %ld of %ld prompt tokens from the cache\n", c, t + 1,
                  static_cast<long>(cached[c][t].cached_tokens), static_cast<long>(cached[c][t].prompt_tokens));
    }
  }
  const double rate = static_cast<double>(hit) / static_cast<double>(prompt);
  std::printf("prefix-cache hit rate from turn 2 on: %.1f%% (%ld of %ld prompt tokens)\n", 100 * rate,
              static_cast<long>(hit), static_cast<long>(prompt));
  EXPECT_GE(rate, 0.90);
}

}  // namespace
}  // namespace deepinfer
