// Python semantics of template values: truthiness, str/repr, json.dumps, equality and ordering (see value.h).
#include "tokenizer/jinja/value.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"
#include "core/json_depth.h"
#include "tokenizer/utf8.h"

namespace plumb::tokenizer::jinja {
namespace {

// Python's str.isprintable() for one code point: everything but separators (other than ' ') and "other" categories.
bool printable(char32_t cp) {
  if (cp == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string python_string_repr(const std::string& s) {
  const bool double_quotes = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char quote = double_quotes ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : utf8_codepoints(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!printable(cp)) {
      out += cp < 0x100     ? fmt::format("\\x{:02x}", static_cast<uint32_t>(cp))
             : cp < 0x10000 ? fmt::format("\\u{:04x}", static_cast<uint32_t>(cp))
                            : fmt::format("\\U{:08x}", static_cast<uint32_t>(cp));
    } else {
      utf8_append(out, cp);
    }
  }
  out += quote;
  return out;
}

// A value's text may not grow past kMaxValueTextBytes: checked after each element, so the work stops there.
void check_text_size(const std::string& out) {
  PLUMB_CHECK(out.size() <= kMaxValueTextBytes, "a value's text is larger than {} bytes", kMaxValueTextBytes);
}

// json.dumps string escaping with ensure_ascii=False: only '"', '\\' and control characters are escaped.
void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<int>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void append_json(std::string& out, const Value& v, int indent, int depth, const std::string& item_sep,
                 const std::string& key_sep, bool sort_keys) {
  auto newline = [&](int level) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * level), ' ');
  };
  switch (v.kind()) {
    case Kind::kNone:
      out += "null";
      return;
    case Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Kind::kFloat: {
      const double d = v.as_float();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : python_float_repr(d);
      return;
    }
    case Kind::kString:
      append_json_string(out, v.as_string());
      return;
    case Kind::kList: {
      if (v.as_list().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < v.as_list().size(); ++i) {
        if (i > 0) out += item_sep;
        newline(depth + 1);
        append_json(out, v.as_list()[i], indent, depth + 1, item_sep, key_sep, sort_keys);
        check_text_size(out);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      if (v.as_dict().empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : v.as_dict()) items.push_back(&item);
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_sep;
        newline(depth + 1);
        append_json_string(out, items[i]->first);
        out += key_sep;
        append_json(out, items[i]->second, indent, depth + 1, item_sep, key_sep, sort_keys);
        check_text_size(out);
      }
      newline(depth);
      out += '}';
      return;
    }
    case Kind::kUndefined:
    case Kind::kFunction:
      PLUMB_FAIL("Object of type {} is not JSON serializable", v.type_name());
  }
}

}  // namespace

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::real(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = d;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<const List>(std::move(items));
  return v;
}
Value Value::dict(Dict items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(items));
  return v;
}
Value Value::name_space(Dict items) {
  Value v = dict(std::move(items));
  v.kind_ = Kind::kNamespace;
  return v;
}
Value Value::function(std::string name, Function fn) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.s_ = std::make_shared<const std::string>(std::move(name));
  v.fn_ = std::make_shared<const Function>(std::move(fn));
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j, int depth) {
  PLUMB_CHECK(depth < kMaxJsonDepth || !j.is_structured(),
              "chat template arguments nest deeper than {} levels (the limit)", kMaxJsonDepth);
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return none();
    case nlohmann::ordered_json::value_t::boolean:
      return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? integer(static_cast<int64_t>(u)) : real(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return real(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict items;
      for (const auto& [k, e] : j.items()) items.emplace_back(k, from_json(e, depth + 1));
      return dict(std::move(items));
    }
    default:
      PLUMB_FAIL("unsupported JSON value in chat template arguments");
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !s_->empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->empty();
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

const Value* Value::find(const std::string& key) const {
  if (!is_mapping()) return nullptr;
  for (const auto& [k, v] : *dict_) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return *s_;
    default:
      return repr();
  }
}

std::string Value::repr() const {
  std::string out;
  append_repr(out);
  return out;
}

void Value::append_repr(std::string& out) const {
  switch (kind_) {
    case Kind::kUndefined:
      out += "Undefined";
      return;
    case Kind::kNone:
      out += "None";
      return;
    case Kind::kBool:
      out += b_ ? "True" : "False";
      return;
    case Kind::kInt: {
      // Into a buffer on the stack: a list of millions of ints is printed one element at a time.
      char digits[24];
      out.append(digits, std::to_chars(digits, digits + sizeof digits, i_).ptr);
      return;
    }
    case Kind::kFloat:
      out += python_float_repr(f_);
      return;
    case Kind::kString:
      out += python_string_repr(*s_);
      break;
    case Kind::kList:
      out += '[';
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i > 0) out += ", ";
        (*list_)[i].append_repr(out);
        check_text_size(out);
      }
      out += ']';
      break;
    case Kind::kDict:
    case Kind::kNamespace:
      out += kind_ == Kind::kNamespace ? "<Namespace {" : "{";
      for (size_t i = 0; i < dict_->size(); ++i) {
        if (i > 0) out += ", ";
        out += python_string_repr((*dict_)[i].first) + ": ";
        (*dict_)[i].second.append_repr(out);
        check_text_size(out);
      }
      out += kind_ == Kind::kNamespace ? "}>" : "}";
      break;
    case Kind::kFunction:
      out += "<function " + *s_ + ">";
      break;
  }
  check_text_size(out);
}

std::string Value::to_json(int indent, const std::string& item_sep, const std::string& key_sep, bool sort_keys) const {
  std::string out;
  append_json(out, *this, indent, 0, item_sep, key_sep, sort_keys);
  return out;
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits in scientific form, then laid out the way Python's repr lays them out.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::stoi(sci.substr(e + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out.append(".").append(digits, 1);
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (exponent < 0) {
    out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  } else {
    const auto point = static_cast<size_t>(exponent + 1);
    if (digits.size() <= point) {
      out += digits + std::string(point - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, point) + "." + digits.substr(point);
    }
  }
  return out;
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.as_string() == b.as_string();
    case Kind::kList:
      return std::equal(a.as_list().begin(), a.as_list().end(), b.as_list().begin(), b.as_list().end(), equal);
    case Kind::kDict: {
      if (a.as_dict().size() != b.as_dict().size()) return false;
      for (const auto& [k, v] : a.as_dict()) {
        const Value* other = b.find(k);
        if (other == nullptr || !equal(v, *other)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();  // namespaces and functions
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  // UTF-8 byte order is code-point order, which is how Python orders str.
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.kind() == Kind::kList && b.kind() == Kind::kList) {
    return std::lexicographical_compare(a.as_list().begin(), a.as_list().end(), b.as_list().begin(), b.as_list().end(),
                                        less);
  }
  PLUMB_FAIL("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name());
}

}  // namespace plumb::tokenizer::jinja
