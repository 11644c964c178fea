// deepinfer generate [MODEL_DIR] --prompt TEXT | --prompt-ids 1,2,3 | --input FILE.jsonl
//
//   --prompt TEXT          prints the completion text
//   --prompt-ids 1,2,3     prints the generated token ids, comma-separated (greedy by default)
//   --input IN --output OUT  a batch: each input line {"prompt": ...} or {"messages": [...]}
//                          with OpenAI sampling fields; each output line {"index", "text",
//                          "prompt_tokens", "completion_tokens", "cached_tokens",
//                          "finish_reason"}, with a progress bar on stderr.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "apps/commands.h"
#include "apps/engine_flags.h"
#include "base/error.h"
#include "base/timer.h"
#include "llm/llm.h"
#include "recipe/chat_request.h"
#include "recipe/request_encoding.h"

namespace deepinfer::apps {
namespace {

struct GenerateArgs {
  EngineFlags engine;
  std::string prompt;
  std::string prompt_ids;
  std::string input, output;
  int32_t max_tokens = 64;
  std::optional<float> temperature, top_p, min_p;
  std::optional<int32_t> top_k;
  std::optional<uint64_t> seed;
  int32_t n = 1;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};

TokenIds ParseIds(const std::string& text) {
  TokenIds ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<TokenId>(v));
    } catch (const std::exception&) {
      DI_THROW("--prompt-ids: '{}' is not a token id (expected a comma-separated list like 1,2,3)", item);
    }
  }
  if (ids.empty()) DI_THROW("--prompt-ids is empty");
  return ids;
}

SamplingParams BaseSampling(const GenerateArgs& a, bool greedy_default) {
  SamplingParams s;
  s.temperature = a.temperature.value_or(greedy_default ? 0.f : 1.f);
  if (a.top_p) s.top_p = *a.top_p;
  if (a.top_k) s.top_k = *a.top_k;
  if (a.min_p) s.min_p = *a.min_p;
  s.seed = a.seed;
  s.max_tokens = a.max_tokens;
  s.n = a.n;
  s.stop = a.stop;
  s.ignore_eos = a.ignore_eos;
  if (Status st = s.Validate(); !st.ok()) throw Error(st.message());
  return s;
}

// Reads OpenAI-style sampling fields of one batch line over `base`.
SamplingParams LineSampling(const nlohmann::json& j, SamplingParams s, size_t line) {
  auto num = [&](const char* key, auto& field) {
    if (!j.contains(key) || j[key].is_null()) return;
    if (!j[key].is_number()) DI_THROW("input line {}: '{}' must be a number", line, key);
    field = j[key].get<std::decay_t<decltype(field)>>();
  };
  num("temperature", s.temperature);
  num("top_p", s.top_p);
  num("top_k", s.top_k);
  num("min_p", s.min_p);
  num("max_tokens", s.max_tokens);
  num("max_completion_tokens", s.max_tokens);
  num("presence_penalty", s.presence_penalty);
  num("frequency_penalty", s.frequency_penalty);
  num("repetition_penalty", s.repetition_penalty);
  num("n", s.n);
  if (j.contains("seed") && j["seed"].is_number_integer()) s.seed = j["seed"].get<uint64_t>();
  if (j.contains("stop")) {
    if (j["stop"].is_string()) s.stop = {j["stop"].get<std::string>()};
    else if (j["stop"].is_array()) s.stop = j["stop"].get<std::vector<std::string>>();
  }
  if (Status st = s.Validate(); !st.ok()) DI_THROW("input line {}: {}", line, st.message());
  return s;
}

void ProgressBar(size_t done, size_t total, double elapsed) {
  const int width = 30;
  const int filled = total ? static_cast<int>(width * done / total) : width;
  std::fprintf(stderr, "\r[%.*s%*s] %zu/%zu  %.1fs", filled, "##############################", width - filled, "", done,
               total, elapsed);
  if (done == total) std::fprintf(stderr, "\n");
}

