// Decoded text of one output sequence -> typed events (recipe::OutputEvent), the one event
// vocabulary every API formatter reads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "recipe/output_parser.h"

namespace deepinfer::server {

class TextProcessor {
 public:
  virtual ~TextProcessor() = default;
  // The next piece of decoded text (whole UTF-8 characters).
  virtual std::vector<recipe::OutputEvent> Feed(std::string_view text) = 0;
  // The sequence ended: releases held-back text.
  virtual std::vector<recipe::OutputEvent> Finish() = 0;
  // A stop was found; later text is dropped and generation may be aborted.
  virtual bool stopped() const = 0;
  // Events produced before any generated text (from a prefill); taken once.
  virtual std::vector<recipe::OutputEvent> TakeInitialEvents() { return {}; }
  // Text the server appends to the sequence's context mid-way (a forced tool-call start after
  // the reasoning). Default: parsed like output.
  virtual std::vector<recipe::OutputEvent> Inject(std::string_view text) { return Feed(text); }
};

// Chat output through the recipe's split-safe parser (reasoning, answer, DSML tool calls,
// JSON mode, stop strings on answer text).
//
// Prefill (an assistant prefix the prompt ends with: DeepSeek chat prefix completion or an
// Anthropic final assistant message): `prefill` is the rendered text after the assistant
// header and `options` the parser state at that header. The prefill is fed first, because
// it decides how the output continues (a prefill that opens a DSML block makes the output a
// tool call). Its reasoning and answer text are not repeated in the response (the client sent
// them); tool-call events it produced are, so a tool call the prefill opens is returned whole.
// Those events come from initial_events(); if the prefill alone already ends the output (a
// closed tool block, a stop string), stopped() is true before any token.
class ChatTextProcessor : public TextProcessor {
 public:
  ChatTextProcessor(const recipe::ParserOptions& options, std::string_view prefill);
  std::vector<recipe::OutputEvent> Feed(std::string_view text) override;
  std::vector<recipe::OutputEvent> Finish() override;
  bool stopped() const override { return parser_.stopped(); }
  std::vector<recipe::OutputEvent> TakeInitialEvents() override { return std::move(initial_); }
  // Like the prefill: only tool-call and stop events are reported.
  std::vector<recipe::OutputEvent> Inject(std::string_view text) override;

 private:
  recipe::OutputParser parser_;
  std::vector<recipe::OutputEvent> initial_;
  bool finished_ = false;  // Finish() already ran (the prefill ended the output)
};

// Plain text (/v1/completions): everything is answer text; the earliest stop string ends it
// (text before it is emitted, the stop itself never). Text that may still begin a stop string
// is held back until it resolves.
class StopStringProcessor : public TextProcessor {
 public:
  explicit StopStringProcessor(std::vector<std::string> stop);
  std::vector<recipe::OutputEvent> Feed(std::string_view text) override;
  std::vector<recipe::OutputEvent> Finish() override;
  bool stopped() const override { return stopped_; }

 private:
  std::vector<std::string> stop_;
  std::string pending_;
  bool stopped_ = false;
};

// Splits a rendered chat prompt that ends with an assistant prefill into the parser state at
// the assistant header and the prefill text after it. Without a prefill, `prefill` is empty
// and `options` is set from the whole prompt (recipe::StartFromPrompt).
void SplitPrefill(std::string_view prompt, bool has_prefill, recipe::ParserOptions& options,
                  std::string& prefill);

}  // namespace deepinfer::server
