#include "recipe/encoding_rules.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace deepinfer::recipe {
namespace {

// Literal prompt texts of the reference encoders (facts, reproduced byte-exact).
constexpr const char* kEffortAbsoluteMaximum =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate "
    "step, considered alternative, and rejected hypothesis to ensure absolutely no assumption "
    "is left unchecked.\n\n";

constexpr const char* kEffortBeyondMaximum =
    "Reasoning Effort: Beyond maximum \xe2\x80\x94 exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: "
    "exhaustively decompose the problem into its most fundamental components, trace every "
    "causal chain to its root, and resolve the underlying cause rather than any surface "
    "symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple "
    "angles and are certain that no assumption remains unchecked and no error remains "
    "undiscovered.\n\n";

constexpr const char* kNumericEffortTemplate =
    "Reasoning Effort: {} (range 1-100, the higher the value, the more thorough the "
    "reasoning)\n\n";

constexpr const char* kImagePlaceholder = "<\xef\xbd\x9c" "deepseek_image\xef\xbd\x9c>";

EncodingRules MakeV4() {
  EncodingRules r;
  r.name = "deepseek-v4";
  r.dsml_calls_tag = "tool_calls";
  r.dsml_invoke_tag = "invoke";
  r.dsml_parameter_tag = "parameter";
  r.effort_style = EffortStyle::kTable;
  r.effort_texts = {{"high", ""}, {"max", kEffortAbsoluteMaximum}};
  r.encoder_default_effort = "high";  // the reference's None renders like "high"
  r.api_default_effort = "high";
  r.effort_aliases = {{"minimal", "high"}, {"low", "high"},   {"medium", "high"},
                      {"xhigh", "high"},   {"ultra", "max"}};
  return r;
}

EncodingRules MakeV4VisionExp() {
  EncodingRules r = MakeV4();
  r.name = "deepseek-v4-vision-exp";
  r.effort_texts = {{"low", ""}, {"high", kEffortAbsoluteMaximum}, {"max", kEffortBeyondMaximum}};
  r.encoder_default_effort = "low";
  r.api_default_effort = "high";
  r.effort_aliases = {{"minimal", "low"}, {"medium", "high"}, {"xhigh", "high"}, {"ultra", "max"}};
  r.image_placeholder = kImagePlaceholder;
  return r;
}

EncodingRules MakeV41() {
  EncodingRules r;
  r.name = "deepseek-v41";
  r.dsml_calls_tag = " calls";
  r.dsml_invoke_tag = " invoke";
  r.dsml_parameter_tag = " parameter";
  r.effort_style = EffortStyle::kNumeric;
  r.effort_values = {{"low", 25}, {"high", 50}, {"xhigh", 75}, {"max", 100}};
  r.numeric_effort_template = kNumericEffortTemplate;
  r.encoder_default_effort = "high";
  r.api_default_effort = "high";
  r.effort_aliases = {{"minimal", "low"}, {"medium", "high"}, {"ultra", "max"}};
  r.system_token = true;
  r.image_placeholder = kImagePlaceholder;
  r.strict_tool_arguments = true;
  return r;
}

const std::vector<EncodingRules>& AllRules() {
  static const std::vector<EncodingRules> rules = {MakeV4(), MakeV4VisionExp(), MakeV41()};
  return rules;
}

std::string LevelList(const EncodingRules& rules) {
  std::string out;
  auto add = [&](const std::string& name) {
    if (!out.empty()) out += ", ";
    out += name;
  };
  for (const auto& [level, text] : rules.effort_texts) add(level);
  for (const auto& [level, value] : rules.effort_values) add(level);
  for (const auto& [alias, level] : rules.effort_aliases) add(alias);
  if (rules.effort_style == EffortStyle::kNumeric) add("an integer 1..100");
  return out;
}

// Looks `level` up among the encoder's own levels (and, for kNumeric, integers 1..100).
std::optional<ResolvedEffort> LookupLevel(const EncodingRules& rules, const std::string& level) {
  if (rules.effort_style == EffortStyle::kTable) {
    for (const auto& [name, text] : rules.effort_texts) {
      if (name == level) return ResolvedEffort{name, text};
    }
    return std::nullopt;
  }
  int value = 0;
  bool found = false;
  for (const auto& [name, v] : rules.effort_values) {
    if (name == level) {
      value = v;
      found = true;
    }
  }
  if (!found) {
    const char* begin = level.data();
    const char* end = begin + level.size();
    auto [ptr, ec] = std::from_chars(begin, end, value);
    if (level.empty() || ec != std::errc() || ptr != end || value < 1 || value > 100) {
      return std::nullopt;
    }
  }
  return ResolvedEffort{std::to_string(value),
                        fmt::format(fmt::runtime(rules.numeric_effort_template), value)};
}

}  // namespace

