// libFuzzer target: request JSON -> prompt, through every entry point of the encoder.
// Input: any bytes, taken as a request body (OpenAI chat completions, Anthropic Messages and
// the reference message dialect are all tried). Invariants checked (abort on violation):
//   * no crash, no exception escapes, errors are InvalidArgument statuses with a message;
//   * every prompt starts with BOS and rendering is deterministic;
//   * Python-style JSON text of the parsed body parses back to the same JSON.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "recipe/anthropic_request.h"
#include "recipe/chat_encoder.h"
#include "recipe/chat_request.h"
#include "recipe/py_json.h"
#include "recipe/request_encoding.h"

namespace {

using namespace deepinfer;
using namespace deepinfer::recipe;

void Require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz_recipe_encoder invariant violated: %s\n", what);
    std::abort();
  }
}

void RequireUserError(const Status& status) {
  Require(status.code() == StatusCode::kInvalidArgument, "errors are InvalidArgument");
  Require(!status.message().empty(), "errors carry a message");
}

void EncodeWithAllRules(const Result<ChatRequest>& request) {
  if (!request.ok()) return RequireUserError(request.status());
  for (const char* name : {"deepseek-v4", "deepseek-v4-vision-exp", "deepseek-v41"}) {
    const EncodingRules& rules = *FindRules(name);
    Result<EncodedChat> first = EncodeChatRequest(request.value(), rules);
    if (!first.ok()) {
      RequireUserError(first.status());
      continue;
    }
    Require(first.value().prompt.starts_with(kBos), "prompt starts with BOS");
    Result<EncodedChat> second = EncodeChatRequest(request.value(), rules);
    Require(second.ok() && second.value().prompt == first.value().prompt, "deterministic render");
  }
}

void RenderReference(const OrderedJson& body) {
  Result<std::vector<Message>> messages = ParseReferenceCase(body);
  if (!messages.ok()) return RequireUserError(messages.status());
  for (bool thinking : {true, false}) {
    RenderOptions options;
    options.thinking = thinking;
    options.drop_thinking = thinking;
    Result<RenderedPrompt> prompt = RenderConversation(messages.value(), options, DefaultRules());
    if (!prompt.ok()) RequireUserError(prompt.status());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<OrderedJson> body = ParseJsonText(text);
  if (!body.ok()) {
    RequireUserError(body.status());
    return 0;
  }
  const OrderedJson reparsed = OrderedJson::parse(PyJsonDumps(body.value()));
  Require(reparsed == body.value(), "PyJsonDumps round-trips");
  EncodeWithAllRules(ParseChatRequestJson(body.value()));
  EncodeWithAllRules(ParseAnthropicRequestJson(body.value()));
  RenderReference(body.value());
  return 0;
}