void RunBatch(const GenerateArgs& a, LLM& llm) {
  std::ifstream in(a.input);
  if (!in) DI_THROW("cannot open --input '{}'", a.input);
  std::vector<TokenIds> prompts;
  std::vector<SamplingParams> sampling;
  std::string text;
  size_t line_no = 0;
  const SamplingParams base = BaseSampling(a, false);
  while (std::getline(in, text)) {
    ++line_no;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      DI_THROW("input line {}: not JSON: {}", line_no, e.what());
    }
    if (j.contains("prompt") && j["prompt"].is_string()) {
      prompts.push_back(llm.tokenizer().Encode(j["prompt"].get<std::string>()));
    } else if (j.contains("messages")) {
      auto req = recipe::ParseChatRequest(text);
      if (!req.ok()) DI_THROW("input line {}: {}", line_no, req.status().message());
      auto enc = recipe::EncodeChatRequest(req.value(), llm.rules());
      if (!enc.ok()) DI_THROW("input line {}: {}", line_no, enc.status().message());
      prompts.push_back(llm.tokenizer().Encode(enc->prompt));
    } else {
      DI_THROW("input line {}: needs \"prompt\" (a string) or \"messages\"", line_no);
    }
    sampling.push_back(LineSampling(j, base, line_no));
  }
  std::ofstream out(a.output);
  if (!out) DI_THROW("cannot write --output '{}'", a.output);
  Stopwatch clock;
  size_t done = 0;
  const auto outs = llm.GenerateIds(prompts, sampling, [&](size_t) { ProgressBar(++done, prompts.size(), clock.Seconds()); });
  for (size_t i = 0; i < outs.size(); ++i) {
    nlohmann::json line;
    line["index"] = i;
    if (!outs[i].status.ok()) {
      line["error"] = outs[i].status.message();
    } else {
      const auto& c = outs[i].outputs.front();
      line["text"] = c.text;
      if (outs[i].outputs.size() > 1) {
        line["texts"] = nlohmann::json::array();
        for (const auto& o : outs[i].outputs) line["texts"].push_back(o.text);
      }
      line["prompt_tokens"] = outs[i].usage.prompt_tokens;
      line["completion_tokens"] = outs[i].usage.completion_tokens;
      line["cached_tokens"] = outs[i].usage.cached_prompt_tokens;
      line["finish_reason"] = c.finish == FinishReason::kLength ? "length" : "stop";
    }
    out << line.dump() << "\n";
  }
}

void RunGenerate(const GenerateArgs& a) {
  const int modes = !a.prompt.empty() + !a.prompt_ids.empty() + !a.input.empty();
  if (modes != 1) DI_THROW("give exactly one of --prompt, --prompt-ids, --input");
  if (!a.input.empty() && a.output.empty()) DI_THROW("--input needs --output");
  LLM llm(ResolveEngineOptions(a.engine));
  if (!a.input.empty()) return RunBatch(a, llm);
  if (!a.prompt_ids.empty()) {
    const auto outs = llm.GenerateIds({ParseIds(a.prompt_ids)}, {BaseSampling(a, true)});
    if (!outs[0].status.ok()) throw Error(outs[0].status.message());
    for (const auto& c : outs[0].outputs) {
      std::string line;
      for (size_t i = 0; i < c.token_ids.size(); ++i) line += (i ? "," : "") + std::to_string(c.token_ids[i]);
      std::printf("%s\n", line.c_str());
    }
    return;
  }
  const auto outs = llm.Generate({a.prompt}, BaseSampling(a, false));
  if (!outs[0].status.ok()) throw Error(outs[0].status.message());
  for (const auto& c : outs[0].outputs) std::printf("%s\n", c.text.c_str());
}

void RegisterGenerate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Offline generation: one prompt, token ids, or a JSONL batch");
  AddEngineFlags(cmd, a->engine);
  cmd->add_option("--prompt", a->prompt, "prompt text (no special tokens added)");
  cmd->add_option("--prompt-ids", a->prompt_ids, "prompt token ids, comma-separated; prints token ids");
  cmd->add_option("--input", a->input, "JSONL batch input");
  cmd->add_option("--output", a->output, "JSONL batch output");
  cmd->add_option("--max-tokens", a->max_tokens, "completion tokens")->capture_default_str();
  cmd->add_option("--temperature", a->temperature, "0 = greedy (default 1; --prompt-ids: 0)");
  cmd->add_option("--top-p", a->top_p, "nucleus sampling");
  cmd->add_option("--top-k", a->top_k, "top-k sampling (0: off)");
  cmd->add_option("--min-p", a->min_p, "min-p sampling");
  cmd->add_option("--seed", a->seed, "sampling seed");
  cmd->add_option("--n", a->n, "completions per prompt")->capture_default_str();
  cmd->add_option("--stop", a->stop, "stop string (repeatable)");
  cmd->add_flag("--ignore-eos", a->ignore_eos, "keep generating past EOS");
  cmd->callback([a] { RunGenerate(*a); });
}

}  // namespace
DEEPINFER_COMMAND("generate", RegisterGenerate);
}  // namespace deepinfer::apps
