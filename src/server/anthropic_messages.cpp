#include "server/anthropic_messages.h"

#include <fmt/format.h>

#include "recipe/anthropic_request.h"
#include "recipe/request_encoding.h"
#include "server/chat_prepare.h"
#include "server/json_out.h"
#include "server/request_checks.h"

namespace deepinfer::server {
namespace {

using json = Json;
using recipe::OutputEvent;

// An opaque, non-empty signature for a thinking block (clients send it back; we ignore it).
std::string Signature(const std::string& thinking) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : thinking) hash = (hash ^ c) * 1099511628211ull;
  return fmt::format("dsig_{:016x}", hash);
}

std::string StopReason(const recipe::ParsedOutput& parsed) {
  if (parsed.stop_string) return "stop_sequence";
  if (parsed.finish_reason == "tool_calls") return "tool_use";
  if (parsed.finish_reason == "length") return "max_tokens";
  if (parsed.finish_reason == "content_filter") return "refusal";
  return "end_turn";
}

// Anthropic content blocks from parser events: one open block at a time, in output order.
// Produces the stream events; Apply() folds the same events into the final content array,
// as the SDKs' accumulators do.
class MessagesWriter : public ResponseWriter {
 public:
  MessagesWriter(std::string model, int64_t prompt_tokens)
      : id_(RandomId("msg_")), model_(std::move(model)), prompt_tokens_(prompt_tokens) {}

  ApiKind api() const override { return ApiKind::kAnthropic; }

  std::string StreamOpen() override {
    json message = MessageJson(json::array(), nullptr, nullptr);
    message["usage"] = {{"input_tokens", prompt_tokens_}, {"output_tokens", 0},
                        {"cache_creation_input_tokens", 0}, {"cache_read_input_tokens", 0}};
    return SseEvent("message_start", {{"type", "message_start"}, {"message", std::move(message)}}) +
           SseEvent("ping", {{"type", "ping"}});
  }

  std::string StreamUpdates(const std::vector<ChoiceUpdate>& updates) override {
    std::string out;
    for (const json& event : Events(updates)) out += SseEvent(event["type"].get<std::string>(), event);
    return out;
  }

  std::string StreamEnd(const GenerationUsage& usage) override {
    json delta = {{"type", "message_delta"},
                  {"delta", {{"stop_reason", stop_reason_}, {"stop_sequence", stop_sequence_}}},
                  {"usage", UsageJson(usage)}};
    return SseEvent("message_delta", delta) + SseEvent("message_stop", {{"type", "message_stop"}});
  }

  std::string KeepAlive() override { return SseEvent("ping", {{"type", "ping"}}); }

  void Collect(const std::vector<ChoiceUpdate>& updates) override {
    for (const json& event : Events(updates)) Apply(event);
  }

  std::string Body(const GenerationUsage& usage) override {
    json message = MessageJson(std::move(content_), stop_reason_, stop_sequence_);
    message["usage"] = UsageJson(usage);
    return DumpJson(message);
  }

 private:
  enum class Block { kNone, kThinking, kText, kToolUse };

  json MessageJson(json content, json stop_reason, json stop_sequence) const {
    return {{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model_},
            {"content", std::move(content)}, {"stop_reason", std::move(stop_reason)},
            {"stop_sequence", std::move(stop_sequence)}};
  }

  static json UsageJson(const GenerationUsage& usage) {
    return {{"input_tokens", usage.prompt_tokens - usage.cached_tokens},
            {"cache_creation_input_tokens", 0},
            {"cache_read_input_tokens", usage.cached_tokens},
            {"output_tokens", usage.completion_tokens}};
  }

  std::vector<json> Events(const std::vector<ChoiceUpdate>& updates) {
    std::vector<json> out;
    for (const ChoiceUpdate& update : updates) {
      for (const OutputEvent& event : update.events) OnEvent(event, out);
      if (update.finish && !update.finish->failed) {
        Close(out);
        stop_reason_ = StopReason(update.finish->parsed);
        if (update.finish->parsed.stop_string) stop_sequence_ = *update.finish->parsed.stop_string;
      }
    }
    return out;
  }

