// Request bodies -> prompts: OpenAI/DeepSeek chat completions and Anthropic Messages, the
// request-level conventions (tools placement, thinking default, effort aliases) and the
// user-facing 400 messages.
#include <gtest/gtest.h>

#include "recipe/anthropic_request.h"
#include "recipe/chat_request.h"
#include "recipe/request_encoding.h"
#include "recipe_test_util.h"

namespace deepinfer::recipe {
namespace {

using testing::FirstDifference;
using testing::ReadFile;
using testing::ReadJson;

std::string EncodeBody(const std::string& body, const EncodingRules& rules = DefaultRules()) {
  Result<ChatRequest> request = ParseChatRequest(body);
  EXPECT_TRUE(request.ok()) << request.status().ToString();
  if (!request.ok()) return "";
  Result<EncodedChat> encoded = EncodeChatRequest(request.value(), rules);
  EXPECT_TRUE(encoded.ok()) << encoded.status().ToString();
  return encoded.ok() ? encoded.value().prompt : "";
}

// API bodies rendered the way vLLM's DeepSeek-V4 wrapper feeds the reference encoder.
TEST(RecipeRequestCases, RenderAsTheReferenceWrapper) {
  const auto files = testing::JsonFiles("request-cases");
  EXPECT_GE(files.size(), 10u);
  for (const auto& file : files) {
    SCOPED_TRACE(file);
    const OrderedJson spec = ReadJson(file);
    EXPECT_FALSE(spec.value("reason", "").empty());
    const EncodingRules* rules = FindRules(spec.value("rules", "deepseek-v4"));
    ASSERT_NE(rules, nullptr);
    const std::string expected = ReadFile(testing::WithoutExtension(file) + ".txt");
    const std::string actual = EncodeBody(spec["body"].dump(), *rules);
    EXPECT_EQ(actual, expected) << FirstDifference(expected, actual);
  }
}

TEST(RecipeRequests, ParserOptionsFollowTheRequest) {
  Result<ChatRequest> request = ParseChatRequest(R"({"messages": [{"role": "user", "content": "q"}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
      "response_format": {"type": "json_object"}, "stop": ["END", ""]})");
  ASSERT_TRUE(request.ok()) << request.status().ToString();
  const EncodedChat encoded = EncodeChatRequest(request.value(), DefaultRules()).value();
  EXPECT_TRUE(encoded.thinking);
  EXPECT_EQ(encoded.effort, "high");
  EXPECT_TRUE(encoded.parser.start_in_reasoning);
  EXPECT_TRUE(encoded.parser.parse_tool_calls);
  EXPECT_TRUE(encoded.parser.json_mode);
  EXPECT_EQ(encoded.parser.stop, std::vector<std::string>{"END"});

  request.value().tool_choice.kind = ToolChoiceKind::kNone;
  request.value().thinking = false;
  const EncodedChat chat = EncodeChatRequest(request.value(), DefaultRules()).value();
  EXPECT_FALSE(chat.parser.parse_tool_calls);
  EXPECT_FALSE(chat.parser.start_in_reasoning);
  EXPECT_EQ(chat.effort, "");
}

TEST(RecipeRequests, SamplingFields) {
  const ChatRequest r = ParseChatRequest(R"({"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": "q"}],
      "max_completion_tokens": 64, "temperature": 0.7, "top_p": 0.9, "seed": -3, "stream": true,
      "stream_options": {"include_usage": true}, "presence_penalty": 0.5, "n": 1, "stop": "x",
      "user": "u1", "reasoning_effort": 80, "thinking": {"type": "enabled"}})").value();
  EXPECT_EQ(r.model, "deepseek-v4-flash");
  EXPECT_EQ(r.max_tokens, 64);
  EXPECT_DOUBLE_EQ(r.temperature.value(), 0.7);
  EXPECT_DOUBLE_EQ(r.top_p.value(), 0.9);
  EXPECT_EQ(r.seed, -3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.user, "u1");
  EXPECT_EQ(r.reasoning_effort, "80");
  EXPECT_EQ(r.thinking, true);
}

