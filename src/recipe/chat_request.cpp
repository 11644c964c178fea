#include "recipe/chat_request.h"

#include <fmt/format.h>

#include "recipe/json_reader.h"
#include "recipe/py_json.h"

namespace deepinfer::recipe {
namespace {

constexpr size_t kMaxStopStrings = 16;

std::optional<Role> RoleFromName(std::string_view name, MessageDialect dialect) {
  if (name == "system") return Role::kSystem;
  if (name == "user") return Role::kUser;
  if (name == "assistant") return Role::kAssistant;
  if (name == "tool") return Role::kTool;
  if (name == "developer") return Role::kDeveloper;
  if (name == "latest_reminder" && dialect == MessageDialect::kReference) {
    return Role::kLatestReminder;
  }
  return std::nullopt;
}

// One content part of a user message or a tool result.
Status ParsePart(const OrderedJson& item, const std::string& path, bool in_tool_result,
                 std::vector<ContentPart>& parts) {
  FieldReader part(item, path);
  const std::string type = part.String("type").value_or("");
  if (!part.ok()) return part.status();
  ContentPart out;
  out.type_name = type;
  if (type == "text") {
    if (!part.Require("text")) return part.status();
    out.text = part.String("text").value_or("");
  } else if (type == "image_url" || type == "image") {
    out.kind = ContentPart::Kind::kImage;
    const OrderedJson* url = part.Get("image_url");
    if (url != nullptr && url->is_object()) {
      FieldReader url_reader(*url, part.Path("image_url"));
      out.image_url = url_reader.String("url").value_or("");
      part.Merge(url_reader.status());
    } else if (url != nullptr && url->is_string()) {
      out.image_url = url->get<std::string>();
    } else if (type == "image_url") {
      part.FailAt("image_url", "required (an object with a url)");
    }
  } else if (in_tool_result) {
    out.kind = ContentPart::Kind::kUnsupported;  // rendered "[Unsupported <type>]"
  } else if (type.empty()) {
    part.FailAt("type", "required");
  } else {
    part.FailAt("type", fmt::format("content part type '{}' is not supported", type));
  }
  if (!part.ok()) return part.status();
  parts.push_back(std::move(out));
  return Status::Ok();
}

// User / tool content: a string (one text part) or an array of parts.
Status ParseParts(FieldReader& msg, bool in_tool_result, std::vector<ContentPart>& parts) {
  const OrderedJson* content = msg.Get("content");
  if (content == nullptr) return Status::Ok();
  if (content->is_string()) {
    parts.push_back(ContentPart::Text(content->get<std::string>()));
    return Status::Ok();
  }
  if (!content->is_array()) {
    return InvalidArgument(fmt::format("{}: expected a string or an array of content parts, got {}",
                                       msg.Path("content"), JsonTypeName(*content)));
  }
  for (size_t k = 0; k < content->size(); ++k) {
    Status status = ParsePart((*content)[k], IndexPath(msg.Path("content"), k), in_tool_result, parts);
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

// System / developer / assistant / reminder content: a string or text parts joined by "\n\n".
Status ParseTextContent(FieldReader& msg, std::string& text) {
  const OrderedJson* content = msg.Get("content");
  if (content == nullptr) return Status::Ok();
  if (content->is_string()) {
    text = content->get<std::string>();
    return Status::Ok();
  }
  if (!content->is_array()) {
    return InvalidArgument(fmt::format("{}: expected a string or an array of text parts, got {}",
                                       msg.Path("content"), JsonTypeName(*content)));
  }
  for (size_t k = 0; k < content->size(); ++k) {
    FieldReader part((*content)[k], IndexPath(msg.Path("content"), k));
    const std::string type = part.String("type").value_or("");
    if (part.ok() && type != "text") {
      part.FailAt("type", fmt::format("only text parts are allowed here, got '{}'", type));
    }
    if (part.ok()) part.Require("text");
    const std::string piece = part.String("text").value_or("");
    if (!part.ok()) return part.status();
    if (k > 0) text += "\n\n";
    text += piece;
  }
  return Status::Ok();
}

Status ParseToolCalls(FieldReader& msg, Message& out) {
  const OrderedJson* calls = msg.Array("tool_calls");
  if (calls == nullptr) return msg.status();
  for (size_t k = 0; k < calls->size(); ++k) {
    const std::string path = IndexPath(msg.Path("tool_calls"), k);
    FieldReader call((*calls)[k], path);
    ToolCall tool_call;
    tool_call.id = call.String("id").value_or("");
    if (auto type = call.String("type"); type && *type != "function") {
      call.FailAt("type", fmt::format("only 'function' tool calls are supported, got '{}'", *type));
    }
    if (call.Require("function")) {
      FieldReader function(*call.Get("function"), call.Path("function"));
      if (function.Require("name")) tool_call.name = function.String("name").value_or("");
      const OrderedJson* args = function.Get("arguments");
      if (args == nullptr) {
        function.FailAt("arguments", "required (a JSON string)");
      } else if (args->is_string()) {
        tool_call.arguments = args->get<std::string>();
      } else if (args->is_object()) {
        tool_call.arguments = PyJsonDumps(*args);  // some clients send the object itself
      } else {
        function.FailAt("arguments", fmt::format("expected a string, got {}", JsonTypeName(*args)));
      }
      call.Merge(function.status());
    }
    if (!call.ok()) return call.status();
    out.tool_calls.push_back(std::move(tool_call));
  }
  return Status::Ok();
}

// Reference-dialect extras: per-message tools and response_format, task, wo_eos.
Status ParseReferenceFields(FieldReader& msg, Message& out) {
  if (const OrderedJson* tools = msg.Array("tools")) {
    for (size_t k = 0; k < tools->size(); ++k) {
      Result<OrderedJson> function = ParseFunctionTool((*tools)[k], IndexPath(msg.Path("tools"), k));
      if (!function.ok()) return function.status();
      out.tools.push_back(std::move(function.value()));
    }
  }
  if (const OrderedJson* format = msg.Get("response_format")) out.response_format = *format;
  out.task = msg.String("task").value_or("");
  if (msg.Bool("wo_eos").value_or(false)) out.prefix = true;
  return msg.status();
}

Result<Message> ParseMessage(const OrderedJson& item, const std::string& path,
                             MessageDialect dialect) {
  FieldReader msg(item, path);
  if (!msg.ok()) return msg.status();
  if (!msg.Require("role")) return msg.status();
  const std::string role_name = msg.String("role").value_or("");
  if (!msg.ok()) return msg.status();
  const std::optional<Role> role = RoleFromName(role_name, dialect);
  if (!role) {
    return InvalidArgument(fmt::format(
        "{}: unknown role '{}' (expected system, developer, user, assistant or tool)",
        msg.Path("role"), role_name));
  }
  Message out;
  out.role = *role;
  Status status;
  switch (*role) {
    case Role::kUser:
      if (msg.Get("content") == nullptr) msg.FailAt("content", "required for a user message");
      status = ParseParts(msg, /*in_tool_result=*/false, out.parts);
      break;
    case Role::kTool:
      out.tool_call_id = msg.String("tool_call_id").value_or("");
      status = ParseParts(msg, /*in_tool_result=*/true, out.parts);
      break;
    case Role::kAssistant: {
      status = ParseTextContent(msg, out.content);
      auto reasoning = msg.String("reasoning_content");
      if (!reasoning) reasoning = msg.String("reasoning");
      out.reasoning_content = reasoning;
      if (status.ok()) status = ParseToolCalls(msg, out);
      if (dialect == MessageDialect::kApi) out.prefix = msg.Bool("prefix").value_or(false);
      break;
    }
    default: status = ParseTextContent(msg, out.content); break;
  }
  msg.Merge(status);
  if (msg.ok() && dialect == MessageDialect::kReference) msg.Merge(ParseReferenceFields(msg, out));
  if (!msg.ok()) return msg.status();
  return out;
}

Status ParseToolChoice(FieldReader& body, ChatRequest& request) {
  const OrderedJson* choice = body.Get("tool_choice");
  if (choice == nullptr) return Status::Ok();
  if (choice->is_string()) {
    const std::string value = choice->get<std::string>();
    if (value == "auto") request.tool_choice.kind = ToolChoiceKind::kAuto;
    else if (value == "none") request.tool_choice.kind = ToolChoiceKind::kNone;
    else if (value == "required") request.tool_choice.kind = ToolChoiceKind::kRequired;
    else return InvalidArgument(fmt::format("tool_choice: unknown value '{}' (expected none, auto, "
                                            "required or a function object)", value));
    return Status::Ok();
  }
  FieldReader named(*choice, "tool_choice");
  if (named.String("type").value_or("function") != "function") named.FailAt("type", "must be 'function'");
  if (named.Require("function")) {
    FieldReader function(*named.Get("function"), named.Path("function"));
    if (function.Require("name")) request.tool_choice.name = function.String("name").value_or("");
    named.Merge(function.status());
  }
  if (!named.ok()) return named.status();
  request.tool_choice.kind = ToolChoiceKind::kNamed;
  for (const auto& tool : request.tools) {
    if (tool.value("name", "") == request.tool_choice.name) return Status::Ok();
  }
  return InvalidArgument(fmt::format("tool_choice.function.name: '{}' is not one of the request's "
                                     "tools", request.tool_choice.name));
}

Status ParseThinking(FieldReader& body, ChatRequest& request) {
  if (const OrderedJson* kwargs = body.Object("chat_template_kwargs")) {
    FieldReader reader(*kwargs, "chat_template_kwargs");
    if (auto on = reader.Bool("thinking")) request.thinking = on;
    if (auto on = reader.Bool("enable_thinking")) request.thinking = on;
    if (!reader.ok()) return reader.status();
  }
  if (auto on = body.Bool("enable_thinking")) request.thinking = on;
  if (const OrderedJson* thinking = body.Get("thinking")) {
    if (thinking->is_boolean()) {
      request.thinking = thinking->get<bool>();
      return Status::Ok();
    }
    FieldReader reader(*thinking, "thinking");
    const std::string type = reader.String("type").value_or("");
    if (!reader.ok()) return reader.status();
    if (type == "enabled") request.thinking = true;
    else if (type == "disabled") request.thinking = false;
    else return InvalidArgument(fmt::format("thinking.type: expected 'enabled' or 'disabled', got '{}'", type));
  }
  if (const OrderedJson* effort = body.Get("reasoning_effort")) {
    if (effort->is_string()) request.reasoning_effort = effort->get<std::string>();
    else if (effort->is_number_integer()) request.reasoning_effort = std::to_string(effort->get<int64_t>());
    else return InvalidArgument(fmt::format("reasoning_effort: expected a string or an integer, "
                                            "got {}", JsonTypeName(*effort)));
  }
  return body.status();
}

Status ParseResponseFormat(FieldReader& body, ChatRequest& request) {
  const OrderedJson* format = body.Object("response_format");
  if (format == nullptr) return body.status();
  FieldReader reader(*format, "response_format");
  const std::string type = reader.String("type").value_or("text");
  if (type == "text") {
    request.response_format.kind = ResponseFormatKind::kText;
  } else if (type == "json_object") {
    request.response_format.kind = ResponseFormatKind::kJsonObject;
  } else if (type == "json_schema") {
    request.response_format.kind = ResponseFormatKind::kJsonSchema;
    if (reader.Require("json_schema")) {
      FieldReader schema(*reader.Get("json_schema"), reader.Path("json_schema"));
      request.response_format.name = schema.String("name").value_or("");
      if (const OrderedJson* value = schema.Object("schema")) request.response_format.schema = *value;
      else schema.FailAt("schema", "required (a JSON Schema object)");
      reader.Merge(schema.status());
    }
  } else if (reader.ok()) {
    reader.FailAt("type", fmt::format("expected text, json_object or json_schema, got '{}'", type));
  }
  return reader.status();
}

Status ParseStop(FieldReader& body, ChatRequest& request) {
  const OrderedJson* stop = body.Get("stop");
  if (stop == nullptr) return Status::Ok();
  if (stop->is_string()) {
    if (!stop->get<std::string>().empty()) request.stop.push_back(stop->get<std::string>());
    return Status::Ok();
  }
  if (!stop->is_array()) {
    return InvalidArgument(fmt::format("stop: expected a string or an array of strings, got {}",
                                       JsonTypeName(*stop)));
  }
  if (stop->size() > kMaxStopStrings) {
    return InvalidArgument(fmt::format("stop: at most {} strings", kMaxStopStrings));
  }
  for (size_t k = 0; k < stop->size(); ++k) {
    if (!(*stop)[k].is_string()) {
      return InvalidArgument(fmt::format("stop[{}]: expected a string, got {}", k,
                                         JsonTypeName((*stop)[k])));
    }
    if (!(*stop)[k].get<std::string>().empty()) request.stop.push_back((*stop)[k].get<std::string>());
  }
  return Status::Ok();
}

void ParseSampling(FieldReader& body, ChatRequest& request) {
  request.model = body.String("model").value_or("");
  request.max_tokens = body.Int("max_tokens", 1, INT64_MAX);
  if (auto n = body.Int("max_completion_tokens", 1, INT64_MAX)) request.max_tokens = n;
  request.temperature = body.Number("temperature", 0.0, 2.0);
  request.top_p = body.Number("top_p", 0.0, 1.0);
  request.top_k = body.Int("top_k", -1, INT64_MAX);
  request.presence_penalty = body.Number("presence_penalty", -2.0, 2.0);
  request.frequency_penalty = body.Number("frequency_penalty", -2.0, 2.0);
  request.seed = body.Int("seed", INT64_MIN, INT64_MAX);
  request.stream = body.Bool("stream").value_or(false);
  if (const OrderedJson* options = body.Object("stream_options")) {
    FieldReader reader(*options, "stream_options");
    request.include_usage = reader.Bool("include_usage").value_or(false);
    body.Merge(reader.status());
  }
  if (auto n = body.Int("n", 1, INT64_MAX); n && *n != 1) body.FailAt("n", "only n=1 is supported");
  request.logprobs = body.Bool("logprobs").value_or(false);
  request.top_logprobs = body.Int("top_logprobs", 0, 20);
  request.user = body.String("user").value_or(body.String("user_id").value_or(""));
}

}  // namespace

Result<OrderedJson> ParseJsonText(std::string_view text) {
  try {
    return OrderedJson::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return InvalidArgument(fmt::format("request body is not valid JSON (byte {})", e.byte));
  } catch (const nlohmann::json::exception& e) {  // e.g. a number too large for a double
    return InvalidArgument("request body is not valid JSON (a number is out of range)");
  }
}

Result<OrderedJson> ParseFunctionTool(const OrderedJson& tool, std::string_view path) {
  FieldReader reader(tool, std::string(path));
  if (auto type = reader.String("type"); type && *type != "function") {
    reader.FailAt("type", fmt::format("only 'function' tools are supported, got '{}'", *type));
  }
  const OrderedJson* function = reader.ok() ? reader.Object("function") : nullptr;
  if (reader.ok() && function == nullptr) reader.FailAt("function", "required");
  if (!reader.ok()) return reader.status();
  FieldReader fields(*function, reader.Path("function"));
  if (fields.Require("name")) fields.String("name");
  if (!fields.ok()) return fields.status();
  return *function;
}

Result<std::vector<Message>> ParseMessages(const OrderedJson& messages, MessageDialect dialect,
                                           std::string_view path) {
  if (!messages.is_array()) {
    return InvalidArgument(fmt::format("{}: expected an array, got {}", path, JsonTypeName(messages)));
  }
  if (messages.empty()) return InvalidArgument(fmt::format("{}: must not be empty", path));
  std::vector<Message> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    Result<Message> msg = ParseMessage(messages[i], IndexPath(path, i), dialect);
    if (!msg.ok()) return msg.status();
    if (msg.value().prefix && i + 1 != messages.size()) {
      return InvalidArgument(fmt::format("{}.prefix: only the last message may be a prefix",
                                         IndexPath(path, i)));
    }
    out.push_back(std::move(msg.value()));
  }
  return out;
}

Result<std::vector<Message>> ParseReferenceCase(const OrderedJson& input) {
  const OrderedJson* messages = &input;
  if (input.is_object()) {
    auto it = input.find("messages");
    if (it == input.end()) return InvalidArgument("messages: required");
    messages = &*it;
  }
  Result<std::vector<Message>> parsed = ParseMessages(*messages, MessageDialect::kReference, "messages");
  if (!parsed.ok() || !input.is_object() || !input.contains("tools")) return parsed;
  const OrderedJson& tools = input["tools"];
  if (!tools.is_array()) return InvalidArgument("tools: expected an array");
  std::vector<Message>& list = parsed.value();
  list.front().tools.clear();
  for (size_t k = 0; k < tools.size(); ++k) {
    Result<OrderedJson> function = ParseFunctionTool(tools[k], IndexPath("tools", k));
    if (!function.ok()) return function.status();
    list.front().tools.push_back(std::move(function.value()));
  }
  return parsed;
}

Result<ChatRequest> ParseChatRequestJson(const OrderedJson& body_json) {
  FieldReader body(body_json, "");
  if (!body.ok()) return body.status();
  ChatRequest request;
  if (!body.Require("messages")) return body.status();
  Result<std::vector<Message>> messages =
      ParseMessages(*body.Get("messages"), MessageDialect::kApi, "messages");
  if (!messages.ok()) return messages.status();
  request.messages = std::move(messages.value());
  if (const OrderedJson* tools = body.Array("tools")) {
    for (size_t k = 0; k < tools->size(); ++k) {
      Result<OrderedJson> function = ParseFunctionTool((*tools)[k], IndexPath("tools", k));
      if (!function.ok()) return function.status();
      request.tools.push_back(std::move(function.value()));
    }
  }
  for (Status status : {ParseToolChoice(body, request), ParseThinking(body, request),
                        ParseResponseFormat(body, request), ParseStop(body, request)}) {
    if (!status.ok()) return status;
  }
  ParseSampling(body, request);
  if (!body.ok()) return body.status();
  if (request.tool_choice.kind == ToolChoiceKind::kRequired && request.tools.empty()) {
    return InvalidArgument("tool_choice: 'required' needs at least one tool in tools");
  }
  return request;
}

Result<ChatRequest> ParseChatRequest(std::string_view body_text) {
  Result<OrderedJson> body = ParseJsonText(body_text);
  if (!body.ok()) return body.status();
  return ParseChatRequestJson(body.value());
}

}  // namespace deepinfer::recipe
