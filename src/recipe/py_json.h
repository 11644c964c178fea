// JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes it: the DeepSeek
// reference encoder serialises tool schemas, non-string tool arguments and response formats
// this way, and the prompt (and with it the prefix cache) must match byte for byte.
//
//   separators ", " and ": "; object keys in stored order; non-ASCII written raw; only
//   '"', '\\' and control characters below 0x20 escaped (\n \r \t \b \f, else \u00xx);
//   floats in Python repr (shortest round-trip digits; "1.0", "1e-05", "1e+16").
#pragma once

#include <string>
#include <string_view>

#include "recipe/conversation.h"

namespace deepinfer::recipe {

// Python json.dumps(value, ensure_ascii=False). Strings must be valid UTF-8 (nlohmann's parser
// guarantees that for parsed input).
std::string PyJsonDumps(const OrderedJson& value);

// Python repr() of a finite double, e.g. 0.1 -> "0.1", 1e16 -> "1e+16", 100.0 -> "100.0".
std::string PyFloatRepr(double value);

// Appends the JSON string literal of `text` (with quotes), escaped as json.dumps does.
void AppendPyJsonString(std::string_view text, std::string& out);

// Appends `text` escaped for the inside of a JSON string literal (no quotes).
void AppendJsonEscaped(std::string_view text, std::string& out);

}  // namespace deepinfer::recipe
