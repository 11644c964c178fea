#include "server/chat_prepare.h"

#include <fmt/format.h>

#include <random>

#include "recipe/request_encoding.h"
#include "server/request_checks.h"

namespace deepinfer::server {
namespace {

using recipe::ToolChoiceKind;

constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";

Status CheckModel(const std::string& model, const ServerContext& ctx, ApiKind api) {
  if (model.empty()) {
    if (api == ApiKind::kAnthropic) return InvalidArgument("model: Field required");
    return Status::Ok();  // OpenAI clients always send one; curl users may not
  }
  if (ctx.IsServedModel(model)) return Status::Ok();
  // DeepSeek's Anthropic endpoint maps claude-* names onto its model; so do we.
  if (api == ApiKind::kAnthropic && model.starts_with("claude")) return Status::Ok();
  return NotFound(fmt::format("The model `{}` does not exist.", model));
}

// The start of a DSML tool-call block that forces a call (tool_choice required / named).
std::string ForcedToolBlock(const recipe::ChatRequest& request, const recipe::EncodingRules& rules) {
  std::string text =
      fmt::format("\n\n<｜DSML｜{}>\n<｜DSML｜{} name=\"", rules.dsml_calls_tag, rules.dsml_invoke_tag);
  if (request.tool_choice.kind == ToolChoiceKind::kNamed) text += request.tool_choice.name + "\">\n";
  return text;
}

uint64_t RandomSeed() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

Status FillSampling(const recipe::ChatRequest& request, const recipe::OrderedJson& body,
                    SamplingParams& sampling) {
  if (request.temperature) sampling.temperature = static_cast<float>(*request.temperature);
  if (request.top_p) sampling.top_p = static_cast<float>(*request.top_p);
  if (request.top_k) sampling.top_k = *request.top_k < 0 ? 0 : static_cast<int32_t>(std::min<int64_t>(*request.top_k, INT32_MAX));
  if (request.presence_penalty) sampling.presence_penalty = static_cast<float>(*request.presence_penalty);
  if (request.frequency_penalty) sampling.frequency_penalty = static_cast<float>(*request.frequency_penalty);
  if (request.seed) sampling.seed = static_cast<uint64_t>(*request.seed);
  if (request.top_logprobs && !request.logprobs) {
    return InvalidArgument("top_logprobs: requires logprobs to be true");
  }
  if (request.logprobs) sampling.logprobs = static_cast<int32_t>(request.top_logprobs.value_or(0));
  Status status = ReadExtraSampling(body, sampling);
  if (!status.ok()) return status;
  return sampling.Validate();
}

}  // namespace

Result<TokenIds> EncodePrompt(const std::string& text, const ServerContext& ctx) {
  TokenIds ids = ctx.tokenizer.Encode(text);
  const int64_t limit = ctx.engine.info().max_model_len;
  if (static_cast<int64_t>(ids.size()) >= limit) {
    return OutOfRange(fmt::format(
        "This model's maximum context length is {} tokens. However, your prompt has {} tokens "
        "and no room is left for the completion. Please reduce the length of the prompt.",
        limit, ids.size()));
  }
  if (ids.empty()) return InvalidArgument("prompt: must not be empty");
  return ids;
}

Result<int32_t> ResolveMaxTokens(std::optional<int64_t> requested, int64_t prompt_len,
                                 const ServerContext& ctx) {
  const int64_t limit = ctx.engine.info().max_model_len;
  const int64_t room = limit - prompt_len;
  if (!requested) return static_cast<int32_t>(std::min<int64_t>(room, INT32_MAX));
  if (*requested < 1) return InvalidArgument(fmt::format("max_tokens: must be >= 1, got {}", *requested));
  if (*requested > room) {
    return OutOfRange(fmt::format(
        "This model's maximum context length is {} tokens. However, you requested {} tokens "
        "({} in the prompt, {} for the completion). Please reduce the length of the prompt or "
        "max_tokens.",
        limit, prompt_len + *requested, prompt_len, *requested));
  }
  return static_cast<int32_t>(*requested);
}

Result<PreparedChat> PrepareChat(const recipe::ChatRequest& request, const recipe::OrderedJson& body,
                                 const ServerContext& ctx, ApiKind api) {
  Status status = CheckModel(request.model, ctx, api);
  if (!status.ok()) return status;
  status = CheckToolDefinitions(request.tools, api == ApiKind::kAnthropic ? Endpoint::kMessages
                                                                          : Endpoint::kChatCompletions);
  if (!status.ok()) return status;
  Result<recipe::EncodedChat> encoded = recipe::EncodeChatRequest(request, ctx.rules);
  if (!encoded.ok()) return encoded.status();

  PreparedChat out;
  out.stream = request.stream;
  out.include_usage = request.include_usage;
  out.thinking = encoded.value().thinking;
  out.model = request.model.empty() || api == ApiKind::kOpenAI ? ctx.model_name() : request.model;
  SamplingParams& sampling = out.spec.sampling;
  status = FillSampling(request, body, sampling);
  if (!status.ok()) return status;
  if (api == ApiKind::kAnthropic && sampling.n != 1) return InvalidArgument("n: Extra inputs are not permitted");
  out.top_logprobs = sampling.logprobs;

  std::string prompt = std::move(encoded.value().prompt);
  const auto& messages = request.messages;
  bool has_prefill = !messages.empty() && messages.back().role == recipe::Role::kAssistant &&
                     messages.back().prefix;
  const bool forced = request.tool_choice.kind == ToolChoiceKind::kRequired ||
                      request.tool_choice.kind == ToolChoiceKind::kNamed;
  if (forced && !request.tools.empty() && !has_prefill) {
    const std::string block = ForcedToolBlock(request, ctx.rules);
    const std::optional<int32_t> think_end = ctx.tokenizer.TokenToId(kThinkEnd);
    if (prompt.ends_with(kThinkStart) && think_end && sampling.n == 1) {
      // Reason freely first; the block follows the model's own "</think>" (Continuation).
      out.spec.continuation = Continuation{*think_end, block, ctx.tokenizer.Encode(block)};
    } else {
      if (prompt.ends_with(kThinkStart)) prompt += kThinkEnd;
      prompt += block;
      has_prefill = true;
    }
  }
  recipe::ParserOptions parser = encoded.value().parser;
  std::string prefill;
  SplitPrefill(prompt, has_prefill, parser, prefill);
  parser.tool_call_id_prefix = api == ApiKind::kAnthropic ? "toolu_" : "call_";
  parser.tool_call_id_seed = RandomSeed();
  recipe::ParserOptions after_prompt;
  recipe::StartFromPrompt(prompt, after_prompt);

  Result<TokenIds> tokens = EncodePrompt(prompt, ctx);
  if (!tokens.ok()) return tokens.status();
  Result<int32_t> max_tokens =
      ResolveMaxTokens(request.max_tokens, static_cast<int64_t>(tokens.value().size()), ctx);
  if (!max_tokens.ok()) return max_tokens.status();
  sampling.max_tokens = max_tokens.value();

  out.spec.prompts.push_back(std::move(tokens.value()));
  // BOS/EOS/pad are the special tokens; the parser's markers (<think>, </think>, ｜DSML｜) are
  // not, so they survive. An EOS generated under ignore_eos is not text.
  out.spec.skip_special_tokens = true;
  out.spec.start_in_reasoning = after_prompt.start_in_reasoning;
  out.spec.make_processor = [parser, prefill]() -> std::unique_ptr<TextProcessor> {
    return std::make_unique<ChatTextProcessor>(parser, prefill);
  };
  return out;
}

}  // namespace deepinfer::server
