// A parsed chat request (either protocol, recipe::ChatRequest) -> prompt tokens, sampling
// parameters and the output parser's configuration: what both /v1/chat/completions and
// /v1/messages run.
//
// Policies (docs/server.md):
//   * max_tokens unset: the rest of the context (max_model_len - prompt tokens). A prompt that
//     fills the context, or prompt + max_tokens over it, is a 400 (context_length_exceeded).
//   * Forced tool choice ("required", a named function / Anthropic {"type":"tool"}) is done by
//     prefill, without a grammar: the start of the DSML tool-call block (and the invoke of the
//     named function) is put after the model's reasoning. In thinking mode (n = 1) the model
//     first reasons freely until it writes "</think>", then the block is appended and
//     generation continues (generation.h, Continuation); otherwise the block ends the prompt.
//     The model continues inside the call; the parser returns it as a tool call.
//   * Prefill (a final assistant message with prefix, or Anthropic's final assistant
//     message): see ChatTextProcessor.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "recipe/conversation.h"
#include "server/api_error.h"
#include "server/generation.h"
#include "server/server_context.h"

namespace deepinfer::server {

struct PreparedChat {
  GenerationSpec spec;
  bool stream = false;
  bool include_usage = false;
  bool thinking = false;
  int32_t top_logprobs = -1;  // -1: no logprobs
  std::string model;          // the name to report
};

// `body` is the request JSON (for the fields the recipe's ChatRequest does not carry).
Result<PreparedChat> PrepareChat(const recipe::ChatRequest& request, const recipe::OrderedJson& body,
                                 const ServerContext& ctx, ApiKind api);

// The rendered prompt's token ids, or the context-length error.
Result<TokenIds> EncodePrompt(const std::string& text, const ServerContext& ctx);

// max_tokens for a prompt of `prompt_len` tokens (see the policy above).
Result<int32_t> ResolveMaxTokens(std::optional<int64_t> requested, int64_t prompt_len,
                                 const ServerContext& ctx);

}  // namespace deepinfer::server
