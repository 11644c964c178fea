#include "server/openai_completions.h"

#include <fmt/format.h>

#include <cmath>

#include "recipe/json_reader.h"
#include "server/chat_prepare.h"
#include "server/json_out.h"
#include "server/request_checks.h"

namespace deepinfer::server {
namespace {

using json = Json;
using recipe::FieldReader;
using recipe::OrderedJson;
using recipe::OutputEvent;

constexpr int64_t kDefaultMaxTokens = 16;
constexpr size_t kMaxStops = 16;
constexpr size_t kMaxPrompts = 64;

struct CompletionPrompt {
  std::string text;  // what echo returns
  TokenIds ids;
};

bool IsTokenArray(const OrderedJson& value) {
  if (!value.is_array() || value.empty()) return false;
  for (const auto& v : value) {
    if (!v.is_number_integer()) return false;
  }
  return true;
}

Result<CompletionPrompt> TokenPrompt(const OrderedJson& ids, const std::string& path, const ServerContext& ctx) {
  CompletionPrompt prompt;
  const int64_t vocab = ctx.engine.info().vocab_size;
  for (size_t k = 0; k < ids.size(); ++k) {
    const int64_t id = ids[k].is_number_unsigned() && ids[k].get<uint64_t>() > INT64_MAX ? -1 : ids[k].get<int64_t>();
    if (id < 0 || (vocab > 0 && id >= vocab)) {
      return InvalidArgument(fmt::format("{}: token id {} is out of range [0, {})", recipe::IndexPath(path, k),
                                         ids[k].dump(), vocab));
    }
    prompt.ids.push_back(static_cast<TokenId>(id));
  }
  if (static_cast<int64_t>(prompt.ids.size()) >= ctx.engine.info().max_model_len) {
    return OutOfRange(fmt::format("This model's maximum context length is {} tokens. However, your prompt "
                                  "has {} tokens.", ctx.engine.info().max_model_len, prompt.ids.size()));
  }
  prompt.text = ctx.tokenizer.Decode(prompt.ids, /*skip_special_tokens=*/true);
  return prompt;
}

Result<CompletionPrompt> TextPrompt(const OrderedJson& text, const std::string& path, const ServerContext& ctx) {
  if (!text.is_string()) {
    return InvalidArgument(fmt::format("{}: expected a string or token ids, got {}", path, recipe::JsonTypeName(text)));
  }
  CompletionPrompt prompt;
  prompt.text = text.get<std::string>();
  Result<TokenIds> ids = EncodePrompt(prompt.text, ctx);
  if (!ids.ok()) return ids.status();
  prompt.ids = std::move(ids.value());
  return prompt;
}

Result<std::vector<CompletionPrompt>> ParsePrompts(const OrderedJson* prompt, const ServerContext& ctx) {
  if (prompt == nullptr) return InvalidArgument("prompt: required");
  std::vector<CompletionPrompt> out;
  auto add = [&](Result<CompletionPrompt> p) {
    if (!p.ok()) return p.status();
    out.push_back(std::move(p.value()));
    return Status::Ok();
  };
  Status status = Status::Ok();
  if (prompt->is_string()) {
    status = add(TextPrompt(*prompt, "prompt", ctx));
  } else if (IsTokenArray(*prompt)) {
    status = add(TokenPrompt(*prompt, "prompt", ctx));
  } else if (prompt->is_array() && !prompt->empty() && prompt->size() <= kMaxPrompts) {
    for (size_t k = 0; k < prompt->size() && status.ok(); ++k) {
      const OrderedJson& item = (*prompt)[k];
      const std::string path = recipe::IndexPath("prompt", k);
      status = IsTokenArray(item) ? add(TokenPrompt(item, path, ctx)) : add(TextPrompt(item, path, ctx));
    }
  } else {
    status = InvalidArgument(fmt::format(
        "prompt: expected a string, an array of strings or token ids, or an array of token-id arrays "
        "(1 to {} prompts)", kMaxPrompts));
  }
  if (!status.ok()) return status;
  return out;
}

Status ParseStops(FieldReader& body, std::vector<std::string>& stop) {
  const OrderedJson* value = body.Get("stop");
  if (value == nullptr) return Status::Ok();
  if (value->is_string()) {
    if (!value->get<std::string>().empty()) stop.push_back(value->get<std::string>());
    return Status::Ok();
  }
  if (!value->is_array() || value->size() > kMaxStops) {
    return InvalidArgument(fmt::format("stop: expected a string or an array of at most {} strings", kMaxStops));
  }
  for (size_t k = 0; k < value->size(); ++k) {
    if (!(*value)[k].is_string()) return InvalidArgument(fmt::format("stop[{}]: expected a string", k));
    if (!(*value)[k].get<std::string>().empty()) stop.push_back((*value)[k].get<std::string>());
  }
  return Status::Ok();
}

// Fields shared with chat, read the chat parser's way.
Status ParseSampling(FieldReader& body, SamplingParams& sampling, int32_t& logprobs, bool& echo) {
  if (auto t = body.Number("temperature", 0.0, 2.0)) sampling.temperature = static_cast<float>(*t);
  if (auto p = body.Number("top_p", 0.0, 1.0)) sampling.top_p = static_cast<float>(*p);
  if (auto k = body.Int("top_k", -1, INT32_MAX)) sampling.top_k = *k < 0 ? 0 : static_cast<int32_t>(*k);
  if (auto p = body.Number("presence_penalty", -2.0, 2.0)) sampling.presence_penalty = static_cast<float>(*p);
  if (auto p = body.Number("frequency_penalty", -2.0, 2.0)) sampling.frequency_penalty = static_cast<float>(*p);
  if (auto seed = body.Int("seed", INT64_MIN, INT64_MAX)) sampling.seed = static_cast<uint64_t>(*seed);
  if (auto k = body.Int("logprobs", 0, kMaxLogprobs)) logprobs = static_cast<int32_t>(*k);
  echo = body.Bool("echo").value_or(false);
  if (!body.ok()) return body.status();
  if (echo && logprobs >= 0) return InvalidArgument("echo: echo with logprobs (prompt logprobs) is not supported");
  sampling.logprobs = logprobs;
  return Status::Ok();
}

class CompletionWriter : public ResponseWriter {
 public:
  CompletionWriter(const Tokenizer& tokenizer, std::string model, std::vector<std::string> echo,
                   int32_t n, bool include_usage, bool logprobs)
      : tokenizer_(tokenizer), id_(RandomId("cmpl-")), created_(UnixSeconds()), model_(std::move(model)),
        include_usage_(include_usage), logprobs_(logprobs), choices_(echo.size() * static_cast<size_t>(n)) {
    for (size_t i = 0; i < choices_.size(); ++i) choices_[i].echo = echo[i / static_cast<size_t>(n)];
  }

