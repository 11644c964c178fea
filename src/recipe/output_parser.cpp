#include "recipe/output_parser.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <set>

#include "base/error.h"
#include "recipe/py_json.h"
#include "recipe/utf8.h"

namespace deepinfer::recipe {
namespace {

constexpr std::string_view kEosText = "<｜end▁of▁sentence｜>";
constexpr std::string_view kDsmlOpenText = "<｜DSML｜";
constexpr std::string_view kDsmlCloseText = "</｜DSML｜";
constexpr std::string_view kAssistantText = "<｜Assistant｜>";
constexpr std::string_view kDsmlText = "｜DSML｜";
constexpr size_t kMaxTagLength = 48;         // "<｜DSML｜ parameter name=" and the like
constexpr size_t kMaxNameLength = 1024;      // tool and parameter names
constexpr size_t kMaxAttributeLength = 64;   // ` string="false"`

// Stages of the machine. Pattern stages hold back bytes that may start one of their markers;
// scanner stages (no markers) decide every byte at once.
enum class Stage : uint8_t {
  kReasoning,     // reasoning text
  kContent,       // answer text
  kJsonPreamble,  // JSON mode: answer text before the JSON value (to spaces)
  kJson,          // JSON mode: the JSON value (raw)
  kJsonAfter,     // JSON mode: after the JSON value (to spaces)
  kTagOpen,       // scanner: after "<｜DSML｜", up to '"' or '>'
  kTagClose,      // scanner: after "</｜DSML｜", up to '>'
  kToolBlock,     // inside the tool block, between invokes
  kToolName,      // scanner: the invoke name, up to '"'
  kInvokeBody,    // inside an invoke, between parameters
  kParamName,     // scanner: the parameter name, up to '"'
  kParamAttrs,    // scanner: ` string="true|false"`, up to '>'
  kParamValue,    // a parameter value
  kDone,          // after a stop; input dropped
  kCount,
};

enum class Marker : uint8_t {
  kStop, kEos, kDsmlOpenNl, kDsmlOpen, kDsmlClose, kThinkEndNl, kThinkEnd,
  kFenceJson, kFencePlain, kBrace, kBracket, kFenceEnd,
};

// A literal marker, optionally preceded by any number of newlines that belong to the match.
struct Pattern {
  std::string literal;
  std::vector<uint32_t> fail;  // KMP failure function
  bool absorb_newlines = false;
  Marker marker = Marker::kStop;
  size_t stop_index = 0;
};

struct MatchState {
  uint32_t pos = 0;       // matched prefix length of the literal
  uint32_t newlines = 0;  // newlines right before that prefix (absorbing patterns)
};

Pattern MakePattern(std::string literal, Marker marker, bool absorb_newlines = false,
                    size_t stop_index = 0) {
  DI_CHECK(!literal.empty());
  DI_CHECK(!absorb_newlines || literal.find('\n') == std::string::npos);
  Pattern p{std::move(literal), {}, absorb_newlines, marker, stop_index};
  p.fail.assign(p.literal.size(), 0);
  for (size_t i = 1, k = 0; i < p.literal.size(); ++i) {
    while (k > 0 && p.literal[i] != p.literal[k]) k = p.fail[k - 1];
    if (p.literal[i] == p.literal[k]) ++k;
    p.fail[i] = static_cast<uint32_t>(k);
  }
  return p;
}

// Advances one pattern by one byte; returns true on a complete match.
bool Advance(const Pattern& p, MatchState& s, char c) {
  if (p.absorb_newlines && c == '\n') {  // the literal holds no newline (MakePattern)
    s.newlines = s.pos == 0 ? s.newlines + 1 : 1;
    s.pos = 0;
    return false;
  }
  uint32_t pos = s.pos;
  while (pos > 0 && p.literal[pos] != c) pos = p.fail[pos - 1];
  if (p.literal[pos] == c) ++pos;
  if (pos != s.pos + 1) s.newlines = 0;  // fell back: the partial match restarted
  s.pos = pos;
  return pos == p.literal.size();
}

uint32_t MatchedLength(const MatchState& s) { return s.newlines + s.pos; }

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string StripOneSpace(std::string_view s) {
  if (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return std::string(s);
}

// Appends `c` (input is whole UTF-8 characters) unless `buffer` holds `limit` bytes and `c`
// starts a new character; a continuation byte joins only an incomplete last character, so a
// character is taken whole or not at all. Returns false when `c` was refused.
bool AppendBounded(std::string& buffer, char c, size_t limit) {
  if ((static_cast<uint8_t>(c) & 0xc0) != 0x80) {
    if (buffer.size() >= limit) return false;
    buffer += c;
    return true;
  }
  size_t lead = buffer.size();
  while (lead > 0 && (static_cast<uint8_t>(buffer[lead - 1]) & 0xc0) == 0x80) --lead;
  if (lead == 0) return false;
  const auto first = static_cast<uint8_t>(buffer[lead - 1]);
  const size_t length = first >= 0xf0 ? 4 : first >= 0xe0 ? 3 : first >= 0xc0 ? 2 : 1;
  if (buffer.size() - (lead - 1) >= length) return false;
  buffer += c;
  return true;
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

class OutputParser::Machine {
 public:
  explicit Machine(ParserOptions options);
  void Feed(std::string_view bytes);
  void Finish();
  std::vector<OutputEvent> TakeEvents() { return std::exchange(events_, {}); }
  bool stopped() const { return stopped_; }

 private:
  // Byte loop.
  void Run();
  void Step(char c);
  bool Resolve(size_t count);
  void ResetMatchers();
  void SetStage(Stage stage);
  void DefaultAction(char c);
  void OnMarker(const Pattern& pattern);

  // Scanner stages.
  void OnTagOpenByte(char c);
  void DispatchOpenTag(char terminator);
  void OnTagCloseByte(char c);
  void DispatchCloseTag();
  void OnParamAttrsEnd();
  void OnJsonByte(char c);

  // Tool-call structure.
  void OpenBlock();
  void BeginInvoke();
  void CloseParam();
  void CloseInvoke();
  void CloseOpenCall(const char* why);
  Stage StructuralStage() const;
  Stage AnswerStage() const { return options_.json_mode ? Stage::kJsonPreamble : Stage::kContent; }

  // Events.
  void EmitDelta(OutputEvent::Kind kind, std::string_view text, int32_t index = -1);
  void EmitStop(StopKind kind, std::string text);
  void Warn(WarningKind kind, std::string detail);

  ParserOptions options_;
  std::vector<Pattern> patterns_;
  std::array<std::vector<size_t>, static_cast<size_t>(Stage::kCount)> stage_patterns_;
  std::vector<MatchState> states_;

  Utf8Sanitizer utf8_;
  std::string input_;        // sanitized bytes of the current Feed (replays are inserted here)
  size_t input_pos_ = 0;
  std::string pending_;      // bytes not yet decided (a possible marker start)
  Stage stage_ = Stage::kContent;
  uint64_t stage_epoch_ = 0;
  bool leading_ = true;      // drop newlines (start of reasoning / answer)
  bool replay_current_ = false;  // a default action refused its byte: re-read it after SetStage
  bool stopped_ = false;
  bool finished_ = false;
  bool silent_done_ = false; // after a stop string: drop the rest without warnings
  bool warned_after_end_ = false;
  bool warned_block_junk_ = false;
  bool warned_invoke_junk_ = false;

  Stage return_stage_ = Stage::kContent;  // where a stray DSML end tag returns to
  std::string tag_;          // scanner buffer: tag text, name or attributes
  bool in_block_ = false;
  bool in_invoke_ = false;
  bool in_param_ = false;
  bool param_is_string_ = true;
  bool skip_param_ = false;
  std::string param_name_;
  std::string json_value_;   // a string="false" value, checked when it closes
  std::set<std::string> seen_params_;
  int32_t num_params_ = 0;
  int32_t num_calls_ = 0;
  int json_depth_ = 0;
  bool json_in_string_ = false;
  bool json_escape_ = false;

  std::vector<OutputEvent> events_;
};

OutputParser::Machine::Machine(ParserOptions options) : options_(std::move(options)) {
  using S = Stage;
  // Input is repaired to whole UTF-8 characters; stop strings get the same repair so that a
  // match always starts and ends on a character boundary.
  for (auto& stop : options_.stop) {
    Utf8Sanitizer repair;
    std::string repaired;
    repair.Append(stop, repaired);
    repair.Flush(repaired);
    stop = std::move(repaired);
  }
  auto add = [&](Pattern p, std::initializer_list<Stage> stages) {
    patterns_.push_back(std::move(p));
    for (Stage s : stages) stage_patterns_[static_cast<size_t>(s)].push_back(patterns_.size() - 1);
  };
  // Order = priority when two markers complete on the same byte.
  for (size_t i = 0; i < options_.stop.size(); ++i) {
    if (options_.stop[i].empty()) continue;
    add(MakePattern(options_.stop[i], Marker::kStop, false, i),
        {S::kContent, S::kJsonPreamble, S::kJson, S::kJsonAfter});
  }
  add(MakePattern(std::string(kEosText), Marker::kEos),
      {S::kReasoning, S::kContent, S::kJsonPreamble, S::kJson, S::kJsonAfter, S::kToolBlock,
       S::kInvokeBody, S::kParamValue, S::kDone});
  if (options_.parse_tool_calls) {
    add(MakePattern(std::string(kDsmlOpenText), Marker::kDsmlOpenNl, true),
        {S::kReasoning, S::kContent, S::kJsonPreamble, S::kJsonAfter});
    add(MakePattern(std::string(kDsmlOpenText), Marker::kDsmlOpen), {S::kToolBlock, S::kInvokeBody});
    add(MakePattern(std::string(kDsmlCloseText), Marker::kDsmlClose),
        {S::kContent, S::kJsonPreamble, S::kToolBlock, S::kInvokeBody, S::kParamValue});
  }
  add(MakePattern("</think>", Marker::kThinkEndNl, true), {S::kReasoning});
  add(MakePattern("</think>", Marker::kThinkEnd), {S::kContent, S::kJsonPreamble});
  add(MakePattern("```json\n", Marker::kFenceJson), {S::kJsonPreamble});
  add(MakePattern("```\n", Marker::kFencePlain), {S::kJsonPreamble});
  add(MakePattern("{", Marker::kBrace), {S::kJsonPreamble});
  add(MakePattern("[", Marker::kBracket), {S::kJsonPreamble});
  add(MakePattern("\n```", Marker::kFenceEnd), {S::kJson, S::kJsonAfter});
  states_.resize(patterns_.size());
  leading_ = options_.strip_leading_newlines;
  SetStage(options_.start_in_reasoning ? Stage::kReasoning : AnswerStage());
}

void OutputParser::Machine::Feed(std::string_view bytes) {
  DI_CHECK(!finished_, "OutputParser::Feed after Finish");
  input_.clear();
  input_pos_ = 0;
  utf8_.Append(bytes, input_);
  Run();
}

void OutputParser::Machine::Run() {
  while (input_pos_ < input_.size()) Step(input_[input_pos_++]);
}

// One input byte: advance the stage's markers; on a match decide the bytes before it and act;
// otherwise decide every pending byte that no marker can still claim.
void OutputParser::Machine::Step(char c) {
  pending_ += c;
  const Pattern* matched = nullptr;
  size_t hold = 0;
  for (size_t id : stage_patterns_[static_cast<size_t>(stage_)]) {
    const bool complete = Advance(patterns_[id], states_[id], c);
    if (complete && matched == nullptr) matched = &patterns_[id];
    hold = std::max<size_t>(hold, MatchedLength(states_[id]));
  }
  if (matched == nullptr) {
    Resolve(pending_.size() - hold);
    return;
  }
  const size_t match_length = MatchedLength(states_[matched - patterns_.data()]);
  if (!Resolve(pending_.size() - match_length)) return;
  pending_.clear();
  ResetMatchers();
  OnMarker(*matched);
}

// Applies the stage's default action to the first `count` pending bytes. If an action changes
// the stage, the bytes after it are re-read under the new stage and false is returned.
bool OutputParser::Machine::Resolve(size_t count) {
  for (size_t k = 0; k < count; ++k) {
    const uint64_t epoch = stage_epoch_;
    DefaultAction(pending_[k]);
    if (stage_epoch_ != epoch) {
      const size_t from = std::exchange(replay_current_, false) ? k : k + 1;
      input_.insert(input_pos_, pending_, from, std::string::npos);
      pending_.clear();
      ResetMatchers();
      return false;
    }
  }
  pending_.erase(0, count);
  return true;
}

void OutputParser::Machine::ResetMatchers() {
  for (auto& s : states_) s = MatchState{};
}

void OutputParser::Machine::SetStage(Stage stage) {
  stage_ = stage;
  ++stage_epoch_;
}

void OutputParser::Machine::DefaultAction(char c) {
  switch (stage_) {
    case Stage::kReasoning:
    case Stage::kContent:
      if (leading_ && c == '\n') return;
      leading_ = false;
      EmitDelta(stage_ == Stage::kReasoning ? OutputEvent::Kind::kReasoningDelta
                                            : OutputEvent::Kind::kContentDelta,
                std::string_view(&c, 1));
      return;
    case Stage::kJsonPreamble:
      if (leading_ && c == '\n') return;
      leading_ = false;
      EmitDelta(OutputEvent::Kind::kContentDelta, " ");
      return;
    case Stage::kJson: OnJsonByte(c); return;
    case Stage::kJsonAfter: EmitDelta(OutputEvent::Kind::kContentDelta, " "); return;
    case Stage::kTagOpen: OnTagOpenByte(c); return;
    case Stage::kTagClose: OnTagCloseByte(c); return;
    case Stage::kToolBlock:
      if (!IsSpace(c) && !warned_block_junk_) {
        warned_block_junk_ = true;
        Warn(WarningKind::kMalformedToolCall, "unexpected text between tool calls");
      }
      return;
    case Stage::kInvokeBody:
      if (!IsSpace(c) && c != '>' && !warned_invoke_junk_) {
        warned_invoke_junk_ = true;
        Warn(WarningKind::kMalformedToolCall, "unexpected text between parameters");
      }
      return;
    case Stage::kToolName:
      if (c == '"') return BeginInvoke();
      AppendBounded(tag_, c, kMaxNameLength);
      return;
    case Stage::kParamName:
      if (c == '"') {
        param_name_ = std::exchange(tag_, {});
        return SetStage(Stage::kParamAttrs);
      }
      AppendBounded(tag_, c, kMaxNameLength);
      return;
    case Stage::kParamAttrs:
      if (c == '>') return OnParamAttrsEnd();
      AppendBounded(tag_, c, kMaxAttributeLength);
      return;
    case Stage::kParamValue:
      if (skip_param_) return;
      if (param_is_string_) {
        std::string escaped;
        AppendJsonEscaped(std::string_view(&c, 1), escaped);
        EmitDelta(OutputEvent::Kind::kToolCallArgumentsDelta, escaped, num_calls_ - 1);
      } else {
        json_value_ += c;
      }
      return;
    case Stage::kDone:
      if (!silent_done_ && !IsSpace(c) && !warned_after_end_) {
        warned_after_end_ = true;
        Warn(WarningKind::kContentAfterEnd, "text after the end of the output was dropped");
      }
      return;
    case Stage::kCount: return;
  }
}

void OutputParser::Machine::OnJsonByte(char c) {
  EmitDelta(OutputEvent::Kind::kContentDelta, std::string_view(&c, 1));
  if (json_in_string_) {
    if (json_escape_) json_escape_ = false;
    else if (c == '\\') json_escape_ = true;
    else if (c == '"') json_in_string_ = false;
    return;
  }
  if (c == '"') {
    json_in_string_ = true;
  } else if (c == '{' || c == '[') {
    ++json_depth_;
  } else if ((c == '}' || c == ']') && json_depth_ > 0 && --json_depth_ == 0) {
    SetStage(Stage::kJsonAfter);  // the top-level value is complete
  }
}

void OutputParser::Machine::OnMarker(const Pattern& pattern) {
  switch (pattern.marker) {
    case Marker::kStop:
      EmitStop(StopKind::kStopString, options_.stop[pattern.stop_index]);
      silent_done_ = true;
      return SetStage(Stage::kDone);
    case Marker::kEos:
      if (stage_ == Stage::kDone) return;  // the expected end after a tool block
      if (in_block_) CloseOpenCall("the output ended inside a tool call");
      EmitStop(StopKind::kEndOfSentence, "");
      return SetStage(Stage::kDone);
    case Marker::kDsmlOpenNl:
      if (stage_ == Stage::kReasoning) {
        Warn(WarningKind::kMissingEndOfThinking, "a tool call started inside the reasoning");
      }
      return_stage_ = stage_ == Stage::kReasoning ? AnswerStage() : stage_;
      tag_.clear();
      return SetStage(Stage::kTagOpen);
    case Marker::kDsmlOpen:
      tag_.clear();
      return SetStage(Stage::kTagOpen);
    case Marker::kDsmlClose:
      if (!in_block_) return_stage_ = stage_;
      tag_.clear();
      return SetStage(Stage::kTagClose);
    case Marker::kThinkEndNl:
      leading_ = true;
      return SetStage(AnswerStage());
    case Marker::kThinkEnd:
      Warn(WarningKind::kExtraEndOfThinking, "</think> in the answer was skipped");
      leading_ = false;
      return SetStage(stage_);
    case Marker::kFenceJson:
    case Marker::kFencePlain:
      json_depth_ = 0;
      return SetStage(Stage::kJson);
    case Marker::kBrace:
    case Marker::kBracket:
      EmitDelta(OutputEvent::Kind::kContentDelta, pattern.literal);
      json_depth_ = 1;
      return SetStage(Stage::kJson);
    case Marker::kFenceEnd:
      return SetStage(Stage::kJsonAfter);
  }
}

void OutputParser::Machine::OnTagOpenByte(char c) {
  if (c == '>' || c == '"') return DispatchOpenTag(c);
  if (!AppendBounded(tag_, c, kMaxTagLength)) {
    Warn(WarningKind::kMalformedToolCall, "a DSML tag is too long");
    if (!in_block_) OpenBlock();
    replay_current_ = true;
    SetStage(StructuralStage());
  }
}

void OutputParser::Machine::DispatchOpenTag(char terminator) {
  const std::string key = StripOneSpace(tag_);
  tag_.clear();
  if (terminator == '>' && (key == "tool_calls" || key == "calls" || key == "function_calls")) {
    if (in_block_) Warn(WarningKind::kMalformedToolCall, "a second tool_calls opening tag");
    else OpenBlock();
    return SetStage(StructuralStage());
  }
  if (terminator == '"' && key == "invoke name=") {
    if (!in_block_) {
      Warn(WarningKind::kMalformedToolCall, "an invoke outside a tool_calls block");
      OpenBlock();
    }
    if (in_invoke_) CloseOpenCall("an invoke was not closed before the next one");
    in_invoke_ = true;
    return SetStage(Stage::kToolName);
  }
  if (terminator == '"' && key == "parameter name=" && in_invoke_) {
    return SetStage(Stage::kParamName);
  }
  Warn(WarningKind::kMalformedToolCall,
       fmt::format("unexpected DSML tag <{}{}{}", kDsmlText, key, terminator));
  if (!in_block_) OpenBlock();
  SetStage(StructuralStage());
}

void OutputParser::Machine::OnTagCloseByte(char c) {
  if (c == '>') return DispatchCloseTag();
  if (!AppendBounded(tag_, c, kMaxTagLength)) {
    Warn(WarningKind::kMalformedToolCall, "a DSML end tag is too long");
    replay_current_ = true;
    SetStage(StructuralStage());
  }
}

void OutputParser::Machine::DispatchCloseTag() {
  const std::string key = StripOneSpace(tag_);
  tag_.clear();
  const std::string tag_text = fmt::format("</{}{}>", kDsmlText, key);
  const bool is_block = key == "tool_calls" || key == "calls" || key == "function_calls";
  if (!in_block_) {
    Warn(WarningKind::kStrayEndTag, tag_text);
    leading_ = false;
    return SetStage(return_stage_);
  }
  if (key == "parameter" && in_param_) {
    CloseParam();
    return SetStage(Stage::kInvokeBody);
  }
  if (key == "invoke" && in_invoke_) {
    if (in_param_) Warn(WarningKind::kUnterminatedToolCall, "a parameter was not closed");
    CloseInvoke();
    return SetStage(Stage::kToolBlock);
  }
  if (is_block) {
    if (in_invoke_) CloseOpenCall("the tool block closed inside a call");
    in_block_ = false;
    EmitStop(StopKind::kToolCallsEnd, "");
    return SetStage(Stage::kDone);
  }
  Warn(key == "parameter" || key == "invoke" ? WarningKind::kStrayEndTag
                                             : WarningKind::kMalformedToolCall,
       tag_text);
  SetStage(StructuralStage());
}

void OutputParser::Machine::OnParamAttrsEnd() {
  std::string attrs = std::exchange(tag_, {});
  while (!attrs.empty() && IsSpace(attrs.front())) attrs.erase(0, 1);
  while (!attrs.empty() && IsSpace(attrs.back())) attrs.pop_back();
  param_is_string_ = attrs != "string=\"false\"";
  if (attrs != "string=\"true\"" && attrs != "string=\"false\"") {
    Warn(WarningKind::kMalformedToolCall,
         fmt::format("parameter '{}' has attributes '{}'; taken as a string", param_name_, attrs));
  }
  skip_param_ = !seen_params_.insert(param_name_).second;
  if (skip_param_) {
    Warn(WarningKind::kDuplicateParameter, param_name_);
  } else {
    std::string head = num_params_ == 0 ? "{" : ", ";
    AppendPyJsonString(param_name_, head);
    head += ": ";
    if (param_is_string_) head += '"';
    EmitDelta(OutputEvent::Kind::kToolCallArgumentsDelta, head, num_calls_ - 1);
    ++num_params_;
  }
  json_value_.clear();
  in_param_ = true;
  SetStage(Stage::kParamValue);
}

void OutputParser::Machine::OpenBlock() {
  in_block_ = true;
  warned_block_junk_ = false;
}

void OutputParser::Machine::BeginInvoke() {
  OutputEvent event;
  event.kind = OutputEvent::Kind::kToolCallBegin;
  event.index = num_calls_++;
  const uint64_t a = SplitMix64(options_.tool_call_id_seed ^ (0x5bd1e995ULL * (event.index + 1)));
  event.id = fmt::format("{}{:016x}{:08x}", options_.tool_call_id_prefix, a,
                         static_cast<uint32_t>(SplitMix64(a)));
  event.text = std::exchange(tag_, {});
  if (event.text.empty()) Warn(WarningKind::kMalformedToolCall, "a tool call without a name");
  events_.push_back(std::move(event));
  in_invoke_ = true;
  num_params_ = 0;
  seen_params_.clear();
  warned_invoke_junk_ = false;
  SetStage(Stage::kInvokeBody);
}

void OutputParser::Machine::CloseParam() {
  if (!in_param_) return;
  in_param_ = false;
  if (skip_param_) return;
  std::string tail;
  if (param_is_string_) {
    tail = "\"";
  } else if (json_value_.find('\0') == std::string::npos &&  // nlohmann stops at NUL
             nlohmann::json::accept(json_value_)) {
    tail = json_value_;
  } else {
    Warn(WarningKind::kInvalidArguments,
         fmt::format("parameter '{}' is not JSON; sent as a string", param_name_));
    AppendPyJsonString(json_value_, tail);
  }
  json_value_.clear();
  EmitDelta(OutputEvent::Kind::kToolCallArgumentsDelta, tail, num_calls_ - 1);
}

void OutputParser::Machine::CloseInvoke() {
  CloseParam();
  in_invoke_ = false;
  EmitDelta(OutputEvent::Kind::kToolCallArgumentsDelta, num_params_ == 0 ? "{}" : "}",
            num_calls_ - 1);
  OutputEvent end;
  end.kind = OutputEvent::Kind::kToolCallEnd;
  end.index = num_calls_ - 1;
  events_.push_back(std::move(end));
}

// Closes a call (and its parameter) that the output left open, with a warning.
void OutputParser::Machine::CloseOpenCall(const char* why) {
  if (stage_ == Stage::kToolName) BeginInvoke();  // name cut off: the call still gets reported
  if (in_invoke_ || in_param_) {
    Warn(WarningKind::kUnterminatedToolCall, why);
    CloseInvoke();
  }
}

Stage OutputParser::Machine::StructuralStage() const {
  if (in_param_) return Stage::kParamValue;
  if (in_invoke_) return Stage::kInvokeBody;
  if (in_block_) return Stage::kToolBlock;
  return return_stage_;
}

void OutputParser::Machine::EmitDelta(OutputEvent::Kind kind, std::string_view text, int32_t index) {
  if (!events_.empty() && events_.back().kind == kind && events_.back().index == index) {
    events_.back().text += text;
    return;
  }
  OutputEvent event;
  event.kind = kind;
  event.text = std::string(text);
  event.index = index;
  events_.push_back(std::move(event));
}

void OutputParser::Machine::EmitStop(StopKind kind, std::string text) {
  OutputEvent event;
  event.kind = OutputEvent::Kind::kStop;
  event.stop = kind;
  event.text = std::move(text);
  events_.push_back(std::move(event));
  stopped_ = true;
}

void OutputParser::Machine::Warn(WarningKind kind, std::string detail) {
  OutputEvent event;
  event.kind = OutputEvent::Kind::kWarning;
  event.warning = kind;
  event.text = std::move(detail);
  events_.push_back(std::move(event));
}

void OutputParser::Machine::Finish() {
  DI_CHECK(!finished_, "OutputParser::Finish called twice");
  input_.clear();
  input_pos_ = 0;
  utf8_.Flush(input_);
  Run();
  // No marker can complete at the first held byte any more: decide it by the stage's default,
  // then re-read the bytes after it (a stage change may let them match).
  while (!pending_.empty()) {
    input_.assign(pending_, 1, std::string::npos);
    input_pos_ = 0;
    const char first = pending_[0];
    pending_.clear();
    ResetMatchers();
    DefaultAction(first);
    if (std::exchange(replay_current_, false)) input_.insert(input_.begin(), first);
    Run();
  }
  if (stage_ == Stage::kTagClose && !in_block_) {
    Warn(WarningKind::kStrayEndTag, "an unfinished DSML end tag at the end");
  }
  if (stage_ == Stage::kTagOpen && !in_block_) OpenBlock();  // "<｜DSML｜" was committed
  if (in_block_) {
    CloseOpenCall("the output ended inside a tool call");
    if (in_block_) Warn(WarningKind::kUnterminatedToolCall, "the tool block was not closed");
    in_block_ = false;
  }
  if (utf8_.num_replaced() > 0) {
    Warn(WarningKind::kInvalidUtf8,
         fmt::format("{} invalid UTF-8 sequence(s) replaced by U+FFFD", utf8_.num_replaced()));
  }
  finished_ = true;
}

// ---------------------------------------------------------------------------------------------

void StartFromPrompt(std::string_view prompt, ParserOptions& options) {
  const size_t assistant = prompt.rfind(kAssistantText);
  const std::string_view tail =
      assistant == std::string_view::npos ? prompt : prompt.substr(assistant);
  const size_t open = tail.rfind("<think>");
  const size_t close = tail.rfind("</think>");
  options.start_in_reasoning =
      open != std::string_view::npos && (close == std::string_view::npos || close < open);
  options.strip_leading_newlines = tail.ends_with("<think>") || tail.ends_with("</think>") ||
                                   tail.ends_with(kAssistantText);
}

const char* StopKindName(StopKind kind) {
  switch (kind) {
    case StopKind::kStopString: return "stop_string";
    case StopKind::kEndOfSentence: return "end_of_sentence";
    case StopKind::kToolCallsEnd: return "tool_calls_end";
  }
  return "?";
}

const char* WarningKindName(WarningKind kind) {
  switch (kind) {
    case WarningKind::kExtraEndOfThinking: return "extra_end_of_thinking";
    case WarningKind::kMissingEndOfThinking: return "missing_end_of_thinking";
    case WarningKind::kStrayEndTag: return "stray_end_tag";
    case WarningKind::kMalformedToolCall: return "malformed_tool_call";
    case WarningKind::kInvalidArguments: return "invalid_arguments";
    case WarningKind::kDuplicateParameter: return "duplicate_parameter";
    case WarningKind::kUnterminatedToolCall: return "unterminated_tool_call";
    case WarningKind::kContentAfterEnd: return "content_after_end";
    case WarningKind::kInvalidUtf8: return "invalid_utf8";
  }
  return "?";
}

const char* EventKindName(OutputEvent::Kind kind) {
  switch (kind) {
    case OutputEvent::Kind::kReasoningDelta: return "reasoning";
    case OutputEvent::Kind::kContentDelta: return "content";
    case OutputEvent::Kind::kToolCallBegin: return "tool_call_begin";
    case OutputEvent::Kind::kToolCallArgumentsDelta: return "tool_call_arguments";
    case OutputEvent::Kind::kToolCallEnd: return "tool_call_end";
    case OutputEvent::Kind::kStop: return "stop";
    case OutputEvent::Kind::kWarning: return "warning";
  }
  return "?";
}

std::vector<OutputEvent> NormalizeEvents(const std::vector<OutputEvent>& events) {
  std::vector<OutputEvent> out;
  for (const auto& event : events) {
    const bool is_delta = event.kind == OutputEvent::Kind::kReasoningDelta ||
                          event.kind == OutputEvent::Kind::kContentDelta ||
                          event.kind == OutputEvent::Kind::kToolCallArgumentsDelta;
    if (is_delta && event.text.empty()) continue;
    if (is_delta && !out.empty() && out.back().kind == event.kind &&
        out.back().index == event.index) {
      out.back().text += event.text;
    } else {
      out.push_back(event);
    }
  }
  return out;
}

OutputParser::OutputParser(ParserOptions options)
    : machine_(std::make_unique<Machine>(std::move(options))) {}

OutputParser::~OutputParser() = default;

std::vector<OutputEvent> OutputParser::Feed(std::string_view bytes) {
  machine_->Feed(bytes);
  return machine_->TakeEvents();
}

std::vector<OutputEvent> OutputParser::Finish() {
  machine_->Finish();
  return machine_->TakeEvents();
}

bool OutputParser::stopped() const { return machine_->stopped(); }

}  // namespace deepinfer::recipe
