// The DeepSeek-V4 / V4.1 chat encoder: a message list -> the exact prompt text, as the
// reference encode_messages() (encoding/encoding_dsv4.py, sglang encoding_dsv41.py) renders it.
//
// Rules, in the reference's order (docs/recipe.md has the long form):
//   1. Tool messages become <tool_result> blocks of a user turn; consecutive tool results and
//      user messages merge into one user turn (not into a user turn that carries a task).
//   2. Within a merged turn, tool results are stably sorted into the call order of the most
//      recent assistant tool_calls (unknown ids sort as position 0).
//   3. If any message carries tools, earlier reasoning is kept. Otherwise, in thinking mode,
//      messages before the last user/developer turn lose their reasoning, and developer turns
//      there are dropped.
//   4. BOS, then each message; the effort text goes before message 0 in thinking mode; a user
//      or developer turn followed by an assistant turn (or ending the list) gets
//      "<｜Assistant｜>" plus "<think>" (thinking, at/after the last user turn) or "</think>".
// Request-level concerns (tools placement, thinking default, effort aliases) live in
// request_encoding.h; this layer is the reference function itself.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "recipe/conversation.h"
#include "recipe/encoding_rules.h"

namespace deepinfer::recipe {

// Special strings of the DeepSeek-V4 family.
inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUserToken = "<｜User｜>";
inline constexpr std::string_view kAssistantToken = "<｜Assistant｜>";
inline constexpr std::string_view kSystemToken = "<｜System｜>";
inline constexpr std::string_view kLatestReminderToken = "<｜latest_reminder｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";

struct RenderOptions {
  bool thinking = true;       // "thinking" vs "chat" mode
  std::string effort_prefix;  // resolved effort text (encoding_rules.h); rendered in thinking mode
  bool drop_thinking = true;  // the reference's drop_thinking argument
  bool add_bos = true;
  // Added to message indices in error messages (-1 when the caller inserted a message at 0).
  int message_index_offset = 0;
};

struct RenderedPrompt {
  std::string text;
  std::vector<std::string> image_urls;  // image parts in prompt order (placeholders in text)
};

// Renders `messages`. Errors (kInvalidArgument, naming messages[i]) for inputs the reference
// rejects: an empty developer message, tool-call arguments the rules refuse, images for a
// model without an image placeholder, an unknown task.
Result<RenderedPrompt> RenderConversation(const std::vector<Message>& messages,
                                          const RenderOptions& options,
                                          const EncodingRules& rules);

// The "## Tools" section for these tool function objects (reference render_tools()).
std::string RenderToolsSection(const std::vector<OrderedJson>& tools, const EncodingRules& rules);

// DSML block for assistant tool calls, without the leading "\n\n" (reference layout).
Result<std::string> RenderToolCalls(const std::vector<ToolCall>& calls, const EncodingRules& rules);

}  // namespace deepinfer::recipe
