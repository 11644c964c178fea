// deepinfer chat [MODEL_DIR] [--think] [--system TEXT] [--temperature T] [--max-tokens N]
//
// An interactive conversation on the terminal: each line typed is a user turn; the reply
// streams as it is generated (reasoning, when thinking is on, in dim text first). Commands:
// /think and /nothink switch thinking mode, /reset starts over, /exit (or end of input) quits.
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include <unistd.h>

#include "apps/commands.h"
#include "apps/engine_flags.h"
#include "llm/llm.h"

namespace deepinfer::apps {
namespace {

struct ChatArgs {
  EngineFlags engine;
  bool think = false;
  std::string system;
  float temperature = 0.6f;
  float top_p = 0.95f;
  int32_t max_tokens = 256;
  std::optional<uint64_t> seed;
};

void RunChat(const ChatArgs& a) {
  LLM llm(ResolveEngineOptions(a.engine));
  const bool tty = isatty(fileno(stdout));
  const char* dim = tty ? "\033[2m" : "";
  const char* reset = tty ? "\033[0m" : "";
  bool think = a.think;
  recipe::ChatRequest req;
  auto start_over = [&] {
    req = recipe::ChatRequest{};
    if (!a.system.empty()) {
      recipe::Message sys;
      sys.role = recipe::Role::kSystem;
      sys.content = a.system;
      req.messages.push_back(sys);
    }
  };
  start_over();
  std::fprintf(stderr, "deepinfer chat — %s (thinking %s). /think, /nothink, /reset, /exit\n",
               llm.engine().info().model_name.c_str(), think ? "on" : "off");
  std::string line;
  for (;;) {
    std::fprintf(stdout, "%s> ", tty ? "\n" : "");
    std::fflush(stdout);
    if (!std::getline(std::cin, line) || line == "/exit" || line == "/quit") break;
    if (line == "/think" || line == "/nothink") {
      think = line == "/think";
      std::printf("(thinking %s)\n", think ? "on" : "off");
      continue;
    }
    if (line == "/reset") {
      start_over();
      std::printf("(conversation cleared)\n");
      continue;
    }
    if (line.empty()) continue;
    recipe::Message user;
    user.role = recipe::Role::kUser;
    user.parts.push_back(recipe::ContentPart::Text(line));
    req.messages.push_back(user);
    req.thinking = think;
    SamplingParams s;
    s.temperature = a.temperature;
    s.top_p = a.top_p;
    s.max_tokens = a.max_tokens;
    s.seed = a.seed;
    bool in_reasoning = false;
    const ChatOutput out = llm.Chat(req, s, [&](const recipe::OutputEvent& e) {
      using Kind = recipe::OutputEvent::Kind;
      if (e.kind == Kind::kReasoningDelta) {
        if (!in_reasoning) std::fputs(dim, stdout);
        in_reasoning = true;
        std::fputs(e.text.c_str(), stdout);
      } else if (e.kind == Kind::kContentDelta) {
        if (in_reasoning) std::printf("%s\n", reset);
        in_reasoning = false;
        std::fputs(e.text.c_str(), stdout);
      }
      std::fflush(stdout);
    });
    if (in_reasoning) std::fputs(reset, stdout);
    std::printf("\n");
    if (!out.status.ok()) {
      std::fprintf(stderr, "error: %s\n", out.status.message().c_str());
      req.messages.pop_back();
      continue;
    }
    recipe::Message assistant;
    assistant.role = recipe::Role::kAssistant;
    assistant.content = out.message.content;
    if (think) assistant.reasoning_content = out.message.reasoning;
    req.messages.push_back(assistant);
  }
}

void RegisterChat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* cmd = app.add_subcommand("chat", "Interactive chat on the terminal (streaming)");
  AddEngineFlags(cmd, a->engine);
  cmd->add_flag("--think", a->think, "start with thinking mode on");
  cmd->add_option("--system", a->system, "system prompt");
  cmd->add_option("--temperature", a->temperature, "sampling temperature")->capture_default_str();
  cmd->add_option("--top-p", a->top_p, "nucleus sampling")->capture_default_str();
  cmd->add_option("--max-tokens", a->max_tokens, "tokens per reply")->capture_default_str();
  cmd->add_option("--seed", a->seed, "sampling seed");
  cmd->callback([a] { RunChat(*a); });
}

}  // namespace
DEEPINFER_COMMAND("chat", RegisterChat);
}  // namespace deepinfer::apps
