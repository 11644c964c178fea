// OpenAI / DeepSeek chat-completions request bodies -> ChatRequest.
//
// Errors are InvalidArgument statuses whose message names the field ("messages[1].content:
// ..."); the server returns them as HTTP 400 bodies unchanged.
#pragma once

#include <string_view>
#include <vector>

#include "base/status.h"
#include "recipe/conversation.h"

namespace deepinfer::recipe {

// Which message fields are honoured.
enum class MessageDialect {
  // API traffic: roles system/developer/user/assistant/tool; assistant "prefix" (DeepSeek chat
  // prefix completion); "reasoning" accepted as an alias of "reasoning_content". Internal
  // fields (task, wo_eos, per-message tools) are ignored.
  kApi,
  // The reference encoder's own message dicts (its golden test inputs): additionally the
  // latest_reminder role and per-message tools, response_format, task and wo_eos.
  kReference,
};

// A chat-completions body: JSON text, or already parsed JSON.
Result<ChatRequest> ParseChatRequestJson(const OrderedJson& body);
Result<ChatRequest> ParseChatRequest(std::string_view body_text);

// A "messages" array; `path` prefixes error messages (normally "messages").
Result<std::vector<Message>> ParseMessages(const OrderedJson& messages, MessageDialect dialect,
                                           std::string_view path);

// A reference encoder test input: a message list, or {"tools": [...], "messages": [...]} whose
// tools are attached to the first message (as the reference's test harness does).
Result<std::vector<Message>> ParseReferenceCase(const OrderedJson& input);

// Parses JSON text keeping object key order; a syntax error is an InvalidArgument naming the
// byte offset.
Result<OrderedJson> ParseJsonText(std::string_view text);

// A tools array entry: {"type": "function", "function": {...}} -> the function object.
Result<OrderedJson> ParseFunctionTool(const OrderedJson& tool, std::string_view path);

}  // namespace deepinfer::recipe