  void OnEvent(const OutputEvent& event, std::vector<json>& out) {
    switch (event.kind) {
      case OutputEvent::Kind::kReasoningDelta:
        if (event.text.empty()) return;
        Open(Block::kThinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, out);
        thinking_ += event.text;
        out.push_back(Delta({{"type", "thinking_delta"}, {"thinking", event.text}}));
        return;
      case OutputEvent::Kind::kContentDelta:
        if (event.text.empty()) return;
        Open(Block::kText, {{"type", "text"}, {"text", ""}}, out);
        out.push_back(Delta({{"type", "text_delta"}, {"text", event.text}}));
        return;
      case OutputEvent::Kind::kToolCallBegin:
        Close(out);
        Open(Block::kToolUse,
             {{"type", "tool_use"}, {"id", event.id}, {"name", event.text}, {"input", json::object()}}, out);
        return;
      case OutputEvent::Kind::kToolCallArgumentsDelta:
        if (open_ == Block::kToolUse && !event.text.empty()) {
          out.push_back(Delta({{"type", "input_json_delta"}, {"partial_json", event.text}}));
        }
        return;
      case OutputEvent::Kind::kToolCallEnd:
        Close(out);
        return;
      default:
        return;
    }
  }

  void Open(Block kind, json block, std::vector<json>& out) {
    if (open_ == kind && kind != Block::kToolUse) return;
    Close(out);
    open_ = kind;
    ++index_;
    out.push_back({{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(block)}});
  }

  void Close(std::vector<json>& out) {
    if (open_ == Block::kNone) return;
    if (open_ == Block::kThinking) {
      out.push_back(Delta({{"type", "signature_delta"}, {"signature", Signature(thinking_)}}));
      thinking_.clear();
    }
    out.push_back({{"type", "content_block_stop"}, {"index", index_}});
    open_ = Block::kNone;
  }

  json Delta(json delta) const {
    return {{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(delta)}};
  }

  // Folds one stream event into content_ (non-streaming responses).
  void Apply(const json& event) {
    const std::string& type = event["type"].get_ref<const std::string&>();
    if (type == "content_block_start") {
      content_.push_back(event["content_block"]);
      json_buffer_.clear();
      return;
    }
    json& block = content_.back();
    if (type == "content_block_stop") {
      if (block["type"] == "tool_use" && !json_buffer_.empty()) {
        json input = json::parse(json_buffer_, nullptr, false);
        block["input"] = input.is_discarded() ? json::object() : std::move(input);
      }
      return;
    }
    const json& delta = event["delta"];
    const std::string& kind = delta["type"].get_ref<const std::string&>();
    if (kind == "thinking_delta") block["thinking"] = block["thinking"].get<std::string>() + delta["thinking"].get<std::string>();
    else if (kind == "signature_delta") block["signature"] = delta["signature"];
    else if (kind == "text_delta") block["text"] = block["text"].get<std::string>() + delta["text"].get<std::string>();
    else if (kind == "input_json_delta") json_buffer_ += delta["partial_json"].get<std::string>();
  }

  const std::string id_;
  const std::string model_;
  const int64_t prompt_tokens_;
  Block open_ = Block::kNone;
  int32_t index_ = -1;
  std::string thinking_;
  json stop_reason_ = "end_turn";
  json stop_sequence_ = nullptr;
  json content_ = json::array();
  std::string json_buffer_;
};

}  // namespace

Result<GenerationPlan> PlanMessages(recipe::OrderedJson& body, const ServerContext& ctx) {
  Status status = CheckTopLevelFields(body, Endpoint::kMessages);
  if (!status.ok()) return status;
  Result<recipe::ChatRequest> request = recipe::ParseAnthropicRequestJson(body);
  if (!request.ok()) return request.status();
  Result<PreparedChat> prepared = PrepareChat(request.value(), body, ctx, ApiKind::kAnthropic);
  if (!prepared.ok()) return prepared.status();
  PreparedChat& chat = prepared.value();
  GenerationPlan plan;
  plan.stream = chat.stream;
  plan.writer = std::make_unique<MessagesWriter>(chat.model, static_cast<int64_t>(chat.spec.prompts[0].size()));
  plan.spec = std::move(chat.spec);
  return plan;
}

Result<std::string> CountMessageTokens(recipe::OrderedJson& body, const ServerContext& ctx) {
  Status status = CheckTopLevelFields(body, Endpoint::kCountTokens);
  if (!status.ok()) return status;
  body["max_tokens"] = 1;  // required by the Messages converter, meaningless here
  Result<recipe::ChatRequest> request = recipe::ParseAnthropicRequestJson(body);
  if (!request.ok()) return request.status();
  status = CheckToolDefinitions(request.value().tools, Endpoint::kCountTokens);
  if (!status.ok()) return status;
  Result<recipe::EncodedChat> encoded = recipe::EncodeChatRequest(request.value(), ctx.rules);
  if (!encoded.ok()) return encoded.status();
  const size_t tokens = ctx.tokenizer.Encode(encoded.value().prompt).size();
  return DumpJson(json{{"input_tokens", tokens}});
}

}  // namespace deepinfer::server
