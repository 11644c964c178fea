// Non-streaming view of the output parser: folds events into one assistant message with a
// finish reason (the OpenAI/DeepSeek non-stream response, or the end of a stream).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recipe/output_parser.h"

namespace deepinfer::recipe {

// Why the engine stopped feeding text.
enum class EngineFinish {
  kStop,                    // EOS token, or the parser asked to stop
  kLength,                  // max_tokens / context limit
  kContentFilter,
  kInsufficientResources,   // DeepSeek's insufficient_system_resource
};

struct ParsedToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
  bool complete = false;  // ToolCallEnd seen
};

struct ParsedWarning {
  WarningKind kind;
  std::string detail;
};

struct ParsedOutput {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  std::optional<std::string> stop_string;  // the request stop string that ended the output
  std::optional<StopKind> stop;             // the parser's stop, if any
  std::vector<ParsedWarning> warnings;
  // OpenAI/DeepSeek finish_reason: "stop", "length", "tool_calls", "content_filter" or
  // "insufficient_system_resource".
  std::string finish_reason;
};

// Accumulates events in order (streaming callers feed it the same events they send).
class OutputAccumulator {
 public:
  void Add(const std::vector<OutputEvent>& events);
  // finish_reason rule: a matched stop string -> "stop"; else tool calls -> "tool_calls" unless
  // the engine hit the length limit inside the tool block ("length"); else the engine's reason.
  ParsedOutput Take(EngineFinish engine_finish);

 private:
  ParsedOutput out_;
  bool tool_block_closed_ = false;
};

// Feeds `text` in one piece, finishes, folds.
ParsedOutput ParseCompletion(std::string_view text, const ParserOptions& options,
                             EngineFinish engine_finish = EngineFinish::kStop);

const char* EngineFinishReason(EngineFinish finish);

}  // namespace deepinfer::recipe
