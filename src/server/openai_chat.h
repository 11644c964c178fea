// POST /v1/chat/completions (OpenAI / DeepSeek shape, api-and-encoding.md §2, §4).
//
// Stream: data-only SSE chunks, all with one id/created/model; per choice a first chunk with
// {"role":"assistant","content":""} (plus "reasoning_content":"" in thinking mode), then
// reasoning_content / content / tool_calls deltas (id, type and name on a call's first
// fragment, then argument fragments), a chunk with finish_reason, an optional usage chunk
// (stream_options.include_usage: "choices": [] and the usage; earlier chunks carry
// "usage": null), and "data: [DONE]".
// Non-stream: chat.completion with message.content (a string, possibly empty),
// reasoning_content in thinking mode, tool_calls when the model called tools.
#pragma once

#include <memory>

#include "base/status.h"
#include "recipe/conversation.h"
#include "server/generation.h"
#include "server/json_out.h"
#include "server/response_writer.h"
#include "server/server_context.h"

namespace deepinfer::server {

struct GenerationPlan {
  GenerationSpec spec;
  bool stream = false;
  std::unique_ptr<ResponseWriter> writer;
};

// Validates and converts a request body (already parsed JSON; it may be modified).
Result<GenerationPlan> PlanChatCompletion(recipe::OrderedJson& body, const ServerContext& ctx);

// Shared by the OpenAI writers.
Json OpenAIUsageJson(const GenerationUsage& usage);

}  // namespace deepinfer::server
