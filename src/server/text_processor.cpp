#include "server/text_processor.h"

#include <algorithm>

namespace deepinfer::server {
namespace {

using recipe::OutputEvent;

constexpr std::string_view kAssistantHeader = "<｜Assistant｜>";
constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";

void Append(std::vector<OutputEvent>& out, std::vector<OutputEvent> more) {
  for (auto& event : more) out.push_back(std::move(event));
}

OutputEvent MakeEvent(OutputEvent::Kind kind, std::string text) {
  OutputEvent event;
  event.kind = kind;
  event.text = std::move(text);
  return event;
}

bool IsToolEvent(const OutputEvent& event) {
  return event.kind == OutputEvent::Kind::kToolCallBegin ||
         event.kind == OutputEvent::Kind::kToolCallArgumentsDelta ||
         event.kind == OutputEvent::Kind::kToolCallEnd;
}

}  // namespace

ChatTextProcessor::ChatTextProcessor(const recipe::ParserOptions& options, std::string_view prefill)
    : parser_(options) {
  if (prefill.empty()) return;
  for (OutputEvent& event : parser_.Feed(prefill)) {
    if (IsToolEvent(event) || event.kind == OutputEvent::Kind::kStop) initial_.push_back(std::move(event));
  }
  if (parser_.stopped()) {
    Append(initial_, parser_.Finish());
    finished_ = true;
  }
}

std::vector<OutputEvent> ChatTextProcessor::Inject(std::string_view text) {
  std::vector<OutputEvent> out;
  for (OutputEvent& event : parser_.Feed(text)) {
    if (IsToolEvent(event) || event.kind == OutputEvent::Kind::kStop) out.push_back(std::move(event));
  }
  return out;
}

std::vector<OutputEvent> ChatTextProcessor::Feed(std::string_view text) { return parser_.Feed(text); }

std::vector<OutputEvent> ChatTextProcessor::Finish() {
  if (finished_) return {};
  finished_ = true;
  return parser_.Finish();
}

StopStringProcessor::StopStringProcessor(std::vector<std::string> stop) : stop_(std::move(stop)) {
  std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
}

std::vector<OutputEvent> StopStringProcessor::Feed(std::string_view text) {
  std::vector<OutputEvent> out;
  if (stopped_) return out;
  pending_.append(text);
  // The earliest stop string occurrence wins.
  size_t best = std::string::npos;
  const std::string* matched = nullptr;
  for (const std::string& stop : stop_) {
    const size_t at = pending_.find(stop);
    if (at < best) {
      best = at;
      matched = &stop;
    }
  }
  if (matched != nullptr) {
    if (best > 0) out.push_back(MakeEvent(OutputEvent::Kind::kContentDelta, pending_.substr(0, best)));
    OutputEvent stop_event = MakeEvent(OutputEvent::Kind::kStop, *matched);
    stop_event.stop = recipe::StopKind::kStopString;
    out.push_back(std::move(stop_event));
    pending_.clear();
    stopped_ = true;
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& stop : stop_) {
    for (size_t len = std::min(stop.size() - 1, pending_.size()); len > hold; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) == std::string_view(stop).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  if (pending_.size() > hold) {
    out.push_back(MakeEvent(OutputEvent::Kind::kContentDelta, pending_.substr(0, pending_.size() - hold)));
    pending_.erase(0, pending_.size() - hold);
  }
  return out;
}

std::vector<OutputEvent> StopStringProcessor::Finish() {
  std::vector<OutputEvent> out;
  if (!stopped_ && !pending_.empty()) out.push_back(MakeEvent(OutputEvent::Kind::kContentDelta, pending_));
  pending_.clear();
  return out;
}

void SplitPrefill(std::string_view prompt, bool has_prefill, recipe::ParserOptions& options,
                  std::string& prefill) {
  prefill.clear();
  const size_t header = has_prefill ? prompt.rfind(kAssistantHeader) : std::string_view::npos;
  if (header == std::string_view::npos) {
    recipe::StartFromPrompt(prompt, options);
    return;
  }
  size_t end = header + kAssistantHeader.size();
  const std::string_view rest = prompt.substr(end);
  if (rest.starts_with(kThinkStart)) end += kThinkStart.size();
  else if (rest.starts_with(kThinkEnd)) end += kThinkEnd.size();
  recipe::StartFromPrompt(prompt.substr(0, end), options);
  prefill = std::string(prompt.substr(end));
}

}  // namespace deepinfer::server