const EncodingRules* FindRules(std::string_view name) {
  for (const auto& rules : AllRules()) {
    if (rules.name == name) return &rules;
  }
  return nullptr;
}

std::vector<std::string> RuleNames() {
  std::vector<std::string> names;
  for (const auto& rules : AllRules()) names.push_back(rules.name);
  return names;
}

const EncodingRules& DefaultRules() { return AllRules().front(); }

const EncodingRules& RulesForConfigJson(std::string_view config_json_text,
                                        std::string_view origin) {
  const auto config = nlohmann::json::parse(config_json_text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) DI_THROW("{}: not a JSON object", origin);
  if (auto it = config.find("chat_encoding"); it != config.end()) {
    if (!it->is_string()) DI_THROW("{}: chat_encoding must be a string", origin);
    const auto* rules = FindRules(it->get<std::string>());
    if (rules == nullptr) {
      DI_THROW("{}: unknown chat_encoding '{}' (known: {})", origin, it->get<std::string>(),
               fmt::join(RuleNames(), ", "));
    }
    return *rules;
  }
  std::vector<std::string> names;
  if (auto it = config.find("model_type"); it != config.end() && it->is_string()) {
    names.push_back(it->get<std::string>());
  }
  if (auto it = config.find("architectures"); it != config.end() && it->is_array()) {
    for (const auto& arch : *it) {
      if (arch.is_string()) names.push_back(arch.get<std::string>());
    }
  }
  for (const auto& name : names) {
    if (name.starts_with("deepseek_v41") || name.starts_with("DeepseekV41")) {
      return *FindRules("deepseek-v41");
    }
  }
  for (const auto& name : names) {
    if (name.starts_with("deepseek_v4") || name.starts_with("DeepseekV4")) return DefaultRules();
  }
  DI_THROW("{}: cannot tell the chat encoding from model_type/architectures [{}]; set "
           "\"chat_encoding\" to one of: {}",
           origin, fmt::join(names, ", "), fmt::join(RuleNames(), ", "));
}

const EncodingRules& RulesForModelDir(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) DI_THROW("cannot open {}", path);
  std::ostringstream text;
  text << in.rdbuf();
  return RulesForConfigJson(text.str(), path);
}

Result<ResolvedEffort> ResolveEncoderEffort(const EncodingRules& rules,
                                            const std::optional<std::string>& effort) {
  const std::string level = effort.value_or(rules.encoder_default_effort);
  if (auto resolved = LookupLevel(rules, level)) return *resolved;
  return InvalidArgument(fmt::format("reasoning_effort: '{}' is not supported by {} (use one of: {})",
                                     level, rules.name, LevelList(rules)));
}

Result<ResolvedEffort> ResolveApiEffort(const EncodingRules& rules,
                                        const std::optional<std::string>& effort) {
  std::string level = effort.value_or(rules.api_default_effort);
  for (const auto& [alias, target] : rules.effort_aliases) {
    if (alias == level) {
      level = target;
      break;
    }
  }
  if (auto resolved = LookupLevel(rules, level)) return *resolved;
  return InvalidArgument(fmt::format("reasoning_effort: '{}' is not supported by {} (use one of: {})",
                                     effort.value_or(""), rules.name, LevelList(rules)));
}

}  // namespace deepinfer::recipe
