// Split-safe streaming parser for DeepSeek-V4 / V4.1 model output: raw decoded text in, typed
// events out (reasoning and answer deltas, DSML tool calls with arguments streamed as JSON
// text, stop, warnings).
//
// Contract:
//   * Byte-level and split-safe: the event stream depends only on the concatenated input, never
//     on how it was cut (adjacent deltas of one kind may be grouped differently; after merging
//     them, NormalizeEvents() of any two splittings is identical). Bytes that may still start a
//     marker are held back until they resolve; Finish() releases them.
//   * Deltas are valid UTF-8 and never split a character: invalid input bytes become U+FFFD.
//   * Tool-call arguments stream as JSON text ({"key": value, ...}, the reference's layout);
//     string="true" values are JSON-escaped, string="false" values are checked and, if they are
//     not JSON, sent as a JSON string with a kInvalidArguments warning. Arguments are always
//     valid JSON once ToolCallEnd is out.
//   * Stop strings apply to answer text only (not reasoning, not tool markup): text up to the
//     stop is emitted, the stop itself never; then Stop{kStopString} and everything after is
//     dropped silently.
//   * Malformed output (a stray </think> or end tag, junk inside a tool block, an unterminated
//     tool call, text after the tool block) is recovered deterministically with a Warning.
//   * JSON mode (response_format json_object/json_schema): the answer's JSON value (raw, or in
//     a ```json fence) is emitted as is; text around it is replaced by spaces byte for byte
//     (fences dropped), as DeepSeek's API does.
// Not thread-safe; one parser per sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::recipe {

struct ParserOptions {
  // Where the model starts: inside reasoning (the prompt ended with "<think>", or a prefix
  // left reasoning open) or in the answer. See StartFromPrompt().
  bool start_in_reasoning = false;
  // Drop newlines at the very start of the first section (true right after a tag).
  bool strip_leading_newlines = true;
  bool parse_tool_calls = true;  // false: DSML markup is plain answer text
  bool json_mode = false;
  std::vector<std::string> stop;  // empty strings are ignored; invalid UTF-8 becomes U+FFFD
  // Tool-call ids: prefix + 24 hex digits derived from (seed, call index).
  std::string tool_call_id_prefix = "call_";
  uint64_t tool_call_id_seed = 0;
};

// Sets start_in_reasoning / strip_leading_newlines from the rendered prompt: after the last
// "<｜Assistant｜>", an unclosed "<think>" means reasoning; otherwise answer text.
void StartFromPrompt(std::string_view prompt, ParserOptions& options);

enum class StopKind {
  kStopString,     // a request stop string matched (OutputEvent::text holds it)
  kEndOfSentence,  // "<｜end▁of▁sentence｜>" appeared in the text
  kToolCallsEnd,   // the DSML tool-call block closed; the model should end now
};

enum class WarningKind {
  kExtraEndOfThinking,    // "</think>" in the answer; skipped
  kMissingEndOfThinking,  // a tool block started inside reasoning
  kStrayEndTag,           // a DSML end tag with nothing open; skipped
  kMalformedToolCall,     // unexpected text or tag inside a tool block; skipped
  kInvalidArguments,      // a string="false" value that is not JSON; sent as a JSON string
  kDuplicateParameter,    // a parameter name repeated in one call; the repeat is dropped
  kUnterminatedToolCall,  // output ended inside a tool call/block; closed by the parser
  kContentAfterEnd,       // text after the tool block or end-of-sentence; dropped
  kInvalidUtf8,           // invalid UTF-8 bytes replaced by U+FFFD (reported at Finish)
};

const char* StopKindName(StopKind kind);
const char* WarningKindName(WarningKind kind);

struct OutputEvent {
  enum class Kind {
    kReasoningDelta,
    kContentDelta,
    kToolCallBegin,           // index, id, text = function name
    kToolCallArgumentsDelta,  // index, text = next piece of the arguments JSON
    kToolCallEnd,             // index
    kStop,                    // stop; text = the stop string for kStopString
    kWarning,                 // warning; text = detail
  };
  Kind kind = Kind::kContentDelta;
  std::string text;
  int32_t index = -1;
  std::string id;
  StopKind stop = StopKind::kStopString;
  WarningKind warning = WarningKind::kMalformedToolCall;

  bool operator==(const OutputEvent&) const = default;
};

const char* EventKindName(OutputEvent::Kind kind);

class OutputParser {
 public:
  explicit OutputParser(ParserOptions options);
  ~OutputParser();
  OutputParser(const OutputParser&) = delete;
  OutputParser& operator=(const OutputParser&) = delete;

  // Parses the next piece of decoded text (any byte split).
  std::vector<OutputEvent> Feed(std::string_view bytes);
  // The output ended: releases held bytes, closes what is open. Feed after Finish is a bug.
  std::vector<OutputEvent> Finish();

  // A Stop event was produced: generation may be aborted (later input is dropped).
  bool stopped() const;

 private:
  class Machine;
  std::unique_ptr<Machine> machine_;
};

// Merges adjacent deltas of the same kind (and tool index): the canonical form in which two
// parses of the same bytes compare equal.
std::vector<OutputEvent> NormalizeEvents(const std::vector<OutputEvent>& events);

}  // namespace deepinfer::recipe
