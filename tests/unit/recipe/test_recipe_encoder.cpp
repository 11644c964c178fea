// The chat encoder against the reference encoder's goldens and our own reference-rendered
// cases (tests/data/recipe/README.md), plus the JSON serialiser and the rules selection.
#include <gtest/gtest.h>

#include "recipe/chat_encoder.h"
#include "recipe/chat_request.h"
#include "recipe/encoding_rules.h"
#include "recipe/output_fold.h"
#include "recipe/py_json.h"
#include "recipe_test_util.h"

namespace deepinfer::recipe {
namespace {

using testing::DataPath;
using testing::FirstDifference;
using testing::ReadFile;
using testing::ReadJson;

std::string RenderReferenceCase(const OrderedJson& input, bool thinking) {
  Result<std::vector<Message>> messages = ParseReferenceCase(input);
  EXPECT_TRUE(messages.ok()) << messages.status().ToString();
  RenderOptions options;
  options.thinking = thinking;
  Result<RenderedPrompt> prompt = RenderConversation(messages.value(), options, DefaultRules());
  EXPECT_TRUE(prompt.ok()) << prompt.status().ToString();
  return prompt.ok() ? prompt.value().text : "";
}

// Acceptance 1: the reference encoder's four goldens, rendered as its test harness does
// (cases 1-3 thinking mode, case 4 chat mode; case 1's tools on the first message).
TEST(RecipeGoldens, ReferenceEncoderGoldensRenderByteExact) {
  for (int i = 1; i <= 4; ++i) {
    const std::string dir = "encoding-dsv4/";
    const OrderedJson input = ReadJson(DataPath(dir + "test_input_" + std::to_string(i) + ".json"));
    const std::string expected = ReadFile(DataPath(dir + "test_output_" + std::to_string(i) + ".txt"));
    const std::string actual = RenderReferenceCase(input, /*thinking=*/i != 4);
    EXPECT_EQ(actual, expected) << "golden case " << i << ": " << FirstDifference(expected, actual);
  }
}

// The fixtures README's parse-back facts of golden case 1.
TEST(RecipeGoldens, Case1ParsesBack) {
  const OrderedJson input = ReadJson(DataPath("encoding-dsv4/test_input_1.json"));
  const std::string prompt = RenderReferenceCase(input, true);
  const std::string marker = "<｜Assistant｜><think>";
  const size_t first = prompt.find(marker) + marker.size();
  const size_t first_end = prompt.find("<｜User｜>", first);
  ParserOptions options;
  options.start_in_reasoning = true;
  const ParsedOutput turn1 = ParseCompletion(prompt.substr(first, first_end - first), options);
  EXPECT_EQ(turn1.reasoning,
            "The user wants to know the weather in Beijing. I should use the get_weather tool.");
  EXPECT_EQ(turn1.content, "");
  ASSERT_EQ(turn1.tool_calls.size(), 1u);
  EXPECT_EQ(turn1.tool_calls[0].name, "get_weather");
  EXPECT_EQ(nlohmann::json::parse(turn1.tool_calls[0].arguments),
            nlohmann::json::parse(R"({"location": "Beijing", "unit": "celsius"})"));
  EXPECT_EQ(turn1.tool_calls[0].arguments, R"({"location": "Beijing", "unit": "celsius"})");
  EXPECT_TRUE(turn1.tool_calls[0].complete);
  EXPECT_EQ(turn1.finish_reason, "tool_calls");
  EXPECT_TRUE(turn1.warnings.empty());

  const ParsedOutput last = ParseCompletion(prompt.substr(prompt.rfind(marker) + marker.size()), options);
  EXPECT_EQ(last.reasoning, "Got the weather data. Let me format a nice response.");
  EXPECT_NE(last.content.find("22°C"), std::string::npos);
  EXPECT_TRUE(last.tool_calls.empty());
  EXPECT_EQ(last.stop, StopKind::kEndOfSentence);
}

// Our own cases: each JSON names its rules, mode and the reason it exists; the .txt beside it
// is the reference encoder's rendering (provenance in tests/data/recipe/README.md).
TEST(RecipeOwnCases, RenderAsTheReference) {
  const auto files = testing::JsonFiles("encoding-cases");
  EXPECT_GE(files.size(), 12u);
  for (const auto& file : files) {
    SCOPED_TRACE(file);
    const OrderedJson spec = ReadJson(file);
    EXPECT_FALSE(spec.value("reason", "").empty()) << "every case states why it exists";
    const EncodingRules* rules = FindRules(spec.value("rules", "deepseek-v4"));
    ASSERT_NE(rules, nullptr);
    std::optional<std::string> effort;
    if (spec.contains("reasoning_effort")) {
      const auto& e = spec["reasoning_effort"];
      effort = e.is_string() ? e.get<std::string>() : std::to_string(e.get<int>());
    }
    Result<ResolvedEffort> resolved = ResolveEncoderEffort(*rules, effort);
    ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
    RenderOptions options;
    options.thinking = spec.value("thinking", true);
    options.drop_thinking = spec.value("drop_thinking", true);
    options.effort_prefix = resolved.value().prefix;
    Result<std::vector<Message>> messages = ParseReferenceCase(spec["input"]);
    ASSERT_TRUE(messages.ok()) << messages.status().ToString();
    Result<RenderedPrompt> prompt = RenderConversation(messages.value(), options, *rules);
    ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
    const std::string expected = ReadFile(testing::WithoutExtension(file) + ".txt");
    EXPECT_EQ(prompt.value().text, expected) << FirstDifference(expected, prompt.value().text);
  }
}

TEST(RecipePyJson, FloatReprMatchesPython) {
  const std::vector<std::pair<double, std::string>> cases = {
      {0.0, "0.0"}, {-0.0, "-0.0"}, {1.0, "1.0"}, {0.1, "0.1"}, {-1.5, "-1.5"},
      {1e-05, "1e-05"}, {0.0001, "0.0001"}, {1e16, "1e+16"}, {1e15, "1000000000000000.0"},
      {123456789.125, "123456789.125"}, {2.5e-07, "2.5e-07"}, {1e22, "1e+22"},
      {12345678901234567.0, "1.2345678901234568e+16"}, {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"}, {100.0, "100.0"}, {0.3, "0.3"},
      {2.0 / 3.0, "0.6666666666666666"}};
  for (const auto& [value, repr] : cases) EXPECT_EQ(PyFloatRepr(value), repr) << value;
}

TEST(RecipePyJson, DumpsLikePython) {
  const OrderedJson value = OrderedJson::parse(
      R"({"z": 1, "a": [true, false, null, 1.0, -2, 18446744073709551615], "s": "é/\"\\\n\t\u0001\u007f😀", "e": {}, "l": []})");
  EXPECT_EQ(PyJsonDumps(value),
            "{\"z\": 1, \"a\": [true, false, null, 1.0, -2, 18446744073709551615], "
            "\"s\": \"é/\\\"\\\\\\n\\t\\u0001\x7f😀\", \"e\": {}, \"l\": []}");
}

TEST(RecipeRules, ChosenFromConfig) {
  const std::string v4 = ReadFile(DataPath("configs/deepseek-v4-pro.config.json"));
  EXPECT_EQ(RulesForConfigJson(v4, "v4").name, "deepseek-v4");
  EXPECT_EQ(RulesForConfigJson(R"({"model_type": "deepseek_v41", "architectures": ["DeepseekV41ForCausalLM"]})", "x").name,
            "deepseek-v41");
  EXPECT_EQ(RulesForConfigJson(R"({"architectures": ["DeepseekV41ForCausalLM"]})", "x").name, "deepseek-v41");
  EXPECT_EQ(RulesForConfigJson(R"({"model_type": "deepseek_v4", "chat_encoding": "deepseek-v4-vision-exp"})", "x").name,
            "deepseek-v4-vision-exp");
  EXPECT_THROW(RulesForConfigJson(R"({"model_type": "llama"})", "x"), Error);
  EXPECT_THROW(RulesForConfigJson(R"({"chat_encoding": "nope"})", "x"), Error);
  EXPECT_THROW(RulesForConfigJson("not json", "x"), Error);
  EXPECT_THROW(RulesForModelDir("/nonexistent/model"), Error);
}

TEST(RecipeRules, EffortResolution) {
  const EncodingRules& v4 = DefaultRules();
  EXPECT_EQ(ResolveApiEffort(v4, std::nullopt).value().prefix, "");
  EXPECT_EQ(ResolveApiEffort(v4, "low").value().level, "high");
  EXPECT_TRUE(ResolveApiEffort(v4, "max").value().prefix.starts_with("Reasoning Effort: Absolute maximum"));
  EXPECT_FALSE(ResolveApiEffort(v4, "37").ok());
  EXPECT_FALSE(ResolveEncoderEffort(v4, "low").ok());  // the reference accepts None/high/max only
  const EncodingRules& v41 = *FindRules("deepseek-v41");
  EXPECT_EQ(ResolveApiEffort(v41, std::nullopt).value().level, "50");
  EXPECT_EQ(ResolveApiEffort(v41, "37").value().prefix,
            "Reasoning Effort: 37 (range 1-100, the higher the value, the more thorough the reasoning)\n\n");
  EXPECT_EQ(ResolveApiEffort(v41, "minimal").value().level, "25");
  EXPECT_FALSE(ResolveApiEffort(v41, "101").ok());
  EXPECT_FALSE(ResolveApiEffort(v41, "0").ok());
  const Status bad = ResolveApiEffort(v41, "huge").status();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("reasoning_effort"), std::string::npos);
}

Status RenderStatus(const char* messages_json, const EncodingRules& rules, bool thinking = false) {
  Result<std::vector<Message>> messages =
      ParseMessages(OrderedJson::parse(messages_json), MessageDialect::kReference, "messages");
  if (!messages.ok()) return messages.status();
  RenderOptions options;
  options.thinking = thinking;
  Result<RenderedPrompt> prompt = RenderConversation(messages.value(), options, rules);
  return prompt.ok() ? Status::Ok() : prompt.status();
}

TEST(RecipeEncoderErrors, NameTheMessage) {
  const EncodingRules& v4 = DefaultRules();
  const EncodingRules& v41 = *FindRules("deepseek-v41");
  struct Case {
    const char* messages;
    const EncodingRules* rules;
    const char* message;
  };
  const std::vector<Case> cases = {
      {R"([{"role": "user", "content": "x"}, {"role": "developer", "content": ""}])", &v4,
       "messages[1]: a developer message needs content"},
      {R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}])", &v4,
       "messages[0]: image input is not supported"},
      {R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "not json"}}]}])",
       &v41, "messages[1]: tool_calls[0].function.arguments: not valid JSON"},
      {R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "[1]"}}]}])",
       &v4, "messages[1]: tool_calls[0].function.arguments: must be a JSON object"},
      {R"([{"role": "user", "content": "q", "task": "dance"}])", &v4, "messages[0]: unknown task 'dance'"},
      {R"([{"role": "user", "content": "see <｜deepseek_image｜>"}])", &v41, "messages[0]: text contains the image token"},
  };
  for (const auto& c : cases) {
    const Status status = RenderStatus(c.messages, *c.rules);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << c.messages;
    EXPECT_TRUE(status.message().starts_with(c.message)) << status.message();
  }
}

