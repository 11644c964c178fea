#include "recipe/py_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "base/error.h"

namespace deepinfer::recipe {

void AppendJsonEscaped(std::string_view text, std::string& out) {
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (byte < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", byte);
          out += buf;
        } else {
          out += c;
        }
    }
  }
}

void AppendPyJsonString(std::string_view text, std::string& out) {
  out += '"';
  AppendJsonEscaped(text, out);
  out += '"';
}

std::string PyFloatRepr(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  // Shortest round-trip digits in scientific form: "[-]d[.ddd]e[+-]XX".
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  DI_CHECK(ec == std::errc(), "to_chars failed");
  std::string_view sci(buf, static_cast<size_t>(end - buf));
  std::string out;
  if (sci.front() == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits += c;
  }
  const int exponent = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  // Python's float repr: decpt is where the decimal point sits relative to the digits.
  const int decpt = exponent + 1;
  const int num_digits = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (decpt >= num_digits) {
      out += digits;
      out.append(static_cast<size_t>(decpt - num_digits), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt));
      out += '.';
      out += digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out += digits[0];
  if (num_digits > 1) {
    out += '.';
    out += digits.substr(1);
  }
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  out += exp_buf;
  return out;
}

namespace {

void Dump(const OrderedJson& value, std::string& out) {
  switch (value.type()) {
    case OrderedJson::value_t::null: out += "null"; return;
    case OrderedJson::value_t::boolean: out += value.get<bool>() ? "true" : "false"; return;
    case OrderedJson::value_t::number_integer:
      out += std::to_string(value.get<int64_t>());
      return;
    case OrderedJson::value_t::number_unsigned:
      out += std::to_string(value.get<uint64_t>());
      return;
    case OrderedJson::value_t::number_float: out += PyFloatRepr(value.get<double>()); return;
    case OrderedJson::value_t::string:
      AppendPyJsonString(value.get_ref<const std::string&>(), out);
      return;
    case OrderedJson::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& item : value) {
        if (!first) out += ", ";
        first = false;
        Dump(item, out);
      }
      out += ']';
      return;
    }
    case OrderedJson::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out += ", ";
        first = false;
        AppendPyJsonString(key, out);
        out += ": ";
        Dump(item, out);
      }
      out += '}';
      return;
    }
    case OrderedJson::value_t::binary:
    case OrderedJson::value_t::discarded:
      DI_THROW("PyJsonDumps: value of type {} has no JSON text", value.type_name());
  }
}

}  // namespace

std::string PyJsonDumps(const OrderedJson& value) {
  std::string out;
  Dump(value, out);
  return out;
}

}  // namespace deepinfer::recipe
