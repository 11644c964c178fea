#include "recipe/json_reader.h"

#include <fmt/format.h>

#include <cmath>

namespace deepinfer::recipe {

const char* JsonTypeName(const OrderedJson& value) {
  switch (value.type()) {
    case OrderedJson::value_t::null: return "null";
    case OrderedJson::value_t::boolean: return "boolean";
    case OrderedJson::value_t::number_integer:
    case OrderedJson::value_t::number_unsigned: return "integer";
    case OrderedJson::value_t::number_float: return "number";
    case OrderedJson::value_t::string: return "string";
    case OrderedJson::value_t::array: return "array";
    case OrderedJson::value_t::object: return "object";
    default: return "value";
  }
}

std::string JoinPath(std::string_view path, std::string_view key) {
  if (path.empty()) return std::string(key);
  return fmt::format("{}.{}", path, key);
}

std::string IndexPath(std::string_view path, size_t index) {
  return fmt::format("{}[{}]", path, index);
}

FieldReader::FieldReader(const OrderedJson& object, std::string path)
    : object_(object), path_(std::move(path)) {
  if (!object_.is_object()) {
    Fail(fmt::format("{}: expected an object, got {}", path_.empty() ? "request body" : path_,
                     JsonTypeName(object_)));
  }
}

const OrderedJson* FieldReader::Get(std::string_view key) const {
  if (!object_.is_object()) return nullptr;
  auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

void FieldReader::Fail(std::string message) {
  if (status_.ok()) status_ = InvalidArgument(std::move(message));
}

void FieldReader::FailAt(std::string_view key, std::string_view message) {
  Fail(fmt::format("{}: {}", Path(key), message));
}

void FieldReader::Merge(const Status& status) {
  if (status_.ok() && !status.ok()) status_ = status;
}

const OrderedJson* FieldReader::TypeChecked(std::string_view key, bool ok_type,
                                            const char* expected) {
  const OrderedJson* value = Get(key);
  if (value == nullptr) return nullptr;
  if (!ok_type) {
    FailAt(key, fmt::format("expected {}, got {}", expected, JsonTypeName(*value)));
    return nullptr;
  }
  return value;
}

std::optional<std::string> FieldReader::String(std::string_view key) {
  const OrderedJson* value = Get(key);
  if (value == nullptr) return std::nullopt;
  if (!TypeChecked(key, value->is_string(), "a string")) return std::nullopt;
  return value->get<std::string>();
}

std::optional<bool> FieldReader::Bool(std::string_view key) {
  const OrderedJson* value = Get(key);
  if (value == nullptr) return std::nullopt;
  if (!TypeChecked(key, value->is_boolean(), "a boolean")) return std::nullopt;
  return value->get<bool>();
}

std::optional<double> FieldReader::Number(std::string_view key, double lo, double hi) {
  const OrderedJson* value = Get(key);
  if (value == nullptr) return std::nullopt;
  if (!TypeChecked(key, value->is_number(), "a number")) return std::nullopt;
  const double x = value->get<double>();
  if (!(x >= lo && x <= hi)) {
    FailAt(key, fmt::format("{} is out of range [{}, {}]", x, lo, hi));
    return std::nullopt;
  }
  return x;
}

std::optional<int64_t> FieldReader::Int(std::string_view key, int64_t lo, int64_t hi) {
  const OrderedJson* value = Get(key);
  if (value == nullptr) return std::nullopt;
  int64_t x = 0;
  if (value->is_number_integer()) {
    if (value->is_number_unsigned() && value->get<uint64_t>() > static_cast<uint64_t>(hi)) {
      FailAt(key, fmt::format("{} is out of range [{}, {}]", value->get<uint64_t>(), lo, hi));
      return std::nullopt;
    }
    x = value->get<int64_t>();
  } else if (value->is_number_float() && std::floor(value->get<double>()) == value->get<double>() &&
             std::abs(value->get<double>()) < 9.0e15) {
    x = static_cast<int64_t>(value->get<double>());
  } else {
    FailAt(key, fmt::format("expected an integer, got {}", JsonTypeName(*value)));
    return std::nullopt;
  }
  if (x < lo || x > hi) {
    FailAt(key, fmt::format("{} is out of range [{}, {}]", x, lo, hi));
    return std::nullopt;
  }
  return x;
}

const OrderedJson* FieldReader::Object(std::string_view key) {
  const OrderedJson* value = Get(key);
  return value == nullptr ? nullptr : TypeChecked(key, value->is_object(), "an object");
}

const OrderedJson* FieldReader::Array(std::string_view key) {
  const OrderedJson* value = Get(key);
  return value == nullptr ? nullptr : TypeChecked(key, value->is_array(), "an array");
}

bool FieldReader::Require(std::string_view key) {
  if (Get(key) != nullptr) return true;
  FailAt(key, "required");
  return false;
}

}  // namespace deepinfer::recipe
