// LLM: the offline API. Loads a model dir (weights, tokenizer.json, chat rules), runs requests
// through an in-process EngineCore and returns text.
//
//   LLM llm(options);
//   auto outs = llm.Generate({"The capital of France is"}, sampling);
//   auto reply = llm.Chat(chat_request);   // rendered with the model's chat encoding
//
// Text in: prompts are encoded with no special tokens added (tokenizer_config add_bos_token is
// false for DeepSeek-V4). Text out: incremental detokenization, stop strings applied on the
// text (the engine request is aborted at a match), EOS not shown.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "recipe/conversation.h"
#include "recipe/encoding_rules.h"
#include "recipe/output_fold.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {

struct CompletionOutput {
  int32_t index = 0;
  std::string text;
  TokenIds token_ids;                  // every generated token (EOS included)
  std::vector<TokenLogprob> logprobs;
  FinishReason finish = FinishReason::kNone;
  std::string stop_string;             // the stop string that ended it, if any
};

struct RequestOutput {
  TokenIds prompt_ids;
  std::vector<CompletionOutput> outputs;  // one per n
  RequestUsage usage;
  Status status;                          // non-ok: the request was refused
};

struct ChatOutput {
  recipe::ParsedOutput message;           // reasoning, content, tool calls, finish_reason
  RequestUsage usage;
  Status status;
};

// Streaming callback for Chat: one parser event at a time, in order.
using ChatEventCallback = std::function<void(const recipe::OutputEvent&)>;

class LLM {
 public:
  explicit LLM(EngineOptions options);
  ~LLM();

  const Tokenizer& tokenizer() const;
  const recipe::EncodingRules& rules() const { return *rules_; }
  EngineCore& engine() { return *engine_; }

  // Runs every prompt to completion (all submitted at once). `on_done(i)` is called as
  // request i finishes, from this thread.
  std::vector<RequestOutput> Generate(const std::vector<std::string>& prompts, const SamplingParams& sampling,
                                      const std::function<void(size_t)>& on_done = nullptr);
  std::vector<RequestOutput> GenerateIds(const std::vector<TokenIds>& prompts, const std::vector<SamplingParams>& sampling,
                                         const std::function<void(size_t)>& on_done = nullptr);
  // One chat turn; streams parser events through `on_event` if given.
  ChatOutput Chat(const recipe::ChatRequest& request, const SamplingParams& sampling,
                  const ChatEventCallback& on_event = nullptr);

 private:
  std::unique_ptr<EngineCore> engine_;
  std::unique_ptr<Tokenizer> tokenizer_;
  const recipe::EncodingRules* rules_ = nullptr;
};

}  // namespace deepinfer
