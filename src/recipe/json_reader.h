// Typed, path-aware reads from request JSON. Request bodies come from API users, so every
// error names the offending field ("messages[2].tool_calls[0].function.name: expected a
// string") and is returned as an InvalidArgument status (HTTP 400), never thrown.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "recipe/conversation.h"

namespace deepinfer::recipe {

// "string", "number", "object", ... as users know the JSON types.
const char* JsonTypeName(const OrderedJson& value);

std::string JoinPath(std::string_view path, std::string_view key);
std::string IndexPath(std::string_view path, size_t index);

// Reads the members of one JSON object. The first error is kept (later reads still run but
// see no value); callers check status() once at the end.
class FieldReader {
 public:
  // `object` must outlive the reader. A non-object records an error at `path`.
  FieldReader(const OrderedJson& object, std::string path);

  // The member, or nullptr when absent or JSON null.
  const OrderedJson* Get(std::string_view key) const;
  std::string Path(std::string_view key) const { return JoinPath(path_, key); }

  std::optional<std::string> String(std::string_view key);
  std::optional<bool> Bool(std::string_view key);
  // Any JSON number within [lo, hi].
  std::optional<double> Number(std::string_view key, double lo, double hi);
  // An integral JSON number within [lo, hi].
  std::optional<int64_t> Int(std::string_view key, int64_t lo, int64_t hi);
  // Present and of the given kind, else nullptr (recording a type error when present).
  const OrderedJson* Object(std::string_view key);
  const OrderedJson* Array(std::string_view key);
  // A missing or null required member is an error.
  bool Require(std::string_view key);

  void Fail(std::string message);
  void FailAt(std::string_view key, std::string_view message);
  void Merge(const Status& status);
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

 private:
  const OrderedJson* TypeChecked(std::string_view key, bool ok_type, const char* expected);

  const OrderedJson& object_;
  std::string path_;
  Status status_;
};

}  // namespace deepinfer::recipe
