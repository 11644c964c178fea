// Request checks the recipe converters do not make: body shape limits, unknown top-level
// fields (each API's policy), tool schemas that must be JSON Schema, and the sampling fields
// the server handles itself (n and the vLLM extensions). Every error is an InvalidArgument
// whose message starts with the field path (it becomes a 400 with "param" set).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "core/sampling_params.h"
#include "recipe/conversation.h"

namespace deepinfer::server {

enum class Endpoint { kChatCompletions, kCompletions, kMessages, kCountTokens };

// Nesting deeper than `max_depth` arrays/objects is refused before parsing (the recipe's JSON
// writers and schema checks recurse).
Status CheckJsonDepth(std::string_view body, int max_depth);

// Top-level fields the endpoint does not know are refused, as OpenAI ("Unrecognized request
// argument supplied: x") and Anthropic ("x: Extra inputs are not permitted") do. Fields that
// are known but not supported with a non-default value (logit_bias, audio, functions, ...)
// are refused with a reason; fields that are accepted and ignored are listed in
// docs/server.md.
Status CheckTopLevelFields(const recipe::OrderedJson& body, Endpoint endpoint);

// Tool definitions (function objects: {name, description, parameters}) must have a valid
// name and a JSON Schema object as parameters. Errors name the field as the client sent it
// ("tools[0].function.parameters..." for OpenAI, "tools[0].input_schema..." for Anthropic).
Status CheckToolDefinitions(const std::vector<recipe::OrderedJson>& tools, Endpoint endpoint);

// Reads the sampling fields the recipe's ChatRequest does not carry: n, min_p,
// repetition_penalty, min_tokens, ignore_eos, stop_token_ids.
Status ReadExtraSampling(const recipe::OrderedJson& body, SamplingParams& sampling);

}  // namespace deepinfer::server
