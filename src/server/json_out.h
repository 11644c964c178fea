// Small helpers for what the server writes: JSON text that never throws, SSE framing, ids.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::server {

// Responses keep the key order they are built in ("id" first, as the APIs write them).
using Json = nlohmann::ordered_json;

// Compact JSON, UTF-8 kept raw; invalid UTF-8 (never produced by the parser, but possible in
// echoed input) is replaced by U+FFFD instead of throwing.
std::string DumpJson(const Json& value);

// "data: <json>\n\n" (OpenAI chunks) and "event: <name>\ndata: <json>\n\n" (Anthropic).
std::string SseData(const Json& value);
std::string SseEvent(std::string_view name, const Json& value);

// "<prefix><24 random hex digits>" for response ids (chatcmpl-, cmpl-, msg_).
std::string RandomId(std::string_view prefix);

// Seconds since the Unix epoch (the "created" field).
int64_t UnixSeconds();

}  // namespace deepinfer::server
