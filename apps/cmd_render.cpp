// deepinfer render [--model DIR] [--ids]
//
// Reads one chat-completion request body (OpenAI/DeepSeek shape: messages, tools, tool_choice,
// thinking {type}, reasoning_effort, response_format) on stdin and writes the exact prompt the
// server would feed the model: the text with nothing appended, or with --ids the token ids as
// one JSON array and a newline (tokenized with DIR/tokenizer.json, no special tokens added: BOS
// is part of the text). The chat-encoding rules come from DIR/config.json (recipe/encoding_rules.h);
// without --model the default model directory is used, and the DeepSeek-V4 rules if it has no
// config.json yet. A bad request prints "error: <field>: <reason>" and exits 1.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>

#include "apps/commands.h"
#include "apps/default_model.h"
#include "base/error.h"
#include "recipe/chat_request.h"
#include "recipe/encoding_rules.h"
#include "recipe/request_encoding.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::apps {
namespace {

struct RenderArgs {
  std::string model_dir;
  bool ids = false;
};

const recipe::EncodingRules& RulesFor(const RenderArgs& args, const std::string& dir) {
  if (args.model_dir.empty() && !std::filesystem::exists(dir + "/config.json")) {
    return recipe::DefaultRules();
  }
  return recipe::RulesForModelDir(dir);
}

void RunRender(const RenderArgs& args) {
  const std::string dir = args.model_dir.empty() ? DefaultModelDir() : args.model_dir;
  const recipe::EncodingRules& rules = RulesFor(args, dir);
  const std::string body{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  Result<recipe::ChatRequest> request = recipe::ParseChatRequest(body);
  if (!request.ok()) throw Error(request.status().message());
  Result<recipe::EncodedChat> encoded = recipe::EncodeChatRequest(request.value(), rules);
  if (!encoded.ok()) throw Error(encoded.status().message());
  const std::string& prompt = encoded.value().prompt;
  if (!args.ids) {
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    return;
  }
  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::FromFile(dir + "/tokenizer.json");
  std::string out = "[";
  for (int32_t id : tokenizer->Encode(prompt)) {
    if (out.size() > 1) out += ',';
    out += std::to_string(id);
  }
  out += "]\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
}

void RegisterRender(CLI::App& app) {
  auto args = std::make_shared<RenderArgs>();
  CLI::App* cmd = app.add_subcommand(
      "render", "Render a chat-completion request (stdin) into the exact prompt text or token ids");
  cmd->add_option("--model", args->model_dir,
                  "model directory (config.json picks the chat encoding; tokenizer.json for --ids); "
                  "default: $DEEPINFER_MODEL or models/deepinfer-v4-demo");
  cmd->add_flag("--ids", args->ids, "print the token ids as one JSON array instead of the text");
  cmd->callback([args] { RunRender(*args); });
}

DEEPINFER_COMMAND("render", RegisterRender);

}  // namespace
}  // namespace deepinfer::apps