  ApiKind api() const override { return ApiKind::kOpenAI; }

  std::string StreamOpen() override {
    std::string out;
    for (size_t i = 0; i < choices_.size(); ++i) {
      if (choices_[i].echo.empty()) continue;
      out += SseData(Chunk(ChoiceJson(static_cast<int32_t>(i), choices_[i].echo, nullptr, nullptr)));
      choices_[i].offset += choices_[i].echo.size();
    }
    return out;
  }

  std::string StreamUpdates(const std::vector<ChoiceUpdate>& updates) override {
    std::string out;
    for (const ChoiceUpdate& update : updates) {
      ChoiceState& state = choices_[static_cast<size_t>(update.index)];
      std::string text;
      for (const OutputEvent& e : update.events) {
        if (e.kind == OutputEvent::Kind::kContentDelta) text += e.text;
      }
      json logprobs = nullptr;
      if (logprobs_ && !update.logprobs.empty()) logprobs = LegacyLogprobs(update.logprobs, state.offset);
      state.offset += text.size();
      if (!text.empty() || !logprobs.is_null()) {
        out += SseData(Chunk(ChoiceJson(update.index, text, std::move(logprobs), nullptr)));
      }
      if (update.finish && !update.finish->failed) {
        out += SseData(Chunk(ChoiceJson(update.index, "", nullptr, update.finish->parsed.finish_reason)));
      }
    }
    return out;
  }

  std::string StreamEnd(const GenerationUsage& usage) override {
    std::string out;
    if (include_usage_) {
      json chunk = Chunk(nullptr);
      chunk["choices"] = json::array();
      chunk["usage"] = OpenAIUsageJson(usage);
      out += SseData(chunk);
    }
    return out + "data: [DONE]\n\n";
  }

  std::string KeepAlive() override { return ": keep-alive\n\n"; }

  void Collect(const std::vector<ChoiceUpdate>& updates) override {
    for (const ChoiceUpdate& update : updates) {
      ChoiceState& state = choices_[static_cast<size_t>(update.index)];
      for (const OutputEvent& e : update.events) {
        if (e.kind == OutputEvent::Kind::kContentDelta) state.text += e.text;
      }
      state.logprobs.insert(state.logprobs.end(), update.logprobs.begin(), update.logprobs.end());
      if (update.finish) state.finish_reason = update.finish->parsed.finish_reason;
    }
  }

  std::string Body(const GenerationUsage& usage) override {
    json choices = json::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
      const ChoiceState& state = choices_[i];
      json logprobs = logprobs_ ? LegacyLogprobs(state.logprobs, state.echo.size()) : json(nullptr);
      choices.push_back(ChoiceJson(static_cast<int32_t>(i), state.echo + state.text, std::move(logprobs),
                                   state.finish_reason));
    }
    json body = Chunk(std::move(choices));
    body["usage"] = OpenAIUsageJson(usage);
    return DumpJson(body);
  }

 private:
  struct ChoiceState {
    std::string echo;
    std::string text;  // non-stream
    std::vector<TokenLogprob> logprobs;
    std::string finish_reason;
    size_t offset = 0;  // stream: bytes sent so far (text_offset)
  };