TEST(RecipeEncoder, ToolCallBlockLayout) {
  const std::vector<ToolCall> calls = {{"a", "f", R"({"s": "x\ny", "n": 1.50, "o": {"k": [1, "二"]}})"},
                                       {"b", "g", "{}"}};
  EXPECT_EQ(RenderToolCalls(calls, DefaultRules()).value(),
            "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
            "<｜DSML｜parameter name=\"s\" string=\"true\">x\ny</｜DSML｜parameter>\n"
            "<｜DSML｜parameter name=\"n\" string=\"false\">1.5</｜DSML｜parameter>\n"
            "<｜DSML｜parameter name=\"o\" string=\"false\">{\"k\": [1, \"二\"]}</｜DSML｜parameter>\n"
            "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"g\">\n\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>");
  EXPECT_EQ(RenderToolCalls({{"a", "f", R"({"k": true})"}}, *FindRules("deepseek-v41")).value(),
            "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n"
            "<｜DSML｜ parameter name=\"k\" string=\"false\">true</｜DSML｜ parameter>\n"
            "</｜DSML｜ invoke>\n</｜DSML｜ calls>");
}

// Our extension for chat prefix completion in thinking mode: a final prefix holding only
// reasoning keeps it open; with content it is closed as the reference does.
TEST(RecipeEncoder, PrefixWithOpenReasoning) {
  Message user;
  user.parts.push_back(ContentPart::Text("q"));
  Message prefix;
  prefix.role = Role::kAssistant;
  prefix.reasoning_content = "Let me see";
  prefix.prefix = true;
  RenderOptions options;
  const std::string open = RenderConversation({user, prefix}, options, DefaultRules()).value().text;
  EXPECT_EQ(open, "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜><think>Let me see");
  ParserOptions parser;
  StartFromPrompt(open, parser);
  EXPECT_TRUE(parser.start_in_reasoning);
  EXPECT_FALSE(parser.strip_leading_newlines);

  prefix.content = "The answer";
  const std::string closed = RenderConversation({user, prefix}, options, DefaultRules()).value().text;
  EXPECT_EQ(closed, "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜><think>Let me see</think>The answer");
  StartFromPrompt(closed, parser);
  EXPECT_FALSE(parser.start_in_reasoning);
  EXPECT_FALSE(parser.strip_leading_newlines);
}

TEST(RecipeEncoder, ParserStartFromPrompt) {
  ParserOptions parser;
  StartFromPrompt("<｜User｜>q<｜Assistant｜><think>", parser);
  EXPECT_TRUE(parser.start_in_reasoning);
  EXPECT_TRUE(parser.strip_leading_newlines);
  StartFromPrompt("<｜User｜>q<｜Assistant｜></think>", parser);
  EXPECT_FALSE(parser.start_in_reasoning);
  EXPECT_TRUE(parser.strip_leading_newlines);
  StartFromPrompt("<｜User｜>q<｜Assistant｜></think><｜action｜>", parser);
  EXPECT_FALSE(parser.start_in_reasoning);
}

}  // namespace
}  // namespace deepinfer::recipe
