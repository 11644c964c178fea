// The streaming output parser: fixture outputs (tests/data/recipe/parser-cases) parse to their
// expected messages, and (acceptance 3) every split of their bytes gives the unsplit result.
#include <gtest/gtest.h>

#include <random>

#include "base/error.h"
#include "recipe/output_fold.h"
#include "recipe/output_parser.h"
#include "tokenizer/utf8.h"
#include "recipe_test_util.h"

namespace deepinfer::recipe {
namespace {

using testing::ReadJson;

struct ParserCase {
  std::string name;
  ParserOptions options;
  std::string output;
  EngineFinish engine_finish = EngineFinish::kStop;
  OrderedJson expected;
};

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return out;
}

std::vector<ParserCase> LoadCases() {
  std::vector<ParserCase> cases;
  for (const auto& file : testing::JsonFiles("parser-cases")) {
    const OrderedJson spec = ReadJson(file);
    ParserCase c;
    c.name = file.substr(file.rfind('/') + 1);
    const OrderedJson& o = spec["options"];
    c.options.start_in_reasoning = o.value("start", "content") == "reasoning";
    c.options.strip_leading_newlines = o.value("strip_leading", true);
    c.options.parse_tool_calls = o.value("tools", true);
    c.options.json_mode = o.value("json_mode", false);
    c.options.stop = o.value("stop", std::vector<std::string>{});
    c.options.tool_call_id_seed = 42;
    if (o.value("engine_finish", "stop") == "length") c.engine_finish = EngineFinish::kLength;
    c.output = spec.contains("output_hex") ? FromHex(spec["output_hex"].get<std::string>())
                                           : spec["output"].get<std::string>();
    c.expected = spec["expected"];
    EXPECT_FALSE(spec.value("reason", "").empty()) << c.name;
    cases.push_back(std::move(c));
  }
  return cases;
}

// Feeds `pieces` and returns every event, Finish() included.
std::vector<OutputEvent> Parse(const ParserOptions& options, const std::vector<std::string_view>& pieces) {
  OutputParser parser(options);
  std::vector<OutputEvent> events;
  for (auto piece : pieces) {
    auto more = parser.Feed(piece);
    events.insert(events.end(), more.begin(), more.end());
  }
  auto last = parser.Finish();
  events.insert(events.end(), last.begin(), last.end());
  return events;
}

using deepinfer::tokenizer_internal::IsValidUtf8;  // the tokenizer's strict checker

std::string Describe(const std::vector<OutputEvent>& events) {
  std::string out;
  for (const auto& e : events) {
    out += std::string(EventKindName(e.kind)) + "[" + std::to_string(e.index) + "] '" + e.text + "'\n";
  }
  return out;
}

TEST(RecipeParserCases, ParseToTheExpectedMessage) {
  const auto cases = LoadCases();
  EXPECT_GE(cases.size(), 25u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    OutputAccumulator fold;
    fold.Add(Parse(c.options, {c.output}));
    const ParsedOutput out = fold.Take(c.engine_finish);
    const OrderedJson& e = c.expected;
    EXPECT_EQ(out.reasoning, e["reasoning"].get<std::string>());
    EXPECT_EQ(out.content, e["content"].get<std::string>());
    ASSERT_EQ(out.tool_calls.size(), e["tool_calls"].size());
    for (size_t k = 0; k < out.tool_calls.size(); ++k) {
      EXPECT_EQ(out.tool_calls[k].name, e["tool_calls"][k]["name"].get<std::string>());
      EXPECT_EQ(out.tool_calls[k].arguments, e["tool_calls"][k]["arguments"].get<std::string>());
      EXPECT_TRUE(nlohmann::json::accept(out.tool_calls[k].arguments)) << "arguments are JSON";
      EXPECT_TRUE(out.tool_calls[k].complete);
      EXPECT_TRUE(out.tool_calls[k].id.starts_with("call_") && out.tool_calls[k].id.size() == 29);
    }
    EXPECT_EQ(out.stop.has_value() ? StopKindName(*out.stop) : "null",
              e["stop"].is_null() ? "null" : e["stop"].get<std::string>());
    EXPECT_EQ(out.stop_string.value_or("<none>"),
              e["stop_string"].is_null() ? "<none>" : e["stop_string"].get<std::string>());
    std::vector<std::string> warnings;
    for (const auto& w : out.warnings) warnings.push_back(WarningKindName(w.kind));
    EXPECT_EQ(warnings, e["warnings"].get<std::vector<std::string>>());
    EXPECT_EQ(out.finish_reason, e["finish_reason"].get<std::string>());
  }
}

// Acceptance 3: every split point (two pieces), every pair of split points (three pieces, for
// outputs up to kMaxTripleSplitBytes), one byte at a time, and random multi-piece splits all
// give the unsplit event stream (after merging adjacent deltas); every delta is whole UTF-8.
TEST(RecipeParserCases, EverySplitGivesTheUnsplitResult) {
  constexpr size_t kMaxTripleSplitBytes = 160;
  constexpr int kRandomTrials = 20;
  size_t num_checked = 0;
  size_t num_expected = 0;
  std::mt19937 rng(1234);
  for (const auto& c : LoadCases()) {
    SCOPED_TRACE(c.name);
    const auto reference = NormalizeEvents(Parse(c.options, {c.output}));
    const std::string_view text = c.output;
    auto check = [&](const std::vector<std::string_view>& pieces, const std::string& how) {
      const auto events = Parse(c.options, pieces);
      for (const auto& e : events) ASSERT_TRUE(IsValidUtf8(e.text)) << how << ": " << e.text;
      const auto normalized = NormalizeEvents(events);
      ASSERT_EQ(normalized, reference) << how << "\n got:\n" << Describe(normalized)
                                       << " want:\n" << Describe(reference);
      ++num_checked;
    };
    for (size_t split = 0; split <= text.size(); ++split) {
      check({text.substr(0, split), text.substr(split)}, "split at " + std::to_string(split));
    }
    num_expected += text.size() + 1 + 1 + kRandomTrials;
    if (text.size() <= kMaxTripleSplitBytes) {
      for (size_t a = 1; a < text.size(); ++a) {
        for (size_t b = a + 1; b < text.size(); ++b) {
          check({text.substr(0, a), text.substr(a, b - a), text.substr(b)},
                "split at " + std::to_string(a) + " and " + std::to_string(b));
        }
      }
      num_expected += text.size() < 2 ? 0 : (text.size() - 1) * (text.size() - 2) / 2;
    }
    std::vector<std::string_view> bytes;
    for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
    check(bytes, "one byte at a time");
    for (int trial = 0; trial < kRandomTrials; ++trial) {
      std::vector<std::string_view> pieces;
      for (size_t at = 0; at < text.size();) {
        const size_t n = std::uniform_int_distribution<size_t>(0, 7)(rng);
        pieces.push_back(text.substr(at, n));
        at += n;
      }
      check(pieces, "random split " + std::to_string(trial));
    }
  }
  std::printf("[ recipe ] split parses checked: %zu\n", num_checked);
  EXPECT_EQ(num_checked, num_expected);
}

TEST(RecipeParser, StreamsArgumentsIncrementally) {
  ParserOptions options;
  OutputParser parser(options);
  auto events = parser.Feed("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"q\" string=\"true\">hel");
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[0].kind, OutputEvent::Kind::kToolCallBegin);
  EXPECT_EQ(events[0].text, "f");
  EXPECT_EQ(events[1].kind, OutputEvent::Kind::kToolCallArgumentsDelta);
  EXPECT_EQ(events[1].text, "{\"q\": \"hel");
  events = parser.Feed("lo\"</｜DSML｜parameter>\n</｜DSML｜invoke>");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].text, "lo\\\"\"}");
  EXPECT_EQ(events[1].kind, OutputEvent::Kind::kToolCallEnd);
  EXPECT_FALSE(parser.stopped());
  events = parser.Feed("\n</｜DSML｜tool_calls>");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].stop, StopKind::kToolCallsEnd);
  EXPECT_TRUE(parser.stopped());
}

