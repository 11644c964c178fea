// Encoding rules: everything that differs between DeepSeek chat-encoder revisions, as data.
// One EncodingRules value per encoder revision; a checkpoint picks one by name (see
// RulesForModelDir). The encoder (chat_encoder.h) is written once against this struct.
//
// Built-in rule sets (names are stable; docs/recipe.md lists them):
//   "deepseek-v4"             DeepSeek-V4 release encoder (encoding/encoding_dsv4.py):
//                             effort "high" (no text) / "max" (the "Absolute maximum" text).
//   "deepseek-v4-vision-exp"  the later V4 revision shipped with V4-Flash-Vision-Exp: effort
//                             table low ("") / high ("Absolute maximum") / max ("Beyond
//                             maximum"), image placeholder.
//   "deepseek-v41"            DeepSeek-V4.1: space-prefixed DSML tags, <｜System｜>, numeric
//                             effort 1..100, image placeholder, strict tool-call arguments.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace deepinfer::recipe {

enum class EffortStyle {
  kTable,    // level name -> fixed paragraph (V4 revisions)
  kNumeric,  // "Reasoning Effort: N (...)" with N in 1..100 (V4.1)
};

struct EncodingRules {
  std::string name;

  // DSML tag names: "<｜DSML｜" + tag + ">" etc.
  std::string dsml_calls_tag;      // "tool_calls" (V4) or " calls" (V4.1)
  std::string dsml_invoke_tag;     // "invoke" or " invoke"
  std::string dsml_parameter_tag;  // "parameter" or " parameter"

  // Reasoning effort, rendered at the very start of the prompt in thinking mode only.
  EffortStyle effort_style = EffortStyle::kTable;
  // kTable: level -> paragraph (may be empty). kNumeric: level -> value in 1..100.
  std::vector<std::pair<std::string, std::string>> effort_texts;
  std::vector<std::pair<std::string, int>> effort_values;
  std::string numeric_effort_template;  // kNumeric; "{}" is replaced by the value
  // Level the reference encoder uses when it is given none.
  std::string encoder_default_effort;
  // Level the API uses when a request gives none (DeepSeek API: "high").
  std::string api_default_effort;
  // API effort names that are not levels of this encoder -> level (DeepSeek API table).
  std::vector<std::pair<std::string, std::string>> effort_aliases;

  // V4.1: "<｜System｜>" opens the index-0 system message (or the effort text) and every
  // later system message, and a later system message takes the generation header like a user.
  bool system_token = false;
  // Rendered for an image part; empty: the model takes no images (they are refused).
  std::string image_placeholder;
  // V4.1: assistant tool-call arguments must be a JSON object. V4: text that does not parse
  // is rendered as {"arguments": <text>}.
  bool strict_tool_arguments = false;
  // Thinking mode when a request does not say (DeepSeek API: on for V4 and V4.1).
  bool default_thinking = true;
};

// The built-in rule set with this name; nullptr if there is none.
const EncodingRules* FindRules(std::string_view name);
std::vector<std::string> RuleNames();
const EncodingRules& DefaultRules();  // "deepseek-v4"

// Picks the rules of a checkpoint from <model_dir>/config.json:
//   1. key "chat_encoding": a built-in rule-set name (explicit choice, e.g. for a V4 checkpoint
//      that ships the Vision-Exp encoder);
//   2. else model_type / architectures: "deepseek_v41*" or "DeepseekV41*" -> "deepseek-v41";
//      "deepseek_v4*" or "DeepseekV4*" -> "deepseek-v4".
// Load-time errors (no config.json, unknown model) throw deepinfer::Error.
const EncodingRules& RulesForModelDir(const std::string& model_dir);

// Same choice from config.json text already read.
const EncodingRules& RulesForConfigJson(std::string_view config_json_text, std::string_view origin);

// Resolved reasoning effort: the prefix text to render (empty: none).
struct ResolvedEffort {
  std::string level;   // the encoder level ("high", "max", "37", ...)
  std::string prefix;  // text rendered before the first message in thinking mode
};

// Maps an API reasoning_effort value (a level, an alias, or for kNumeric an integer 1..100 in
// decimal) to this encoder's level and prefix text. nullopt effort: the API default.
Result<ResolvedEffort> ResolveApiEffort(const EncodingRules& rules,
                                        const std::optional<std::string>& effort);

// Same for the encoder's own level names (reference dialect): no aliases; nullopt: the
// encoder's default.
Result<ResolvedEffort> ResolveEncoderEffort(const EncodingRules& rules,
                                            const std::optional<std::string>& effort);

}  // namespace deepinfer::recipe
