#include "recipe/chat_encoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "recipe/py_json.h"

namespace deepinfer::recipe {
namespace {

// The reference TOOLS_TEMPLATE (a fact, byte-exact), with the DSML tag names as fields.
constexpr const char* kToolsTemplate = R"(## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "<｜DSML｜{calls}>" block like the following:

<｜DSML｜{calls}>
<｜DSML｜{invoke} name="$TOOL_NAME">
<｜DSML｜{parameter} name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜{parameter}>
...
</｜DSML｜{invoke}>
<｜DSML｜{invoke} name="$TOOL_NAME2">
...
</｜DSML｜{invoke}>
</｜DSML｜{calls}>

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.

Otherwise, output directly after </think> with tool calls or final response.

### Available Tool Schemas

{schemas}

You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.
)";

constexpr const char* kResponseFormatHeader =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// Quick-instruction task tokens of the V4 reference (internal classification tasks).
const std::map<std::string, std::string>& TaskTokens() {
  static const std::map<std::string, std::string> tokens = {
      {"action", "<｜action｜>"}, {"query", "<｜query｜>"},   {"authority", "<｜authority｜>"},
      {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"},   {"read_url", "<｜read_url｜>"},
  };
  return tokens;
}

// A message after preprocessing, with the index of the request message it came from.
struct Entry {
  Message msg;
  size_t source = 0;
};

// Error for request message `source` (before any offset).
Status Invalid(size_t source, std::string_view what) {
  return InvalidArgument(fmt::format("messages[{}]: {}", source, what));
}

// Applies RenderOptions::message_index_offset to the "messages[i]" of an error.
Status Reindex(const Status& status, int offset) {
  if (status.ok() || offset == 0) return status;
  const std::string& m = status.message();
  const std::string prefix = "messages[";
  if (!m.starts_with(prefix)) return status;
  const size_t close = m.find(']');
  const long index = std::stol(m.substr(prefix.size(), close - prefix.size())) + offset;
  return InvalidArgument(fmt::format("messages[{}{}", std::max(index, 0L), m.substr(close)));
}

// Rule 1: tool messages -> tool_result blocks of user turns; user messages merge.
std::vector<Entry> MergeToolMessages(const std::vector<Message>& messages) {
  std::vector<Entry> merged;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& msg = messages[i];
    const bool after_user = !merged.empty() && merged.back().msg.role == Role::kUser;
    if (msg.role == Role::kTool) {
      ContentPart block;
      block.kind = ContentPart::Kind::kToolResult;
      block.type_name = "tool_result";
      block.tool_use_id = msg.tool_call_id;
      block.result = msg.parts;
      if (after_user) {
        merged.back().msg.parts.push_back(std::move(block));
      } else {
        Entry entry{Message{}, i};
        entry.msg.role = Role::kUser;
        entry.msg.parts.push_back(std::move(block));
        merged.push_back(std::move(entry));
      }
    } else if (msg.role == Role::kUser && after_user && merged.back().msg.task.empty()) {
      auto& parts = merged.back().msg.parts;
      parts.insert(parts.end(), msg.parts.begin(), msg.parts.end());
    } else {
      merged.push_back(Entry{msg, i});
    }
  }
  return merged;
}

// Rule 2: tool results follow the call order of the latest assistant tool_calls.
void SortToolResultsByCallOrder(std::vector<Entry>& entries) {
  std::map<std::string, size_t> call_order;
  for (auto& entry : entries) {
    Message& msg = entry.msg;
    if (msg.role == Role::kAssistant && !msg.tool_calls.empty()) {
      call_order.clear();
      for (size_t k = 0; k < msg.tool_calls.size(); ++k) {
        if (!msg.tool_calls[k].id.empty()) call_order[msg.tool_calls[k].id] = k;
      }
      continue;
    }
    if (msg.role != Role::kUser || call_order.empty()) continue;
    std::vector<ContentPart> results;
    for (const auto& part : msg.parts) {
      if (part.kind == ContentPart::Kind::kToolResult) results.push_back(part);
    }
    if (results.size() < 2) continue;
    auto rank = [&](const ContentPart& part) {
      auto it = call_order.find(part.tool_use_id);
      return it == call_order.end() ? size_t{0} : it->second;
    };
    std::stable_sort(results.begin(), results.end(),
                     [&](const ContentPart& a, const ContentPart& b) { return rank(a) < rank(b); });
    size_t next = 0;
    for (auto& part : msg.parts) {
      if (part.kind == ContentPart::Kind::kToolResult) part = results[next++];
    }
  }
}

bool CountsAsUser(const std::vector<Entry>& entries, size_t index, const EncodingRules& rules) {
  const Role role = entries[index].msg.role;
  return role == Role::kUser || role == Role::kDeveloper ||
         (rules.system_token && role == Role::kSystem && index > 0);
}

// Index of the last user/developer turn (V4.1: also a system turn after index 0); -1 if none.
long LastUserIndex(const std::vector<Entry>& entries, const EncodingRules& rules) {
  for (size_t i = entries.size(); i-- > 0;) {
    if (CountsAsUser(entries, i, rules)) return static_cast<long>(i);
  }
  return -1;
}

// Rule 3: before the last user turn, assistants lose reasoning and developers are dropped.
std::vector<Entry> DropEarlierThinking(std::vector<Entry> entries, const EncodingRules& rules) {
  const long last_user = LastUserIndex(entries, rules);
  std::vector<Entry> kept;
  for (size_t i = 0; i < entries.size(); ++i) {
    Entry& entry = entries[i];
    const Role role = entry.msg.role;
    const bool always_kept = role == Role::kUser || role == Role::kSystem ||
                             role == Role::kTool || role == Role::kLatestReminder;
    if (always_kept || static_cast<long>(i) >= last_user) {
      kept.push_back(std::move(entry));
    } else if (role == Role::kAssistant) {
      entry.msg.reasoning_content.reset();
      kept.push_back(std::move(entry));
    }
  }
  return kept;
}

class Renderer {
 public:
  Renderer(const std::vector<Entry>& entries, const RenderOptions& options,
           const EncodingRules& rules, bool drop_thinking)
      : entries_(entries),
        options_(options),
        rules_(rules),
        drop_thinking_(drop_thinking),
        last_user_(LastUserIndex(entries, rules)) {}