TEST(RecipeParser, HoldsBackOnlyPossibleMarkers) {
  ParserOptions options;
  options.stop = {"STOP"};
  OutputParser parser(options);
  auto events = parser.Feed("abc ST");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].text, "abc ");  // "ST" may start "STOP"
  events = parser.Feed("AR\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].text, "STAR");  // "\n" may start "\n<｜DSML｜"
  events = parser.Finish();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].text, "\n");
}

TEST(RecipeParser, ToolCallIdsAreStableAndDistinct) {
  ParserOptions options;
  options.tool_call_id_seed = 7;
  options.tool_call_id_prefix = "toolu_";
  const std::string text = "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n</｜DSML｜invoke>\n"
                           "<｜DSML｜invoke name=\"b\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  const ParsedOutput one = ParseCompletion(text, options);
  const ParsedOutput two = ParseCompletion(text, options);
  ASSERT_EQ(one.tool_calls.size(), 2u);
  EXPECT_EQ(one.tool_calls[0].id, two.tool_calls[0].id);
  EXPECT_NE(one.tool_calls[0].id, one.tool_calls[1].id);
  EXPECT_TRUE(one.tool_calls[0].id.starts_with("toolu_"));
  options.tool_call_id_seed = 8;
  EXPECT_NE(ParseCompletion(text, options).tool_calls[0].id, one.tool_calls[0].id);
}

TEST(RecipeParser, FinishReasons) {
  ParserOptions options;
  EXPECT_EQ(ParseCompletion("hi", options, EngineFinish::kLength).finish_reason, "length");
  EXPECT_EQ(ParseCompletion("hi", options, EngineFinish::kContentFilter).finish_reason, "content_filter");
  EXPECT_EQ(ParseCompletion("hi", options, EngineFinish::kInsufficientResources).finish_reason,
            "insufficient_system_resource");
  const std::string call = "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  // The block closed before the length limit: the calls are complete.
  EXPECT_EQ(ParseCompletion(call, options, EngineFinish::kLength).finish_reason, "tool_calls");
  options.stop = {"x"};
  EXPECT_EQ(ParseCompletion("axb", options, EngineFinish::kLength).finish_reason, "stop");
}

TEST(RecipeParser, FeedAfterFinishIsABug) {
  OutputParser parser(ParserOptions{});
  (void)parser.Finish();
  EXPECT_THROW((void)parser.Feed("x"), Error);
}

}  // namespace
}  // namespace deepinfer::recipe
