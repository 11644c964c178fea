#include "recipe/anthropic_request.h"

#include <fmt/format.h>

#include "recipe/chat_request.h"
#include "recipe/json_reader.h"
#include "recipe/py_json.h"

namespace deepinfer::recipe {
namespace {

constexpr size_t kMaxStopSequences = 16;

Status Unsupported(const std::string& path, const std::string& type) {
  return InvalidArgument(fmt::format("{}.type: content block type '{}' is not supported", path, type));
}

// An image block: {"source": {"type": "base64", "media_type", "data"} | {"type": "url", "url"}}.
Result<ContentPart> ParseImage(FieldReader& block) {
  ContentPart part;
  part.kind = ContentPart::Kind::kImage;
  part.type_name = "image";
  const OrderedJson* source = block.Object("source");
  if (source == nullptr) {
    block.FailAt("source", "required");
    return block.status();
  }
  FieldReader src(*source, block.Path("source"));
  const std::string type = src.String("type").value_or("");
  if (type == "base64") {
    if (src.Require("media_type") && src.Require("data")) {
      part.image_url = fmt::format("data:{};base64,{}", src.String("media_type").value_or(""),
                                   src.String("data").value_or(""));
    }
  } else if (type == "url") {
    if (src.Require("url")) part.image_url = src.String("url").value_or("");
  } else if (src.ok()) {
    src.FailAt("type", fmt::format("image source type '{}' is not supported (base64, url)", type));
  }
  if (!src.ok()) return src.status();
  return part;
}

// tool_result content: a string, or text/image blocks.
Status ParseToolResultContent(FieldReader& block, std::vector<ContentPart>& parts) {
  const OrderedJson* content = block.Get("content");
  if (content == nullptr) return Status::Ok();
  if (content->is_string()) {
    parts.push_back(ContentPart::Text(content->get<std::string>()));
    return Status::Ok();
  }
  if (!content->is_array()) {
    return InvalidArgument(fmt::format("{}: expected a string or an array of blocks, got {}",
                                       block.Path("content"), JsonTypeName(*content)));
  }
  for (size_t k = 0; k < content->size(); ++k) {
    const std::string path = IndexPath(block.Path("content"), k);
    FieldReader item((*content)[k], path);
    const std::string type = item.String("type").value_or("");
    if (!item.ok()) return item.status();
    if (type == "text") {
      parts.push_back(ContentPart::Text(item.String("text").value_or("")));
    } else if (type == "image") {
      Result<ContentPart> image = ParseImage(item);
      if (!image.ok()) return image.status();
      parts.push_back(std::move(image.value()));
    } else {
      ContentPart other;
      other.kind = ContentPart::Kind::kUnsupported;  // rendered "[Unsupported <type>]"
      other.type_name = type;
      parts.push_back(std::move(other));
    }
    if (!item.ok()) return item.status();
  }
  return Status::Ok();
}

// A user turn: tool results become tool messages first, the other blocks one user message.
Status ParseUserBlocks(const OrderedJson& content, const std::string& path,
                       std::vector<Message>& out) {
  Message user;
  user.role = Role::kUser;
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string block_path = IndexPath(path, k);
    FieldReader block(content[k], block_path);
    const std::string type = block.String("type").value_or("");
    if (!block.ok()) return block.status();
    if (type == "text") {
      if (!block.Require("text")) return block.status();
      user.parts.push_back(ContentPart::Text(block.String("text").value_or("")));
    } else if (type == "image") {
      Result<ContentPart> image = ParseImage(block);
      if (!image.ok()) return image.status();
      user.parts.push_back(std::move(image.value()));
    } else if (type == "tool_result") {
      Message tool;
      tool.role = Role::kTool;
      if (block.Require("tool_use_id")) tool.tool_call_id = block.String("tool_use_id").value_or("");
      block.Merge(ParseToolResultContent(block, tool.parts));
      if (!block.ok()) return block.status();
      out.push_back(std::move(tool));
    } else {
      return Unsupported(block_path, type);
    }
  }
  if (!user.parts.empty()) out.push_back(std::move(user));
  return Status::Ok();
}

Status ParseAssistantBlocks(const OrderedJson& content, const std::string& path, Message& msg) {
  bool has_text = false;
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string block_path = IndexPath(path, k);
    FieldReader block(content[k], block_path);
    const std::string type = block.String("type").value_or("");
    if (!block.ok()) return block.status();
    if (type == "text") {
      if (has_text) msg.content += "\n\n";
      msg.content += block.String("text").value_or("");
      has_text = true;
    } else if (type == "thinking") {
      msg.reasoning_content = msg.reasoning_content.value_or("") +
                              block.String("thinking").value_or("");
    } else if (type == "redacted_thinking") {
      continue;
    } else if (type == "tool_use") {
      ToolCall call;
      if (block.Require("id")) call.id = block.String("id").value_or("");
      if (block.Require("name")) call.name = block.String("name").value_or("");
      const OrderedJson* input = block.Get("input");
      if (input != nullptr && !input->is_object()) {
        block.FailAt("input", fmt::format("expected an object, got {}", JsonTypeName(*input)));
      }
      call.arguments = input == nullptr ? "{}" : PyJsonDumps(*input);
      msg.tool_calls.push_back(std::move(call));
    } else {
      return Unsupported(block_path, type);
    }
    if (!block.ok()) return block.status();
  }
  return Status::Ok();
}

