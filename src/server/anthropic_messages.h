// POST /v1/messages (Anthropic Messages, as DeepSeek's Anthropic-compatible API takes it) and
// POST /v1/messages/count_tokens.
//
// Stream (api-and-encoding.md §5): event: message_start (usage.input_tokens = prompt tokens),
// ping, then per content block content_block_start / content_block_delta... /
// content_block_stop, with blocks in output order (thinking -> thinking_delta and one
// signature_delta before its stop; text -> text_delta; tool_use -> input_json_delta), one
// block open at a time, indices dense; then message_delta (stop_reason, stop_sequence, usage
// with output_tokens and the final input split: input_tokens = cache-miss tokens,
// cache_read_input_tokens = cache-hit tokens) and message_stop.
// Non-stream: the message those events assemble to (built by the same block machine).
// stop_reason: end_turn, max_tokens, stop_sequence (+ stop_sequence), tool_use.
#pragma once

#include <string>

#include "base/status.h"
#include "recipe/conversation.h"
#include "server/openai_chat.h"
#include "server/server_context.h"

namespace deepinfer::server {

Result<GenerationPlan> PlanMessages(recipe::OrderedJson& body, const ServerContext& ctx);

// {"input_tokens": N} for the prompt the request would render.
Result<std::string> CountMessageTokens(recipe::OrderedJson& body, const ServerContext& ctx);

}  // namespace deepinfer::server