// Every rejection names the field, so the HTTP 400 tells the user what to fix.
TEST(RecipeRequests, ErrorsNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[1, 2]", "request body: expected an object, got array"},
      {"{", "request body is not valid JSON"},
      {R"({})", "messages: required"},
      {R"({"messages": {}})", "messages: expected an array, got object"},
      {R"({"messages": []})", "messages: must not be empty"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role: required"},
      {R"({"messages": [{"role": "function", "content": "x"}]})", "messages[0].role: unknown role 'function'"},
      {R"({"messages": [{"role": "latest_reminder", "content": "x"}]})", "messages[0].role: unknown role"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content: required for a user message"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content: expected a string or an array"},
      {R"({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]})",
       "messages[0].content[0].type: content part type 'input_audio' is not supported"},
      {R"({"messages": [{"role": "system", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0].type: only text parts are allowed here"},
      {R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [{"id": "a", "function": {"arguments": "{}"}}]}]})",
       "messages[1].tool_calls[0].function.name: required"},
      {R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": 3}}]}]})",
       "messages[1].tool_calls[0].function.arguments: expected a string, got integer"},
      {R"({"messages": [{"role": "assistant", "content": "a", "prefix": true}, {"role": "user", "content": "q"}]})",
       "messages[0].prefix: only the last message may be a prefix"},
      {R"({"messages": [{"role": "user", "content": "q"}], "temperature": 3})", "temperature: 3 is out of range [0, 2]"},
      {R"({"messages": [{"role": "user", "content": "q"}], "max_tokens": 0})", "max_tokens: 0 is out of range"},
      {R"({"messages": [{"role": "user", "content": "q"}], "max_tokens": "9"})", "max_tokens: expected an integer, got string"},
      {R"({"messages": [{"role": "user", "content": "q"}], "n": 2})", "n: only n=1 is supported"},
      {R"({"messages": [{"role": "user", "content": "q"}], "stop": [1]})", "stop[0]: expected a string, got integer"},
      {R"({"messages": [{"role": "user", "content": "q"}], "thinking": {"type": "maybe"}})", "thinking.type: expected 'enabled' or 'disabled'"},
      {R"({"messages": [{"role": "user", "content": "q"}], "reasoning_effort": 1.5})", "reasoning_effort: expected a string or an integer"},
      {R"({"messages": [{"role": "user", "content": "q"}], "tools": [{"type": "retrieval"}]})", "tools[0].type: only 'function' tools are supported"},
      {R"({"messages": [{"role": "user", "content": "q"}], "tools": [{"type": "function", "function": {}}]})", "tools[0].function.name: required"},
      {R"({"messages": [{"role": "user", "content": "q"}], "tool_choice": "sometimes"})", "tool_choice: unknown value 'sometimes'"},
      {R"({"messages": [{"role": "user", "content": "q"}], "tool_choice": "required"})", "tool_choice: 'required' needs at least one tool"},
      {R"({"messages": [{"role": "user", "content": "q"}], "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}})",
       "tool_choice.function.name: 'g' is not one of the request's tools"},
      {R"({"messages": [{"role": "user", "content": "q"}], "response_format": {"type": "yaml"}})", "response_format.type: expected text, json_object or json_schema"},
      {R"({"messages": [{"role": "user", "content": "q"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})",
       "response_format.json_schema.schema: required"},
  };
  for (const auto& [body, message] : cases) {
    Result<ChatRequest> request = ParseChatRequest(body);
    ASSERT_FALSE(request.ok()) << body;
    EXPECT_EQ(request.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(request.status().message().starts_with(message))
        << body << "\n  got: " << request.status().message() << "\n  want: " << message;
  }
}

TEST(RecipeRequests, EncodeErrorsKeepRequestIndices) {
  // The inserted system message (for tools) must not shift the index users see.
  Result<ChatRequest> request = ParseChatRequest(R"({"messages": [{"role": "user", "content": "q"},
      {"role": "developer", "content": ""}], "tools": [{"type": "function", "function": {"name": "f"}}]})");
  ASSERT_TRUE(request.ok());
  const Status status = EncodeChatRequest(request.value(), DefaultRules()).status();
  EXPECT_EQ(status.message(), "messages[1]: a developer message needs content");
  request.value().reasoning_effort = "turbo";
  EXPECT_TRUE(EncodeChatRequest(request.value(), DefaultRules()).status().message().starts_with(
      "reasoning_effort: 'turbo' is not supported by deepseek-v4"));
}

TEST(RecipeRequests, ObjectArgumentsAndContentParts) {
  // Arguments sent as an object render like the equivalent JSON string; text parts join with
  // a blank line, like the reference's content blocks.
  const std::string as_object = EncodeBody(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": {"x": 1, "y": "z"}}}]},
      {"role": "tool", "tool_call_id": "1", "content": "ok"}], "thinking": {"type": "disabled"}})");
  const std::string as_string = EncodeBody(R"({"messages": [{"role": "user", "content": "a\n\nb"},
      {"role": "assistant", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1, \"y\": \"z\"}"}}]},
      {"role": "tool", "tool_call_id": "1", "content": [{"type": "text", "text": "ok"}]}], "thinking": {"type": "disabled"}})");
  EXPECT_EQ(as_object, as_string);
  EXPECT_NE(as_object.find("<｜User｜>a\n\nb<｜Assistant｜></think>"), std::string::npos);
}

std::string EncodeAnthropic(const std::string& body) {
  Result<ChatRequest> request = ParseAnthropicRequest(body);
  EXPECT_TRUE(request.ok()) << request.status().ToString();
  if (!request.ok()) return "";
  Result<EncodedChat> encoded = EncodeChatRequest(request.value(), DefaultRules());
  EXPECT_TRUE(encoded.ok()) << encoded.status().ToString();
  return encoded.ok() ? encoded.value().prompt : "";
}

