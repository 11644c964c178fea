#include "recipe/output_fold.h"

namespace deepinfer::recipe {

const char* EngineFinishReason(EngineFinish finish) {
  switch (finish) {
    case EngineFinish::kStop: return "stop";
    case EngineFinish::kLength: return "length";
    case EngineFinish::kContentFilter: return "content_filter";
    case EngineFinish::kInsufficientResources: return "insufficient_system_resource";
  }
  return "stop";
}

void OutputAccumulator::Add(const std::vector<OutputEvent>& events) {
  for (const auto& event : events) {
    switch (event.kind) {
      case OutputEvent::Kind::kReasoningDelta: out_.reasoning += event.text; break;
      case OutputEvent::Kind::kContentDelta: out_.content += event.text; break;
      case OutputEvent::Kind::kToolCallBegin:
        out_.tool_calls.push_back(ParsedToolCall{event.id, event.text, "", false});
        break;
      case OutputEvent::Kind::kToolCallArgumentsDelta:
        if (event.index >= 0 && static_cast<size_t>(event.index) < out_.tool_calls.size()) {
          out_.tool_calls[static_cast<size_t>(event.index)].arguments += event.text;
        }
        break;
      case OutputEvent::Kind::kToolCallEnd:
        if (event.index >= 0 && static_cast<size_t>(event.index) < out_.tool_calls.size()) {
          out_.tool_calls[static_cast<size_t>(event.index)].complete = true;
        }
        break;
      case OutputEvent::Kind::kStop:
        out_.stop = event.stop;
        if (event.stop == StopKind::kStopString) out_.stop_string = event.text;
        if (event.stop == StopKind::kToolCallsEnd) tool_block_closed_ = true;
        break;
      case OutputEvent::Kind::kWarning:
        out_.warnings.push_back(ParsedWarning{event.warning, event.text});
        break;
    }
  }
}

ParsedOutput OutputAccumulator::Take(EngineFinish engine_finish) {
  ParsedOutput out = std::move(out_);
  out_ = ParsedOutput{};
  if (out.stop_string.has_value()) {
    out.finish_reason = "stop";
  } else if (!out.tool_calls.empty() &&
             (engine_finish != EngineFinish::kLength || tool_block_closed_)) {
    out.finish_reason = "tool_calls";
  } else {
    out.finish_reason = EngineFinishReason(engine_finish);
  }
  tool_block_closed_ = false;
  return out;
}

ParsedOutput ParseCompletion(std::string_view text, const ParserOptions& options,
                             EngineFinish engine_finish) {
  OutputParser parser(options);
  OutputAccumulator fold;
  fold.Add(parser.Feed(text));
  fold.Add(parser.Finish());
  return fold.Take(engine_finish);
}

}  // namespace deepinfer::recipe