Status ParseMessageList(const OrderedJson& messages, std::vector<Message>& out) {
  if (!messages.is_array()) {
    return InvalidArgument(fmt::format("messages: expected an array, got {}", JsonTypeName(messages)));
  }
  if (messages.empty()) return InvalidArgument("messages: must not be empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string path = IndexPath("messages", i);
    FieldReader msg(messages[i], path);
    if (!msg.ok() || !msg.Require("role") || !msg.Require("content")) return msg.status();
    const std::string role = msg.String("role").value_or("");
    const OrderedJson& content = *msg.Get("content");
    if (!msg.ok()) return msg.status();
    if (!content.is_string() && !content.is_array()) {
      return InvalidArgument(fmt::format("{}.content: expected a string or an array of blocks, "
                                         "got {}", path, JsonTypeName(content)));
    }
    Status status;
    if (role == "user") {
      if (content.is_string()) {
        Message user;
        user.role = Role::kUser;
        user.parts.push_back(ContentPart::Text(content.get<std::string>()));
        out.push_back(std::move(user));
      } else {
        status = ParseUserBlocks(content, msg.Path("content"), out);
      }
    } else if (role == "assistant") {
      Message assistant;
      assistant.role = Role::kAssistant;
      if (content.is_string()) assistant.content = content.get<std::string>();
      else status = ParseAssistantBlocks(content, msg.Path("content"), assistant);
      assistant.prefix = i + 1 == messages.size();  // Anthropic prefill
      out.push_back(std::move(assistant));
    } else {
      return InvalidArgument(fmt::format("{}.role: expected 'user' or 'assistant', got '{}'", path, role));
    }
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

Status ParseSystem(FieldReader& body, std::vector<Message>& out) {
  const OrderedJson* system = body.Get("system");
  if (system == nullptr) return Status::Ok();
  Message msg;
  msg.role = Role::kSystem;
  if (system->is_string()) {
    msg.content = system->get<std::string>();
  } else if (system->is_array()) {
    for (size_t k = 0; k < system->size(); ++k) {
      FieldReader block((*system)[k], IndexPath("system", k));
      const std::string type = block.String("type").value_or("");
      if (block.ok() && type != "text") block.FailAt("type", "only text blocks are allowed");
      if (k > 0) msg.content += "\n\n";
      msg.content += block.String("text").value_or("");
      if (!block.ok()) return block.status();
    }
  } else {
    return InvalidArgument(fmt::format("system: expected a string or text blocks, got {}",
                                       JsonTypeName(*system)));
  }
  out.push_back(std::move(msg));
  return Status::Ok();
}

Status ParseTools(FieldReader& body, ChatRequest& request) {
  const OrderedJson* tools = body.Array("tools");
  if (tools == nullptr) return body.status();
  for (size_t k = 0; k < tools->size(); ++k) {
    FieldReader tool((*tools)[k], IndexPath("tools", k));
    if (auto type = tool.String("type"); type && *type != "custom") {
      tool.FailAt("type", fmt::format("server tool '{}' is not supported", *type));
    }
    OrderedJson function = OrderedJson::object();
    if (tool.Require("name")) function["name"] = tool.String("name").value_or("");
    if (auto description = tool.String("description")) function["description"] = *description;
    if (const OrderedJson* schema = tool.Object("input_schema")) function["parameters"] = *schema;
    else tool.FailAt("input_schema", "required (a JSON Schema object)");
    if (!tool.ok()) return tool.status();
    request.tools.push_back(std::move(function));
  }
  return Status::Ok();
}

Status ParseChoiceAndThinking(FieldReader& body, ChatRequest& request) {
  if (const OrderedJson* choice = body.Object("tool_choice")) {
    FieldReader reader(*choice, "tool_choice");
    const std::string type = reader.String("type").value_or("");
    if (type == "auto" || type == "any") {
      request.tool_choice.kind = ToolChoiceKind::kAuto;
    } else if (type == "none") {
      request.tool_choice.kind = ToolChoiceKind::kNone;
    } else if (type == "tool") {
      request.tool_choice.kind = ToolChoiceKind::kNamed;
      if (reader.Require("name")) request.tool_choice.name = reader.String("name").value_or("");
    } else if (reader.ok()) {
      reader.FailAt("type", fmt::format("expected auto, any, tool or none, got '{}'", type));
    }
    if (!reader.ok()) return reader.status();
  }
  if (const OrderedJson* thinking = body.Object("thinking")) {
    FieldReader reader(*thinking, "thinking");
    const std::string type = reader.String("type").value_or("");
    if (type == "enabled" || type == "adaptive") request.thinking = true;
    else if (type == "disabled") request.thinking = false;
    else if (reader.ok()) reader.FailAt("type", fmt::format("expected enabled or disabled, got '{}'", type));
    reader.Int("budget_tokens", 0, INT64_MAX);  // accepted, ignored (as DeepSeek does)
    if (!reader.ok()) return reader.status();
  }
  if (const OrderedJson* config = body.Object("output_config")) {
    FieldReader reader(*config, "output_config");
    request.reasoning_effort = reader.String("effort");
    if (!reader.ok()) return reader.status();
  }
  return body.status();
}

Status ParseStopAndSampling(FieldReader& body, ChatRequest& request) {
  if (const OrderedJson* stop = body.Array("stop_sequences")) {
    if (stop->size() > kMaxStopSequences) {
      return InvalidArgument(fmt::format("stop_sequences: at most {} strings", kMaxStopSequences));
    }
    for (size_t k = 0; k < stop->size(); ++k) {
      if (!(*stop)[k].is_string()) {
        return InvalidArgument(fmt::format("stop_sequences[{}]: expected a string", k));
      }
      if (!(*stop)[k].get<std::string>().empty()) request.stop.push_back((*stop)[k].get<std::string>());
    }
  }
  request.model = body.String("model").value_or("");
  if (body.Require("max_tokens")) request.max_tokens = body.Int("max_tokens", 1, INT64_MAX);
  request.temperature = body.Number("temperature", 0.0, 2.0);
  request.top_p = body.Number("top_p", 0.0, 1.0);
  request.top_k = body.Int("top_k", 0, INT64_MAX);
  request.stream = body.Bool("stream").value_or(false);
  if (const OrderedJson* metadata = body.Object("metadata")) {
    FieldReader reader(*metadata, "metadata");
    request.user = reader.String("user_id").value_or("");
    body.Merge(reader.status());
  }
  return body.status();
}

}  // namespace

Result<ChatRequest> ParseAnthropicRequestJson(const OrderedJson& body_json) {
  FieldReader body(body_json, "");
  if (!body.ok()) return body.status();
  ChatRequest request;
  Status status = ParseSystem(body, request.messages);
  if (status.ok() && body.Require("messages")) {
    status = ParseMessageList(*body.Get("messages"), request.messages);
  }
  if (status.ok()) status = body.status();
  if (status.ok()) status = ParseTools(body, request);
  if (status.ok()) status = ParseChoiceAndThinking(body, request);
  if (status.ok()) status = ParseStopAndSampling(body, request);
  if (!status.ok()) return status;
  if (request.tool_choice.kind == ToolChoiceKind::kNamed) {
    bool known = false;
    for (const auto& tool : request.tools) known = known || tool.value("name", "") == request.tool_choice.name;
    if (!known) {
      return InvalidArgument(fmt::format("tool_choice.name: '{}' is not one of the request's tools",
                                         request.tool_choice.name));
    }
  }
  return request;
}

Result<ChatRequest> ParseAnthropicRequest(std::string_view body_text) {
  Result<OrderedJson> body = ParseJsonText(body_text);
  if (!body.ok()) return body.status();
  return ParseAnthropicRequestJson(body.value());
}

}  // namespace deepinfer::recipe
