#include "recipe/request_encoding.h"

#include "recipe/chat_encoder.h"

namespace deepinfer::recipe {
namespace {

// The message that hosts request-level tools and response format: messages[0] when it is a
// system or developer message, else a new empty system message inserted before it.
Message& HeadMessage(std::vector<Message>& messages) {
  if (messages.empty() ||
      (messages.front().role != Role::kSystem && messages.front().role != Role::kDeveloper)) {
    Message system;
    system.role = Role::kSystem;
    messages.insert(messages.begin(), std::move(system));
  }
  return messages.front();
}

}  // namespace

Result<EncodedChat> EncodeChatRequest(const ChatRequest& request, const EncodingRules& rules) {
  EncodedChat out;
  const bool effort_none = request.reasoning_effort == "none";
  out.thinking = effort_none ? false : request.thinking.value_or(rules.default_thinking);

  RenderOptions options;
  options.thinking = out.thinking;
  if (!effort_none && (out.thinking || request.reasoning_effort.has_value())) {
    Result<ResolvedEffort> effort = ResolveApiEffort(rules, request.reasoning_effort);
    if (!effort.ok()) return effort.status();
    if (out.thinking) {
      out.effort = effort.value().level;
      options.effort_prefix = effort.value().prefix;
    }
  }

  std::vector<Message> messages = request.messages;
  const bool use_tools =
      !request.tools.empty() && request.tool_choice.kind != ToolChoiceKind::kNone;
  const size_t num_messages = messages.size();
  if (use_tools) HeadMessage(messages).tools = request.tools;
  if (request.response_format.kind == ResponseFormatKind::kJsonSchema) {
    HeadMessage(messages).response_format = request.response_format.schema;
  }
  if (messages.size() != num_messages) options.message_index_offset = -1;

  Result<RenderedPrompt> rendered = RenderConversation(messages, options, rules);
  if (!rendered.ok()) return rendered.status();
  out.prompt = std::move(rendered.value().text);
  out.image_urls = std::move(rendered.value().image_urls);

  StartFromPrompt(out.prompt, out.parser);
  out.parser.parse_tool_calls = use_tools;
  out.parser.json_mode = request.response_format.kind != ResponseFormatKind::kText;
  out.parser.stop = request.stop;
  return out;
}

}  // namespace deepinfer::recipe
