// Anthropic Messages request bodies (POST /v1/messages, as DeepSeek's Anthropic-compatible API
// takes them) -> ChatRequest.
//
// Mapping:
//   system (string or text blocks, joined "\n\n")     -> a system message at index 0
//   user blocks: text, image (base64 -> data URI, url) -> user content parts;
//                tool_result (content string or text/image blocks; is_error ignored)
//                                                      -> tool messages placed before the
//                                                         user's other blocks
//   assistant blocks: thinking -> reasoning_content; text -> content (joined "\n\n");
//                     tool_use {id, name, input} -> tool_calls (input as JSON text);
//                     redacted_thinking ignored. A final assistant message is a prefill:
//                     the model continues it (no end-of-sentence).
//   tools [{name, description, input_schema}] -> function objects {name, description,
//                                                 parameters}; server tools are refused
//   tool_choice auto / any (handled as auto) / tool {name} / none
//   thinking {type: enabled | adaptive | disabled}, budget_tokens ignored
//   output_config.effort -> reasoning_effort; stop_sequences -> stop
// Blocks DeepSeek does not support (document, search_result, server tool blocks, ...) are 400s.
#pragma once

#include <string_view>

#include "base/status.h"
#include "recipe/conversation.h"

namespace deepinfer::recipe {

Result<ChatRequest> ParseAnthropicRequestJson(const OrderedJson& body);
Result<ChatRequest> ParseAnthropicRequest(std::string_view body_text);

}  // namespace deepinfer::recipe