  static json ChoiceJson(int32_t index, const std::string& text, json logprobs, json finish_reason) {
    return {{"index", index}, {"text", text}, {"logprobs", std::move(logprobs)},
            {"finish_reason", std::move(finish_reason)}};
  }

  json Chunk(json choices) const {
    json chunk = {{"id", id_}, {"object", "text_completion"}, {"created", created_}, {"model", model_},
                  {"system_fingerprint", "fp_deepinfer"}};
    chunk["choices"] = choices.is_array() ? std::move(choices) : json::array({std::move(choices)});
    if (include_usage_) chunk["usage"] = nullptr;
    return chunk;
  }

  json LegacyLogprobs(const std::vector<TokenLogprob>& logprobs, size_t offset) const {
    json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
    for (const TokenLogprob& lp : logprobs) {
      const std::string text = tokenizer_.Decode(std::vector<int32_t>{lp.token}, true);
      tokens.push_back(text);
      token_logprobs.push_back(std::isfinite(lp.logprob) ? lp.logprob : -9999.0);
      json alternatives = json::object();
      for (const TopLogprob& alt : lp.top) {
        alternatives[tokenizer_.Decode(std::vector<int32_t>{alt.token}, true)] =
            std::isfinite(alt.logprob) ? alt.logprob : -9999.0;
      }
      top.push_back(std::move(alternatives));
      offsets.push_back(offset);
      offset += text.size();
    }
    return {{"tokens", std::move(tokens)}, {"token_logprobs", std::move(token_logprobs)},
            {"top_logprobs", std::move(top)}, {"text_offset", std::move(offsets)}};
  }

  const Tokenizer& tokenizer_;
  const std::string id_;
  const int64_t created_;
  const std::string model_;
  const bool include_usage_;
  const bool logprobs_;
  std::vector<ChoiceState> choices_;
};

}  // namespace

Result<GenerationPlan> PlanCompletion(OrderedJson& body, const ServerContext& ctx) {
  Status status = CheckTopLevelFields(body, Endpoint::kCompletions);
  if (!status.ok()) return status;
  FieldReader reader(body, "");
  const std::string model = reader.String("model").value_or("");
  if (!model.empty() && !ctx.IsServedModel(model)) {
    return NotFound(fmt::format("The model `{}` does not exist.", model));
  }
  GenerationPlan plan;
  SamplingParams& sampling = plan.spec.sampling;
  int32_t logprobs = -1;
  bool echo = false;
  std::vector<std::string> stop;
  status = ParseSampling(reader, sampling, logprobs, echo);
  if (status.ok()) status = ParseStops(reader, stop);
  if (status.ok()) status = ReadExtraSampling(body, sampling);
  if (!status.ok()) return status;
  if (auto best_of = reader.Int("best_of", 1, kMaxN); best_of && *best_of != sampling.n) {
    return InvalidArgument("best_of: only best_of equal to n is supported");
  }
  plan.stream = reader.Bool("stream").value_or(false);
  bool include_usage = false;
  if (const OrderedJson* options = reader.Object("stream_options")) {
    if (!plan.stream) return InvalidArgument("stream_options: only allowed when stream is true");
    FieldReader options_reader(*options, "stream_options");
    include_usage = options_reader.Bool("include_usage").value_or(false);
    if (!options_reader.ok()) return options_reader.status();
  }
  const OrderedJson* max_tokens = reader.Get("max_tokens");
  std::optional<int64_t> requested = kDefaultMaxTokens;
  if (max_tokens != nullptr) requested = reader.Int("max_tokens", INT64_MIN, INT64_MAX);
  if (!reader.ok()) return reader.status();

  Result<std::vector<CompletionPrompt>> prompts = ParsePrompts(reader.Get("prompt"), ctx);
  if (!prompts.ok()) return prompts.status();
  std::vector<std::string> echo_texts;
  int32_t max_tokens_value = INT32_MAX;
  for (CompletionPrompt& prompt : prompts.value()) {
    Result<int32_t> resolved = ResolveMaxTokens(requested, static_cast<int64_t>(prompt.ids.size()), ctx);
    if (!resolved.ok()) return resolved.status();
    max_tokens_value = std::min(max_tokens_value, resolved.value());
    echo_texts.push_back(echo ? prompt.text : "");
    plan.spec.prompts.push_back(std::move(prompt.ids));
  }
  sampling.max_tokens = max_tokens_value;
  status = sampling.Validate();
  if (!status.ok()) return status;
  plan.spec.skip_special_tokens = true;
  plan.spec.make_processor = [stop]() -> std::unique_ptr<TextProcessor> {
    return std::make_unique<StopStringProcessor>(stop);
  };
  plan.writer = std::make_unique<CompletionWriter>(ctx.tokenizer, ctx.model_name(), std::move(echo_texts),
                                                   sampling.n, include_usage, logprobs >= 0);
  return plan;
}

}  // namespace deepinfer::server
