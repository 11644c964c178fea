// libFuzzer target: the streaming output parser on arbitrary bytes and arbitrary splits.
// Input layout: byte 0 = option bits, byte 1 = split seed, then up to two stop strings
// separated by 0x00 before a 0x01 byte, then the model output. Invariants (abort on violation):
//   * the split parse equals the unsplit parse (after merging adjacent deltas);
//   * every delta is valid UTF-8; nothing but warnings follows a Stop;
//   * tool-call events are well nested and every finished call's arguments are a JSON object.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "recipe/output_fold.h"
#include "recipe/output_parser.h"
#include "tokenizer/utf8.h"

namespace {

using namespace deepinfer::recipe;

void Require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz_recipe_parser invariant violated: %s\n", what);
    std::abort();
  }
}

using deepinfer::tokenizer_internal::IsValidUtf8;  // the tokenizer's strict checker

// Feeds `text` in pieces of 0..8 bytes chosen by `seed` (seed 0: one piece).
std::vector<OutputEvent> Parse(const ParserOptions& options, std::string_view text, uint32_t seed) {
  OutputParser parser(options);
  std::vector<OutputEvent> events;
  for (size_t at = 0; at < text.size();) {
    size_t n = text.size();
    if (seed != 0) {
      seed = seed * 1103515245u + 12345u;
      n = (seed >> 16) % 9;
    }
    auto more = parser.Feed(text.substr(at, n));
    events.insert(events.end(), more.begin(), more.end());
    at += n;
  }
  auto last = parser.Finish();
  events.insert(events.end(), last.begin(), last.end());
  return events;
}

void CheckEvents(const std::vector<OutputEvent>& events) {
  bool stopped = false;
  int32_t num_begun = 0;
  int32_t open_call = -1;
  for (const auto& e : events) {
    Require(IsValidUtf8(e.text), "event text is valid UTF-8");
    if (stopped) Require(e.kind == OutputEvent::Kind::kWarning, "only warnings after a Stop");
    switch (e.kind) {
      case OutputEvent::Kind::kToolCallBegin:
        Require(open_call < 0 && e.index == num_begun, "calls begin in order, one at a time");
        open_call = num_begun++;
        break;
      case OutputEvent::Kind::kToolCallArgumentsDelta:
        Require(e.index == open_call, "arguments belong to the open call");
        break;
      case OutputEvent::Kind::kToolCallEnd:
        Require(e.index == open_call, "the open call ends");
        open_call = -1;
        break;
      case OutputEvent::Kind::kStop: stopped = true; break;
      default: break;
    }
  }
  Require(open_call < 0, "no call is left open after Finish");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  ParserOptions options;
  options.start_in_reasoning = data[0] & 1;
  options.strip_leading_newlines = data[0] & 2;
  options.parse_tool_calls = !(data[0] & 4);
  options.json_mode = data[0] & 8;
  const uint32_t seed = data[1] | (static_cast<uint32_t>(data[0]) << 8);
  std::string_view rest(reinterpret_cast<const char*>(data) + 2, size - 2);
  if (const size_t marker = rest.find('\x01'); marker != std::string_view::npos && marker <= 32) {
    std::string_view stops = rest.substr(0, marker);
    for (size_t at = 0; at <= stops.size();) {
      const size_t end = std::min(stops.find('\0', at), stops.size());
      if (end > at) options.stop.emplace_back(stops.substr(at, end - at));
      at = end + 1;
    }
    rest.remove_prefix(marker + 1);
  }
  const auto whole = NormalizeEvents(Parse(options, rest, 0));
  const auto split = Parse(options, rest, seed | 1);
  CheckEvents(split);
  Require(NormalizeEvents(split) == whole, "split parse equals the unsplit parse");

  OutputAccumulator fold;
  fold.Add(whole);
  const ParsedOutput out = fold.Take(EngineFinish::kStop);
  for (const auto& call : out.tool_calls) {
    Require(call.complete, "every call is closed after Finish");
    const auto args = nlohmann::json::parse(call.arguments, nullptr, false);
    Require(!args.is_discarded() && args.is_object(), "arguments are a JSON object");
  }
  return 0;
}