  Status Render(RenderedPrompt& out) {
    for (size_t i = 0; i < entries_.size(); ++i) {
      Status status = RenderMessage(i, out);
      if (!status.ok()) return status;
    }
    return Status::Ok();
  }

 private:
  Status RenderMessage(size_t i, RenderedPrompt& out);
  Status RenderUserParts(const Entry& entry, RenderedPrompt& out);
  void AppendResultPart(const ContentPart& part, RenderedPrompt& out);
  Status RenderAssistant(size_t i, RenderedPrompt& out);
  Status AppendTransition(size_t i, RenderedPrompt& out);
  void AppendToolsAndFormat(const Message& msg, std::string& out) const;

  const std::vector<Entry>& entries_;
  const RenderOptions& options_;
  const EncodingRules& rules_;
  const bool drop_thinking_;
  const long last_user_;
};

void Renderer::AppendToolsAndFormat(const Message& msg, std::string& out) const {
  if (!msg.tools.empty()) {
    out += "\n\n";
    out += RenderToolsSection(msg.tools, rules_);
  }
  if (msg.response_format.has_value()) {
    out += "\n\n";
    out += kResponseFormatHeader;
    out += PyJsonDumps(*msg.response_format);
  }
}

void Renderer::AppendResultPart(const ContentPart& part, RenderedPrompt& out) {
  if (part.kind == ContentPart::Kind::kText) {
    out.text += part.text;
  } else if (part.kind == ContentPart::Kind::kImage && !rules_.image_placeholder.empty()) {
    out.text += rules_.image_placeholder;
    out.image_urls.push_back(part.image_url);
  } else {
    out.text += fmt::format("[Unsupported {}]", part.type_name);
  }
}

Status Renderer::RenderUserParts(const Entry& entry, RenderedPrompt& out) {
  bool first = true;
  for (const auto& part : entry.msg.parts) {
    if (!first) out.text += "\n\n";
    first = false;
    switch (part.kind) {
      case ContentPart::Kind::kText: out.text += part.text; break;
      case ContentPart::Kind::kImage:
        if (rules_.image_placeholder.empty()) {
          return Invalid(entry.source, fmt::format("image input is not supported by this model "
                                                   "(chat encoding {})", rules_.name));
        }
        out.text += rules_.image_placeholder;
        out.image_urls.push_back(part.image_url);
        break;
      case ContentPart::Kind::kToolResult: {
        out.text += "<tool_result>";
        bool first_result = true;
        for (const auto& result : part.result) {
          if (!first_result) out.text += "\n\n";
          first_result = false;
          AppendResultPart(result, out);
        }
        out.text += "</tool_result>";
        break;
      }
      case ContentPart::Kind::kUnsupported:
        out.text += fmt::format("[Unsupported {}]", part.type_name);
        break;
    }
  }
  return Status::Ok();
}

Status Renderer::RenderAssistant(size_t i, RenderedPrompt& out) {
  const Message& msg = entries_[i].msg;
  std::string tool_part;
  if (!msg.tool_calls.empty()) {
    Result<std::string> block = RenderToolCalls(msg.tool_calls, rules_);
    if (!block.ok()) return Invalid(entries_[i].source, block.status().message());
    tool_part = "\n\n" + block.value();
  }
  const bool prev_has_task = i > 0 && !entries_[i - 1].msg.task.empty();
  if (options_.thinking && !prev_has_task &&
      (!drop_thinking_ || static_cast<long>(i) > last_user_)) {
    out.text += msg.reasoning_content.value_or("");
    // A final prefix with reasoning but nothing after it keeps the reasoning open, so the model
    // continues thinking (our extension; the reference always closes it).
    const bool open_reasoning = msg.prefix && i + 1 == entries_.size() && msg.content.empty() &&
                                msg.tool_calls.empty() && msg.reasoning_content.has_value();
    if (!open_reasoning) out.text += kThinkEnd;
  }
  out.text += msg.content;
  out.text += tool_part;
  if (!msg.prefix) out.text += kEos;
  return Status::Ok();
}

Status Renderer::AppendTransition(size_t i, RenderedPrompt& out) {
  if (i + 1 < entries_.size()) {
    const Role next = entries_[i + 1].msg.role;
    if (next != Role::kAssistant && next != Role::kLatestReminder) return Status::Ok();
  }
  const Message& msg = entries_[i].msg;
  if (!msg.task.empty()) {
    auto it = TaskTokens().find(msg.task);
    if (it == TaskTokens().end()) {
      return Invalid(entries_[i].source, fmt::format("unknown task '{}'", msg.task));
    }
    if (msg.task == "action") {
      out.text += kAssistantToken;
      out.text += options_.thinking ? kThinkStart : kThinkEnd;
    }
    out.text += it->second;
    return Status::Ok();
  }
  if (!CountsAsUser(entries_, i, rules_)) return Status::Ok();
  out.text += kAssistantToken;
  const bool open_thinking =
      options_.thinking && (!drop_thinking_ || static_cast<long>(i) >= last_user_);
  out.text += open_thinking ? kThinkStart : kThinkEnd;
  return Status::Ok();
}

Status Renderer::RenderMessage(size_t i, RenderedPrompt& out) {
  const Entry& entry = entries_[i];
  const Message& msg = entry.msg;
  std::string_view effort;
  if (i == 0 && options_.thinking) effort = options_.effort_prefix;
  if (rules_.system_token && i == 0 && (!effort.empty() || msg.role == Role::kSystem)) {
    out.text += kSystemToken;
  }
  out.text += effort;
  switch (msg.role) {
    case Role::kSystem:
      if (rules_.system_token && i > 0) out.text += kSystemToken;
      out.text += msg.content;
      AppendToolsAndFormat(msg, out.text);
      break;
    case Role::kDeveloper:
      if (msg.content.empty()) return Invalid(entry.source, "a developer message needs content");
      out.text += kUserToken;
      out.text += msg.content;
      AppendToolsAndFormat(msg, out.text);
      break;
    case Role::kUser: {
      out.text += kUserToken;
      Status status = RenderUserParts(entry, out);
      if (!status.ok()) return status;
      break;
    }
    case Role::kLatestReminder:
      out.text += kLatestReminderToken;
      out.text += msg.content;
      break;
    case Role::kAssistant: {
      Status status = RenderAssistant(i, out);
      if (!status.ok()) return status;
      break;
    }
    case Role::kTool:
      return Invalid(entry.source, "internal: tool message survived merging");
  }
  return AppendTransition(i, out);
}

// Refuses user-supplied image placeholders (V4.1/Vision: images must be image parts).
Status CheckNoImagePlaceholder(const std::vector<Message>& messages, const EncodingRules& rules) {
  if (rules.image_placeholder.empty()) return Status::Ok();
  auto contains = [&](const std::string& text) {
    return text.find(rules.image_placeholder) != std::string::npos;
  };
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& msg = messages[i];
    bool bad = contains(msg.content) || contains(msg.reasoning_content.value_or(""));
    for (const auto& part : msg.parts) bad = bad || contains(part.text);
    if (bad) {
      return Invalid(i, fmt::format("text contains the image token {}; send images as image "
                                    "content parts", rules.image_placeholder));
    }
  }
  return Status::Ok();
}

}  // namespace

