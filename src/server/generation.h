// One HTTP generation request as the engine sees it: one engine request per prompt (n
// sequences each), their token streams decoded and parsed per sequence into API-neutral
// choice updates. API formatters (openai_*.h, anthropic_*.h) turn updates into wire bytes.
//
// Threading: a Generation is used by one io strand. Start()'s notifier is called from the
// engine thread whenever a stream has new events; it must only post a wake-up to the strand,
// which then calls Poll().
//
// Stops: when a sequence's TextProcessor reports a stop (stop string, closed tool block,
// end-of-sentence text) the choice finishes at once; further tokens of that sequence are
// dropped, and once every sequence of an engine request has finished this way the request is
// aborted in the engine (it frees its cache state within one step). completion_tokens counts
// the tokens consumed up to and including the one that completed the stop.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine_client.h"
#include "recipe/output_fold.h"
#include "server/text_processor.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

// Forced tool call after free reasoning (tool_choice required/named in thinking mode; chat,
// n = 1, one prompt): the first engine request also stops at `after_token` ("</think>"); the
// sequence's parser then takes `text` (the start of the DSML block) as injected context, and a
// second engine request continues over prompt + output so far + text_ids. If the reasoning
// ends any other way (EOS, length), there is no second request.
struct Continuation {
  TokenId after_token = -1;
  std::string text;
  TokenIds text_ids;
};

struct GenerationSpec {
  std::vector<TokenIds> prompts;  // one engine request each
  SamplingParams sampling;        // sampling.n choices per prompt; choice = prompt * n + k
  std::function<std::unique_ptr<TextProcessor>()> make_processor;
  bool skip_special_tokens = true;   // decode without BOS/EOS/pad text
  bool start_in_reasoning = false;   // reasoning tokens are counted until the answer starts
  std::string cache_salt;
  std::optional<Continuation> continuation;
};

struct ChoiceFinish {
  recipe::ParsedOutput parsed;  // the whole folded output; parsed.finish_reason is set
  bool failed = false;          // the engine failed the request or aborted it on its own
  std::string error;            // when failed
};

struct ChoiceUpdate {
  int32_t index = 0;
  std::vector<recipe::OutputEvent> events;  // adjacent deltas merged
  std::vector<TokenLogprob> logprobs;       // the tokens consumed by this update (if asked)
  std::optional<ChoiceFinish> finish;       // on the choice's last update
};

struct GenerationUsage {
  int64_t prompt_tokens = 0;      // all prompts
  int64_t cached_tokens = 0;      // served from the prefix cache (known once done)
  int64_t completion_tokens = 0;  // consumed tokens, up to each choice's stop
  int64_t reasoning_tokens = 0;   // of those, generated before the answer/tool call began
};

class Generation {
 public:
  Generation(EngineClient& engine, const Tokenizer& tokenizer, GenerationSpec spec);
  ~Generation();  // aborts engine requests that have not finished
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Submits every prompt that still needs tokens. On an error nothing stays submitted.
  Status Start(std::function<void()> notifier);
  // Drains the streams; never blocks. Choices that changed, by index.
  std::vector<ChoiceUpdate> Poll();
  // Every engine request reported its last event (usage is final).
  bool done() const;
  // The client went away: aborts every engine request; Poll() is not called again.
  void Abort();

  int32_t num_choices() const { return static_cast<int32_t>(seqs_.size()); }
  const GenerationUsage& usage() const { return usage_; }
  // Engine TTFT of the first request (arrival -> first token), -1 before it is known.
  double engine_ttft_s() const { return engine_ttft_s_; }
  bool any_token() const { return any_token_; }

 private:
  struct Sequence;
  struct EngineRequest;

  void Consume(EngineRequest& request, StreamEvent& event, std::vector<ChoiceUpdate>& out);
  void ConsumeTokens(Sequence& seq, const SequenceDelta& delta, ChoiceUpdate& update);
  void FinishSequence(Sequence& seq, recipe::EngineFinish finish, ChoiceUpdate& update);
  void FailSequence(Sequence& seq, const std::string& error, ChoiceUpdate& update);
  bool ShouldContinue(const Sequence& seq, const SequenceDelta& delta) const;
  void Continue(EngineRequest& request, Sequence& seq, ChoiceUpdate& update);
  ChoiceUpdate& UpdateFor(Sequence& seq, std::vector<ChoiceUpdate>& out);

  EngineClient& engine_;
  const Tokenizer& tokenizer_;
  GenerationSpec spec_;
  std::vector<std::unique_ptr<Sequence>> seqs_;
  std::vector<std::unique_ptr<EngineRequest>> requests_;
  std::vector<ChoiceUpdate> pending_;  // updates produced before the first Poll (prefills)
  std::function<void()> notifier_;
  GenerationUsage usage_;
  double engine_ttft_s_ = -1;
  bool any_token_ = false;
  bool aborted_ = false;
};

}  // namespace deepinfer::server