// An Anthropic agent turn renders exactly like the same conversation sent in OpenAI form.
TEST(RecipeAnthropic, MatchesTheOpenAiForm) {
  const std::string anthropic = EncodeAnthropic(R"({"model": "claude-sonnet-4", "max_tokens": 100,
    "system": [{"type": "text", "text": "Be helpful."}],
    "tools": [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
    "messages": [
      {"role": "user", "content": "Weather in Oslo and Bergen?"},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "Two cities.", "signature": "s"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Oslo"}},
        {"type": "tool_use", "id": "t2", "name": "get_weather", "input": {"city": "Bergen"}}]},
      {"role": "user", "content": [{"type": "text", "text": "Be quick."},
        {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "rain"}]},
        {"type": "tool_result", "tool_use_id": "t1", "content": "snow", "is_error": false}]}],
    "thinking": {"type": "enabled", "budget_tokens": 2048}, "output_config": {"effort": "max"}})");
  const std::string openai = EncodeBody(R"({"messages": [
      {"role": "system", "content": "Be helpful."},
      {"role": "user", "content": "Weather in Oslo and Bergen?"},
      {"role": "assistant", "reasoning_content": "Two cities.", "content": "Checking.", "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
        {"id": "t2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Bergen\"}"}}]},
      {"role": "tool", "tool_call_id": "t2", "content": "rain"},
      {"role": "tool", "tool_call_id": "t1", "content": "snow"},
      {"role": "user", "content": "Be quick."}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "reasoning_effort": "max"})");
  EXPECT_EQ(anthropic, openai) << FirstDifference(openai, anthropic);
  EXPECT_NE(anthropic.find("<tool_result>snow</tool_result>\n\n<tool_result>rain</tool_result>\n\nBe quick."),
            std::string::npos);
}

TEST(RecipeAnthropic, PrefillAndFields) {
  const ChatRequest r = ParseAnthropicRequest(R"({"model": "claude-opus-4", "max_tokens": 10,
      "messages": [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "Hi"}],
      "stop_sequences": ["\n\n"], "temperature": 1.5, "top_k": 5, "metadata": {"user_id": "u"},
      "tool_choice": {"type": "any"}, "thinking": {"type": "disabled"}})").value();
  EXPECT_TRUE(r.messages.back().prefix);
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n\n"});
  EXPECT_EQ(r.max_tokens, 10);
  EXPECT_EQ(r.user, "u");
  EXPECT_EQ(r.thinking, false);
  EXPECT_EQ(r.tool_choice.kind, ToolChoiceKind::kAuto);
  EXPECT_EQ(EncodeChatRequest(r, DefaultRules()).value().prompt,
            "<｜begin▁of▁sentence｜><｜User｜>Say hi<｜Assistant｜></think>Hi");
}

TEST(RecipeAnthropic, ErrorsNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"messages": [{"role": "user", "content": "q"}]})", "max_tokens: required"},
      {R"({"max_tokens": 5, "messages": [{"role": "system", "content": "q"}]})", "messages[0].role: expected 'user' or 'assistant'"},
      {R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]})",
       "messages[0].content[0].type: content block type 'document' is not supported"},
      {R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]})",
       "messages[0].content[0].source.type: image source type 'file' is not supported"},
      {R"({"max_tokens": 5, "messages": [{"role": "user", "content": "q"}], "tools": [{"type": "web_search_20250305", "name": "web_search"}]})",
       "tools[0].type: server tool 'web_search_20250305' is not supported"},
      {R"({"max_tokens": 5, "messages": [{"role": "user", "content": "q"}], "tools": [{"name": "f"}]})", "tools[0].input_schema: required"},
      {R"({"max_tokens": 5, "messages": [{"role": "user", "content": "q"}], "tool_choice": {"type": "tool", "name": "zz"}})",
       "tool_choice.name: 'zz' is not one of the request's tools"},
      {R"({"max_tokens": 5, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": 3}]}]})",
       "messages[0].content[0].input: expected an object, got integer"},
      {R"({"max_tokens": 5, "system": 7, "messages": [{"role": "user", "content": "q"}]})", "system: expected a string or text blocks"},
  };
  for (const auto& [body, message] : cases) {
    Result<ChatRequest> request = ParseAnthropicRequest(body);
    ASSERT_FALSE(request.ok()) << body;
    EXPECT_TRUE(request.status().message().starts_with(message))
        << body << "\n  got: " << request.status().message() << "\n  want: " << message;
  }
}

TEST(RecipeAnthropic, ImagesNeedAnImageModel) {
  const char* body = R"({"max_tokens": 5, "messages": [{"role": "user", "content": [
      {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}},
      {"type": "text", "text": "what is this"}]}], "thinking": {"type": "disabled"}})";
  const ChatRequest request = ParseAnthropicRequest(body).value();
  EXPECT_FALSE(EncodeChatRequest(request, DefaultRules()).ok());
  const EncodedChat vision = EncodeChatRequest(request, *FindRules("deepseek-v4-vision-exp")).value();
  EXPECT_EQ(vision.prompt,
            "<｜begin▁of▁sentence｜><｜User｜><｜deepseek_image｜>\n\nwhat is this<｜Assistant｜></think>");
  EXPECT_EQ(vision.image_urls, std::vector<std::string>{"data:image/png;base64,QUJD"});
}

}  // namespace
}  // namespace deepinfer::recipe
