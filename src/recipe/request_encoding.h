// A ChatRequest (from either protocol) -> the prompt the model gets, plus the options its
// output parser needs. This is where API conventions meet the reference encoder:
//   * thinking: the request's setting; else off for reasoning_effort "none"; else the model's
//     default (on for DeepSeek-V4 and V4.1, as the DeepSeek API and vLLM do).
//   * reasoning_effort: API names mapped through the rules' alias table (unset: "high").
//   * request tools (unless tool_choice is "none") go onto messages[0] if it is a system or
//     developer message, else onto a new empty system message inserted at index 0 (the vLLM
//     convention that reproduces the checkpoint's golden prompts). A json_schema
//     response_format is rendered the same way as a "## Response Format:" section.
//   * JSON mode (json_object or json_schema) and stop strings go to the output parser only.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "recipe/conversation.h"
#include "recipe/encoding_rules.h"
#include "recipe/output_parser.h"

namespace deepinfer::recipe {

struct EncodedChat {
  std::string prompt;                   // exact text; encode with no special tokens added
  std::vector<std::string> image_urls;  // in prompt order
  bool thinking = true;
  std::string effort;                   // resolved encoder level ("" when thinking is off)
  ParserOptions parser;                 // start state, tools, JSON mode, stop strings
};

Result<EncodedChat> EncodeChatRequest(const ChatRequest& request, const EncodingRules& rules);

}  // namespace deepinfer::recipe
