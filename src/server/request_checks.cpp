#include "server/request_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "recipe/json_reader.h"

namespace deepinfer::server {
namespace {

using recipe::OrderedJson;

constexpr int kMaxSchemaDepth = 32;
constexpr size_t kMaxToolName = 64;
constexpr size_t kMaxStopTokenIds = 64;

// Fields each endpoint accepts. Some are accepted and ignored (docs/server.md lists them).
constexpr std::array kChatFields = {
    "model", "messages", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs",
    "max_tokens", "max_completion_tokens", "n", "presence_penalty", "response_format", "seed",
    "stop", "stream", "stream_options", "temperature", "top_p", "tools", "tool_choice",
    "parallel_tool_calls", "user", "metadata", "store", "service_tier", "modalities", "audio",
    "prediction", "reasoning_effort", "web_search_options", "verbosity", "prompt_cache_key",
    "safety_identifier", "functions", "function_call",
    // DeepSeek / vLLM extensions
    "thinking", "enable_thinking", "chat_template_kwargs", "user_id", "top_k", "min_p",
    "repetition_penalty", "ignore_eos", "min_tokens", "stop_token_ids"};

constexpr std::array kCompletionFields = {
    "model", "prompt", "suffix", "max_tokens", "temperature", "top_p", "n", "stream",
    "stream_options", "logprobs", "echo", "stop", "presence_penalty", "frequency_penalty",
    "best_of", "logit_bias", "user", "seed", "top_k", "min_p", "repetition_penalty",
    "ignore_eos", "min_tokens", "stop_token_ids"};

constexpr std::array kMessagesFields = {
    "model", "messages", "max_tokens", "system", "metadata", "stop_sequences", "stream",
    "temperature", "top_p", "top_k", "tools", "tool_choice", "thinking", "service_tier",
    "container", "mcp_servers", "output_config", "context_management"};

constexpr std::array kCountTokensFields = {"model", "messages", "system", "tools", "tool_choice",
                                           "thinking", "output_config", "mcp_servers",
                                           "context_management"};

constexpr std::array kSchemaTypes = {"object", "array", "string", "number", "integer", "boolean", "null"};

template <size_t N>
bool Contains(const std::array<const char*, N>& names, std::string_view key) {
  return std::any_of(names.begin(), names.end(), [&](const char* name) { return key == name; });
}

bool Present(const OrderedJson& body, const char* key) {
  auto it = body.find(key);
  return it != body.end() && !it->is_null();
}

// Known fields whose non-default values this server cannot honour.
Status CheckUnsupported(const OrderedJson& body, Endpoint endpoint) {
  auto non_empty = [&](const char* key) {
    auto it = body.find(key);
    return it != body.end() && !it->is_null() && !(it->is_object() && it->empty()) &&
           !(it->is_array() && it->empty());
  };
  for (const char* key : {"logit_bias", "audio", "prediction", "functions", "function_call",
                          "web_search_options", "suffix", "mcp_servers", "container"}) {
    if (non_empty(key)) {
      return InvalidArgument(fmt::format("{}: is not supported by this server", key));
    }
  }
  if (endpoint == Endpoint::kChatCompletions && Present(body, "modalities")) {
    const OrderedJson& modalities = body["modalities"];
    const bool text_only = modalities.is_array() &&
                           std::all_of(modalities.begin(), modalities.end(),
                                       [](const OrderedJson& m) { return m == "text"; });
    if (!text_only) return InvalidArgument("modalities: only [\"text\"] is supported");
  }
  return Status::Ok();
}

bool ValidToolName(const std::string& name) {
  if (name.empty() || name.size() > kMaxToolName) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

Status CheckSchema(const OrderedJson& schema, const std::string& path, int depth);

Status CheckSchemaList(const OrderedJson& list, const std::string& path, int depth) {
  if (!list.is_array() || list.empty()) {
    return InvalidArgument(fmt::format("{}: expected a non-empty array of schemas", path));
  }
  for (size_t k = 0; k < list.size(); ++k) {
    Status status = CheckSchema(list[k], recipe::IndexPath(path, k), depth + 1);
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

std::string DumpShort(const OrderedJson& value) {
  std::string text = value.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

Status CheckType(const OrderedJson& type, const std::string& path) {
  auto known = [](const OrderedJson& t) {
    return t.is_string() && Contains(kSchemaTypes, t.get_ref<const std::string&>());
  };
  if (type.is_array() && !type.empty() && std::all_of(type.begin(), type.end(), known)) {
    return Status::Ok();
  }
  if (known(type)) return Status::Ok();
  return InvalidArgument(fmt::format("{}: {} is not a JSON Schema type (object, array, string, "
                                     "number, integer, boolean, null)", path, DumpShort(type)));
}

// A (sub)schema: an object or a boolean; the keywords that hold schemas are checked
// recursively, the others only for their JSON type.
Status CheckSchema(const OrderedJson& schema, const std::string& path, int depth) {
  if (depth > kMaxSchemaDepth) return InvalidArgument(fmt::format("{}: schema nested too deeply", path));
  if (schema.is_boolean()) return Status::Ok();
  if (!schema.is_object()) {
    return InvalidArgument(fmt::format("{}: a JSON Schema must be an object, got {}", path,
                                       recipe::JsonTypeName(schema)));
  }
  for (const auto& [key, value] : schema.items()) {
    const std::string at = recipe::JoinPath(path, key);
    Status status = Status::Ok();
    if (key == "type") {
      status = CheckType(value, at);
    } else if (key == "properties" || key == "patternProperties" || key == "$defs" ||
               key == "definitions") {
      if (!value.is_object()) return InvalidArgument(fmt::format("{}: expected an object", at));
      for (const auto& [name, sub] : value.items()) {
        status = CheckSchema(sub, recipe::JoinPath(at, name), depth + 1);
        if (!status.ok()) return status;
      }
    } else if (key == "items" || key == "additionalProperties" || key == "not" ||
               key == "contains" || key == "additionalItems") {
      status = value.is_array() && key == "items" ? CheckSchemaList(value, at, depth)
                                                  : CheckSchema(value, at, depth + 1);
    } else if (key == "anyOf" || key == "oneOf" || key == "allOf" || key == "prefixItems") {
      status = CheckSchemaList(value, at, depth);
    } else if (key == "required") {
      const bool ok = value.is_array() && std::all_of(value.begin(), value.end(),
                                                      [](const OrderedJson& v) { return v.is_string(); });
      if (!ok) status = InvalidArgument(fmt::format("{}: expected an array of property names", at));
    } else if (key == "enum") {
      if (!value.is_array()) status = InvalidArgument(fmt::format("{}: expected an array", at));
    } else if (key == "description" || key == "title" || key == "pattern" || key == "format" ||
               key == "$ref") {
      if (!value.is_string()) status = InvalidArgument(fmt::format("{}: expected a string", at));
    }
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

}  // namespace

Status CheckJsonDepth(std::string_view body, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return InvalidArgument(fmt::format("request body is nested deeper than {} levels", max_depth));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Status::Ok();
}

Status CheckTopLevelFields(const OrderedJson& body, Endpoint endpoint) {
  if (!body.is_object()) {
    return InvalidArgument(fmt::format("request body must be a JSON object, got {}", recipe::JsonTypeName(body)));
  }
  for (const auto& [key, value] : body.items()) {
    bool known = false;
    switch (endpoint) {
      case Endpoint::kChatCompletions: known = Contains(kChatFields, key); break;
      case Endpoint::kCompletions: known = Contains(kCompletionFields, key); break;
      case Endpoint::kMessages: known = Contains(kMessagesFields, key); break;
      case Endpoint::kCountTokens: known = Contains(kCountTokensFields, key); break;
    }
    if (known) continue;
    if (endpoint == Endpoint::kMessages || endpoint == Endpoint::kCountTokens) {
      return InvalidArgument(fmt::format("{}: Extra inputs are not permitted", key));
    }
    return InvalidArgument(fmt::format("{}: Unrecognized request argument supplied", key));
  }
  return CheckUnsupported(body, endpoint);
}

Status CheckToolDefinitions(const std::vector<OrderedJson>& tools, Endpoint endpoint) {
  const bool anthropic = endpoint == Endpoint::kMessages || endpoint == Endpoint::kCountTokens;
  for (size_t k = 0; k < tools.size(); ++k) {
    const std::string base = recipe::IndexPath("tools", k);
    const std::string fn = anthropic ? base : base + ".function";
    const OrderedJson& tool = tools[k];
    const std::string name = tool.value("name", "");
    if (!ValidToolName(name)) {
      return InvalidArgument(fmt::format("{}.name: must match ^[a-zA-Z0-9_-]{{1,{}}}$", fn, kMaxToolName));
    }
    for (size_t j = 0; j < k; ++j) {
      if (tools[j].value("name", "") == name) {
        return InvalidArgument(fmt::format("{}.name: duplicate tool name '{}'", fn, name));
      }
    }
    auto params = tool.find("parameters");
    if (params == tool.end() || params->is_null()) continue;
    const std::string path = anthropic ? base + ".input_schema" : fn + ".parameters";
    if (!params->is_object()) {
      return InvalidArgument(fmt::format("{}: expected a JSON Schema object, got {}", path,
                                         recipe::JsonTypeName(*params)));
    }
    auto type = params->find("type");
    if (type != params->end() && *type != "object") {
      return InvalidArgument(fmt::format("{}.type: a tool's input schema must have type 'object'", path));
    }
    Status status = CheckSchema(*params, path, 0);
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

Status ReadExtraSampling(const OrderedJson& body, SamplingParams& sampling) {
  recipe::FieldReader reader(body, "");
  if (auto n = reader.Int("n", 1, kMaxN)) sampling.n = static_cast<int32_t>(*n);
  if (auto min_p = reader.Number("min_p", 0.0, 1.0)) sampling.min_p = static_cast<float>(*min_p);
  if (auto penalty = reader.Number("repetition_penalty", 1e-6, 10.0)) {
    sampling.repetition_penalty = static_cast<float>(*penalty);
  }
  if (auto min_tokens = reader.Int("min_tokens", 0, INT32_MAX)) {
    sampling.min_tokens = static_cast<int32_t>(*min_tokens);
  }
  if (auto ignore = reader.Bool("ignore_eos")) sampling.ignore_eos = *ignore;
  if (const OrderedJson* ids = reader.Array("stop_token_ids")) {
    if (ids->size() > kMaxStopTokenIds) {
      return InvalidArgument(fmt::format("stop_token_ids: at most {} ids", kMaxStopTokenIds));
    }
    for (size_t k = 0; k < ids->size(); ++k) {
      const OrderedJson& id = (*ids)[k];
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return InvalidArgument(fmt::format("stop_token_ids[{}]: expected a token id", k));
      }
      sampling.stop_token_ids.push_back(static_cast<TokenId>(id.get<int64_t>()));
    }
  }
  return reader.status();
}

}  // namespace deepinfer::server
