// Plain, protocol-neutral types for a chat conversation (what the DeepSeek chat encoder renders)
// and for a parsed chat request (what the HTTP layer gets from an OpenAI or Anthropic body).
//
// Both protocols convert into ChatRequest (chat_request.h, anthropic_request.h); the encoder
// (chat_encoder.h) turns a ChatRequest or a raw Message list into the exact prompt text.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deepinfer::recipe {

// JSON with insertion-ordered objects: tool schemas and arguments are rendered into the prompt
// in the key order the client sent.
using OrderedJson = nlohmann::ordered_json;

enum class Role {
  kSystem,
  kUser,
  kAssistant,
  kTool,            // a tool result; the encoder merges it into a user turn
  kDeveloper,       // rendered as a user turn that may carry tools
  kLatestReminder,  // DeepSeek-V4 "<｜latest_reminder｜>" turn (reference dialect only)
};

const char* RoleName(Role role);

// One block of structured content: a user turn's parts, or the content of a tool result.
struct ContentPart {
  enum class Kind {
    kText,
    kImage,       // rendered as the model's image placeholder, or refused if it has none
    kToolResult,  // only in merged user turns (built by the encoder from tool messages)
    kUnsupported, // rendered "[Unsupported <type_name>]", as the reference does
  };
  Kind kind = Kind::kText;
  std::string text;         // kText
  std::string type_name;    // the block's wire type ("image_url", "input_audio", ...)
  std::string image_url;    // kImage: URL or data URI; carried out of band, never rendered
  std::string tool_use_id;  // kToolResult: the call id it answers
  std::vector<ContentPart> result;  // kToolResult: its content (text/image/unsupported parts)

  static ContentPart Text(std::string text) {
    ContentPart part;
    part.text = std::move(text);
    part.type_name = "text";
    return part;
  }
};

struct ToolCall {
  std::string id;         // may be empty (the reference tolerates it)
  std::string name;
  std::string arguments;  // JSON text, as in OpenAI function.arguments
};

struct Message {
  Role role = Role::kUser;
  // system / developer / assistant / latest_reminder: the text content.
  std::string content;
  // user: the content parts (a plain string arrives as one text part);
  // tool: the result content (same convention).
  std::vector<ContentPart> parts;
  // assistant: reasoning text; unset and "" render the same except for an open prefix.
  std::optional<std::string> reasoning_content;
  std::vector<ToolCall> tool_calls;  // assistant
  std::string tool_call_id;          // tool
  // system / developer: tool function objects ({name, description, parameters, ...}, i.e. the
  // OpenAI "function" member) rendered as the "## Tools" section after the content.
  std::vector<OrderedJson> tools;
  // system / developer: rendered as a "## Response Format:" section with this JSON.
  std::optional<OrderedJson> response_format;
  // assistant: no end-of-sentence; the model continues this message (chat prefix completion).
  bool prefix = false;
  // user / developer: DeepSeek quick-instruction task ("action", "query", ...); reference
  // dialect only, never taken from API traffic.
  std::string task;
};

enum class ToolChoiceKind { kAuto, kNone, kRequired, kNamed };

struct ToolChoice {
  ToolChoiceKind kind = ToolChoiceKind::kAuto;
  std::string name;  // kNamed
};

enum class ResponseFormatKind { kText, kJsonObject, kJsonSchema };

struct ResponseFormat {
  ResponseFormatKind kind = ResponseFormatKind::kText;
  OrderedJson schema;  // kJsonSchema: the JSON Schema (json_schema.schema / output_format.schema)
  std::string name;    // kJsonSchema: json_schema.name, if given
};

// A chat request in protocol-neutral form. Sampling fields are carried for the server; the
// encoder reads messages, tools, tool_choice, thinking, reasoning_effort and response_format.
struct ChatRequest {
  std::string model;
  std::vector<Message> messages;
  std::vector<OrderedJson> tools;  // request-level tool function objects
  ToolChoice tool_choice;
  std::optional<bool> thinking;                  // unset: the model's default
  std::optional<std::string> reasoning_effort;   // as sent; an integer arrives as its digits
  ResponseFormat response_format;
  std::vector<std::string> stop;

  std::optional<int64_t> max_tokens;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> presence_penalty;
  std::optional<double> frequency_penalty;
  std::optional<int64_t> seed;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  std::optional<int64_t> top_logprobs;
  std::string user;
};

}  // namespace deepinfer::recipe
