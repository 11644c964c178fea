// POST /v1/completions (OpenAI legacy completions): raw prompt text (or token ids, or lists of
// either) -> text. No chat template, no output parser: the text is the decoded tokens with
// special tokens skipped; stop strings end a choice (the stop itself is not returned).
//
// prompt: a string, an array of strings, an array of token ids, or an array of such arrays;
// each prompt gets n choices, numbered prompt * n + k. max_tokens defaults to 16. logprobs k
// returns the legacy object (tokens, token_logprobs, top_logprobs, text_offset). echo
// prepends the prompt text (with logprobs it would need prompt logprobs: refused). suffix
// (fill-in-the-middle) and best_of > n are refused.
#pragma once

#include "base/status.h"
#include "recipe/conversation.h"
#include "server/openai_chat.h"
#include "server/server_context.h"

namespace deepinfer::server {

Result<GenerationPlan> PlanCompletion(recipe::OrderedJson& body, const ServerContext& ctx);

}  // namespace deepinfer::server