std::string RenderToolsSection(const std::vector<OrderedJson>& tools, const EncodingRules& rules) {
  std::string schemas;
  for (size_t i = 0; i < tools.size(); ++i) {
    if (i > 0) schemas += '\n';
    schemas += PyJsonDumps(tools[i]);
  }
  return fmt::format(fmt::runtime(kToolsTemplate), fmt::arg("calls", rules.dsml_calls_tag),
                     fmt::arg("invoke", rules.dsml_invoke_tag),
                     fmt::arg("parameter", rules.dsml_parameter_tag), fmt::arg("schemas", schemas));
}

Result<std::string> RenderToolCalls(const std::vector<ToolCall>& calls, const EncodingRules& rules) {
  const std::string dsml_open = fmt::format("<{}", kDsml);
  const std::string dsml_close = fmt::format("</{}", kDsml);
  std::string block = dsml_open + rules.dsml_calls_tag + ">\n";
  for (size_t k = 0; k < calls.size(); ++k) {
    const ToolCall& call = calls[k];
    OrderedJson args = OrderedJson::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
    if (args.is_discarded()) {
      if (rules.strict_tool_arguments) {
        return InvalidArgument(
            fmt::format("tool_calls[{}].function.arguments: not valid JSON", k));
      }
      args = OrderedJson::object({{"arguments", call.arguments}});
    }
    if (!args.is_object()) {
      return InvalidArgument(
          fmt::format("tool_calls[{}].function.arguments: must be a JSON object", k));
    }
    if (k > 0) block += '\n';
    block += fmt::format("{}{} name=\"{}\">\n", dsml_open, rules.dsml_invoke_tag, call.name);
    bool first = true;
    for (const auto& [key, value] : args.items()) {
      if (!first) block += '\n';
      first = false;
      const bool is_string = value.is_string();
      block += fmt::format("{}{} name=\"{}\" string=\"{}\">", dsml_open, rules.dsml_parameter_tag,
                           key, is_string ? "true" : "false");
      block += is_string ? value.get_ref<const std::string&>() : PyJsonDumps(value);
      block += dsml_close + rules.dsml_parameter_tag + ">";
    }
    block += fmt::format("\n{}{}>", dsml_close, rules.dsml_invoke_tag);
  }
  block += fmt::format("\n{}{}>", dsml_close, rules.dsml_calls_tag);
  return block;
}

Result<RenderedPrompt> RenderConversation(const std::vector<Message>& messages,
                                          const RenderOptions& options,
                                          const EncodingRules& rules) {
  Status checked = CheckNoImagePlaceholder(messages, rules);
  if (!checked.ok()) return Reindex(checked, options.message_index_offset);
  std::vector<Entry> entries = MergeToolMessages(messages);
  SortToolResultsByCallOrder(entries);
  const bool any_tools = std::any_of(entries.begin(), entries.end(),
                                     [](const Entry& e) { return !e.msg.tools.empty(); });
  const bool drop_thinking = options.drop_thinking && !any_tools;
  if (options.thinking && drop_thinking) entries = DropEarlierThinking(std::move(entries), rules);

  RenderedPrompt out;
  if (options.add_bos) out.text += kBos;
  Renderer renderer(entries, options, rules, drop_thinking);
  Status status = renderer.Render(out);
  if (!status.ok()) return Reindex(status, options.message_index_offset);
  return out;
}

}  // namespace deepinfer::recipe
