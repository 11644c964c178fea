#include "server/openai_chat.h"

#include <algorithm>
#include <cmath>

#include "recipe/chat_request.h"
#include "server/chat_prepare.h"
#include "server/json_out.h"
#include "server/request_checks.h"

namespace deepinfer::server {
namespace {

using json = Json;
using recipe::OutputEvent;

constexpr const char* kFingerprint = "fp_deepinfer";

// -inf (a token the sampler could not pick) is not JSON; OpenAI-compatible servers clamp.
double FiniteLogprob(float value) { return std::isfinite(value) ? value : -9999.0; }

json TokenJson(const Tokenizer& tokenizer, TokenId id, float logprob) {
  const std::string text = tokenizer.Decode(std::vector<int32_t>{id});
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return {{"token", text}, {"logprob", FiniteLogprob(logprob)}, {"bytes", std::move(bytes)}};
}

json LogprobEntries(const Tokenizer& tokenizer, const std::vector<TokenLogprob>& logprobs) {
  json content = json::array();
  for (const TokenLogprob& lp : logprobs) {
    json entry = TokenJson(tokenizer, lp.token, lp.logprob);
    json top = json::array();
    for (const TopLogprob& alt : lp.top) top.push_back(TokenJson(tokenizer, alt.token, alt.logprob));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return content;
}

class ChatCompletionWriter : public ResponseWriter {
 public:
  ChatCompletionWriter(const Tokenizer& tokenizer, std::string model, int32_t num_choices,
                       bool thinking, bool include_usage, bool logprobs)
      : tokenizer_(tokenizer), id_(RandomId("chatcmpl-")), created_(UnixSeconds()),
        model_(std::move(model)), thinking_(thinking), include_usage_(include_usage),
        logprobs_(logprobs), choices_(static_cast<size_t>(num_choices)) {}

  ApiKind api() const override { return ApiKind::kOpenAI; }

  std::string StreamOpen() override {
    std::string out;
    for (size_t i = 0; i < choices_.size(); ++i) {
      json delta = {{"role", "assistant"}, {"content", ""}};
      if (thinking_) delta["reasoning_content"] = "";
      out += SseData(Chunk(ChoiceChunk(static_cast<int32_t>(i), std::move(delta))));
    }
    return out;
  }

  std::string StreamUpdates(const std::vector<ChoiceUpdate>& updates) override {
    std::string out;
    for (const ChoiceUpdate& update : updates) {
      json pending_logprobs = nullptr;
      if (logprobs_ && !update.logprobs.empty()) {
        pending_logprobs = {{"content", LogprobEntries(tokenizer_, update.logprobs)}};
      }
      for (const OutputEvent& event : update.events) {
        json delta = DeltaFor(event);
        if (delta.is_null()) continue;
        json choice = ChoiceChunk(update.index, std::move(delta));
        choice["logprobs"] = std::move(pending_logprobs);
        pending_logprobs = nullptr;
        out += SseData(Chunk(std::move(choice)));
      }
      if (!pending_logprobs.is_null()) {
        json choice = ChoiceChunk(update.index, json::object());
        choice["logprobs"] = std::move(pending_logprobs);
        out += SseData(Chunk(std::move(choice)));
      }
      if (update.finish && !update.finish->failed) {
        json choice = ChoiceChunk(update.index, json::object());
        choice["finish_reason"] = update.finish->parsed.finish_reason;
        out += SseData(Chunk(std::move(choice)));
      }
    }
    return out;
  }

  std::string StreamEnd(const GenerationUsage& usage) override {
    std::string out;
    if (include_usage_) {
      json chunk = Chunk(json::array());
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
      state.logprobs.insert(state.logprobs.end(), update.logprobs.begin(), update.logprobs.end());
      if (update.finish) state.parsed = update.finish->parsed;
    }
  }

  std::string Body(const GenerationUsage& usage) override {
    json choices = json::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
      const recipe::ParsedOutput& parsed = choices_[i].parsed;
      json message = {{"role", "assistant"}, {"content", parsed.content}};
      if (thinking_) message["reasoning_content"] = parsed.reasoning;
      if (!parsed.tool_calls.empty()) {
        json calls = json::array();
        for (const auto& call : parsed.tool_calls) {
          calls.push_back({{"id", call.id}, {"type", "function"},
                           {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
        }
        message["tool_calls"] = std::move(calls);
      }
      json logprobs = nullptr;
      if (logprobs_) logprobs = {{"content", LogprobEntries(tokenizer_, choices_[i].logprobs)}};
      choices.push_back({{"index", i}, {"message", std::move(message)}, {"logprobs", std::move(logprobs)},
                         {"finish_reason", parsed.finish_reason}});
    }
    json body = {{"id", id_}, {"object", "chat.completion"}, {"created", created_}, {"model", model_},
                 {"system_fingerprint", kFingerprint}, {"choices", std::move(choices)},
                 {"usage", OpenAIUsageJson(usage)}};
    return DumpJson(body);
  }

 private:
  struct ChoiceState {
    recipe::ParsedOutput parsed;
    std::vector<TokenLogprob> logprobs;
  };

  static json ChoiceChunk(int32_t index, json delta) {
    return {{"index", index}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  }

  json Chunk(json choice) const {
    json chunk = {{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_},
                  {"model", model_}, {"system_fingerprint", kFingerprint}};
    chunk["choices"] = choice.is_array() ? std::move(choice) : json::array({std::move(choice)});
    if (include_usage_) chunk["usage"] = nullptr;
    return chunk;
  }

  static json DeltaFor(const OutputEvent& event) {
    switch (event.kind) {
      case OutputEvent::Kind::kReasoningDelta: return {{"reasoning_content", event.text}};
      case OutputEvent::Kind::kContentDelta: return {{"content", event.text}};
      case OutputEvent::Kind::kToolCallBegin:
        return {{"tool_calls", json::array({{{"index", event.index}, {"id", event.id}, {"type", "function"},
                                              {"function", {{"name", event.text}, {"arguments", ""}}}}})}};
      case OutputEvent::Kind::kToolCallArgumentsDelta:
        return {{"tool_calls", json::array({{{"index", event.index},
                                              {"function", {{"arguments", event.text}}}}})}};
      default: return nullptr;
    }
  }

  const Tokenizer& tokenizer_;
  const std::string id_;
  const int64_t created_;
  const std::string model_;
  const bool thinking_;
  const bool include_usage_;
  const bool logprobs_;
  std::vector<ChoiceState> choices_;
};

}  // namespace

json OpenAIUsageJson(const GenerationUsage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"prompt_cache_hit_tokens", usage.cached_tokens},
          {"prompt_cache_miss_tokens", usage.prompt_tokens - usage.cached_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}},
          {"completion_tokens_details", {{"reasoning_tokens", usage.reasoning_tokens}}}};
}

Result<GenerationPlan> PlanChatCompletion(recipe::OrderedJson& body, const ServerContext& ctx) {
  Status status = CheckTopLevelFields(body, Endpoint::kChatCompletions);
  if (!status.ok()) return status;
  // n is the server's (the recipe converts single-choice requests); ReadExtraSampling reads it.
  recipe::OrderedJson n_field = nullptr;
  if (auto it = body.find("n"); it != body.end()) {
    n_field = *it;
    body.erase(it);
  }
  Result<recipe::ChatRequest> request = recipe::ParseChatRequestJson(body);
  if (!request.ok()) return request.status();
  if (!n_field.is_null()) body["n"] = n_field;
  Result<PreparedChat> prepared = PrepareChat(request.value(), body, ctx, ApiKind::kOpenAI);
  if (!prepared.ok()) return prepared.status();
  PreparedChat& chat = prepared.value();
  if (!chat.stream && body.contains("stream_options") && !body["stream_options"].is_null()) {
    return InvalidArgument("stream_options: only allowed when stream is true");
  }
  GenerationPlan plan;
  plan.stream = chat.stream;
  const int32_t num_choices = chat.spec.sampling.n;
  plan.writer = std::make_unique<ChatCompletionWriter>(ctx.tokenizer, chat.model, num_choices, chat.thinking,
                                                       chat.include_usage, chat.top_logprobs >= 0);
  plan.spec = std::move(chat.spec);
  return plan;
}

}  // namespace deepinfer::server
