// Operators, attribute/item access, Python methods of str/dict/list, iteration and globals (see builtins.h).
#include "tokenizer/jinja/builtins.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "core/error.h"
#include "tokenizer/jinja/strings.h"
#include "tokenizer/utf8.h"

namespace plumb::tokenizer::jinja {
namespace {

constexpr int64_t kMaxSequence = int64_t{1}
                                 << 24;  // bounds range() and repetition, so a template cannot exhaust memory

// a op b on int64 through a __builtin_*_overflow function, failing instead of wrapping (Python ints do not wrap).
template <typename Op>
int64_t checked(Op op, int64_t a, int64_t b, std::string_view name) {
  int64_t result = 0;
  PLUMB_CHECK(!op(a, b, &result), "integer overflow in '{}'", name);
  return result;
}
bool add_overflows(int64_t a, int64_t b, int64_t* r) {
  return __builtin_add_overflow(a, b, r);
}
bool sub_overflows(int64_t a, int64_t b, int64_t* r) {
  return __builtin_sub_overflow(a, b, r);
}
bool mul_overflows(int64_t a, int64_t b, int64_t* r) {
  return __builtin_mul_overflow(a, b, r);
}

// Python's floor division and modulo for ints (results take the sign of the divisor).
int64_t floor_div(int64_t a, int64_t b) {
  PLUMB_CHECK(b != 0, "integer division or modulo by zero");
  PLUMB_CHECK(!(a == INT64_MIN && b == -1), "integer overflow in '//'");
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

Value repeat(const Value& seq, int64_t times) {
  times = std::max<int64_t>(times, 0);
  // An empty sequence repeated is empty whatever the count: the loops below run at most kMaxSequence times only for a
  // sequence of at least one element ('' * 9 ** 9 took seconds of looping, found by tokenizer_fuzz).
  const bool empty = seq.is_string() ? seq.as_string().empty() : seq.as_list().empty();
  if (empty) times = 0;
  if (seq.is_string()) {
    PLUMB_CHECK(static_cast<double>(seq.as_string().size()) * static_cast<double>(times) <= kMaxSequence,
                "string repetition is too long");
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.as_string();
    return Value::string(std::move(out));
  }
  PLUMB_CHECK(static_cast<double>(seq.as_list().size()) * static_cast<double>(times) <= kMaxSequence,
              "list repetition is too long");
  List out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return Value::list(std::move(out));
}

[[noreturn]] void unsupported_operands(std::string_view op, const Value& a, const Value& b) {
  PLUMB_FAIL("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name());
}

Value security_error(const std::string& name) {
  return Value::function(name, [name](CallArgs&) -> Value {
    PLUMB_FAIL("access to '{}' is unsafe: chat templates cannot modify values", name);
  });
}

// Binds a bound method's arguments: positional first, then keywords by name.
Value arg(CallArgs& a, size_t index, std::string_view name, Value fallback = Value()) {
  if (index < a.positional.size()) return a.positional[index];
  for (auto& [k, v] : a.keyword) {
    if (k == name) return v;
  }
  return fallback;
}

std::string string_arg(CallArgs& a, size_t index, std::string_view name, std::string_view method) {
  const Value v = arg(a, index, name);
  PLUMB_CHECK(v.is_string(), "{}() argument '{}' must be str, not {}", method, name, v.type_name());
  return v.as_string();
}

// "abc".startswith(x) where x may be a string or a tuple/list of strings.
bool affix_matches(const std::string& s, const Value& affix, bool prefix) {
  if (affix.kind() == Kind::kList) {
    return std::any_of(affix.as_list().begin(), affix.as_list().end(),
                       [&](const Value& v) { return affix_matches(s, v, prefix); });
  }
  PLUMB_CHECK(affix.is_string(), "{}with arg must be str or a tuple of str, not {}", prefix ? "starts" : "ends",
              affix.type_name());
  const std::string& x = affix.as_string();
  if (x.size() > s.size()) return false;
  return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
}

Value string_method(const std::string& self, const std::string& name) {
  auto method = [&](auto body) {
    return Value::function(name, [self, body](CallArgs& a) -> Value { return body(self, a); });
  };
  using S = const std::string&;
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name == "startswith";
    return method([prefix](S s, CallArgs& a) { return Value::boolean(affix_matches(s, arg(a, 0, "prefix"), prefix)); });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return method([left, right](S s, CallArgs& a) {
      const Value chars = arg(a, 0, "chars", Value::none());
      return Value::string(python_strip(s, chars.is_string() ? &chars.as_string() : nullptr, left, right));
    });
  }
  if (name == "split" || name == "rsplit") {
    const bool from_right = name == "rsplit";
    return method([from_right](S s, CallArgs& a) {
      const Value sep = arg(a, 0, "sep", Value::none());
      const Value max = arg(a, 1, "maxsplit", Value::integer(-1));
      List parts;
      for (std::string& p : python_split(s, sep.is_string() ? &sep.as_string() : nullptr, max.as_int(), from_right)) {
        parts.push_back(Value::string(std::move(p)));
      }
      return Value::list(std::move(parts));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "swapcase") {
    return method([name](S s, CallArgs&) { return Value::string(python_case(s, name)); });
  }
  if (name == "replace") {
    return method([](S s, CallArgs& a) {
      return Value::string(python_replace(s, string_arg(a, 0, "old", "replace"), string_arg(a, 1, "new", "replace"),
                                          arg(a, 2, "count", Value::integer(-1)).as_int()));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return method([name](S s, CallArgs& a) {
      const std::string sub = string_arg(a, 0, "sub", name);
      if (name == "count") return Value::integer(python_count(s, sub));
      const bool right = name[0] == 'r';
      const size_t at = right ? s.rfind(sub) : s.find(sub);
      PLUMB_CHECK(at != std::string::npos || name.find("index") == std::string::npos, "substring not found");
      return Value::integer(at == std::string::npos ? -1 : codepoint_count(std::string_view(s).substr(0, at)));
    });
  }
  if (name == "join") {
    return method([](S s, CallArgs& a) {
      std::string out;
      bool first = true;
      for (const Value& v : iterate(arg(a, 0, "iterable"))) {
        PLUMB_CHECK(v.is_string(), "sequence item: expected str instance, {} found", v.type_name());
        out += (first ? "" : s) + v.as_string();
        first = false;
      }
      return Value::string(std::move(out));
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const bool prefix = name == "removeprefix";
    return method([prefix](S s, CallArgs& a) {
      const Value affix = arg(a, 0, "affix");
      if (!affix.is_string() || !affix_matches(s, affix, prefix)) return Value::string(s);
      const size_t n = affix.as_string().size();
      return Value::string(prefix ? s.substr(n) : s.substr(0, s.size() - n));
    });
  }
  if (name == "splitlines") {
    return method([](S s, CallArgs&) {
      List lines;
      for (std::string& l : python_splitlines(s)) lines.push_back(Value::string(std::move(l)));
      return Value::list(std::move(lines));
    });
  }
  if (name.rfind("is", 0) == 0 && python_predicate_known(name)) {
    return method([name](S s, CallArgs&) { return Value::boolean(python_predicate(s, name)); });
  }
  if (name == "format") return security_error("str.format");
  return Value();
}

Value dict_method(const Value& self, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Value::function(name, [self, name](CallArgs&) {
      List out;
      for (const auto& [k, v] : self.as_dict()) {
        if (name == "items") {
          out.push_back(Value::list({Value::string(k), v}));
        } else {
          out.push_back(name == "keys" ? Value::string(k) : v);
        }
      }
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return Value::function(name, [self](CallArgs& a) {
      const Value key = arg(a, 0, "key");
      const Value* found = key.is_string() ? self.find(key.as_string()) : nullptr;
      return found ? *found : arg(a, 1, "default", Value::none());
    });
  }
  if (name == "copy") return Value::function(name, [self](CallArgs&) { return Value::dict(self.as_dict()); });
  if (name == "pop" || name == "update" || name == "setdefault" || name == "clear" || name == "popitem") {
    return security_error("dict." + name);
  }
  return Value();
}

Value list_method(const Value& self, const std::string& name) {
  if (name == "index" || name == "count") {
    return Value::function(name, [self, name](CallArgs& a) {
      const Value x = arg(a, 0, "value");
      int64_t count = 0;
      for (size_t i = 0; i < self.as_list().size(); ++i) {
        if (!equal(self.as_list()[i], x)) continue;
        if (name == "index") return Value::integer(static_cast<int64_t>(i));
        ++count;
      }
      PLUMB_CHECK(name == "count", "{} is not in list", x.repr());
      return Value::integer(count);
    });
  }
  if (name == "append" || name == "pop" || name == "insert" || name == "extend" || name == "remove" || name == "sort" ||
      name == "reverse" || name == "clear") {
    return security_error("list." + name);
  }
  return Value();
}

// Python's slice.indices(): clamps start/stop for a sequence of length n.
void slice_bounds(int64_t n, const Value& start, const Value& stop, int64_t step, int64_t& lo, int64_t& hi) {
  auto bound = [&](const Value& v, int64_t if_none) {
    if (v.is_none() || v.is_undefined()) return if_none;
    PLUMB_CHECK(v.kind() == Kind::kInt || v.kind() == Kind::kBool, "slice indices must be integers or None");
    int64_t i = v.as_int();
    if (i < 0) i = std::max<int64_t>(i + n, step < 0 ? -1 : 0);
    return std::min<int64_t>(i, step < 0 ? n - 1 : n);
  };
  lo = bound(start, step < 0 ? n - 1 : 0);
  hi = bound(stop, step < 0 ? -1 : n);
}

}  // namespace

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") return Value::string(a.str() + b.str());
  PLUMB_CHECK(!a.is_undefined() && !b.is_undefined(), "an undefined value cannot be used with '{}'", op);
  const bool ints =
      (a.kind() == Kind::kInt || a.kind() == Kind::kBool) && (b.kind() == Kind::kInt || b.kind() == Kind::kBool);
  const bool numbers = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) return Value::integer(checked(add_overflows, a.as_int(), b.as_int(), op));
    if (numbers) return Value::real(a.as_float() + b.as_float());
    if (a.is_string() && b.is_string()) return Value::string(a.as_string() + b.as_string());
    if (a.kind() == Kind::kList && b.kind() == Kind::kList) {
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value::list(std::move(out));
    }
    if (a.is_string() || b.is_string()) {
      PLUMB_FAIL("can only concatenate str (not \"{}\") to str", a.is_string() ? b.type_name() : a.type_name());
    }
    unsupported_operands(op, a, b);
  }
  if (op == "-") {
    if (ints) return Value::integer(checked(sub_overflows, a.as_int(), b.as_int(), op));
    if (numbers) return Value::real(a.as_float() - b.as_float());
    unsupported_operands(op, a, b);
  }
  if (op == "*") {
    if (ints) return Value::integer(checked(mul_overflows, a.as_int(), b.as_int(), op));
    if (numbers) return Value::real(a.as_float() * b.as_float());
    if ((a.is_string() || a.kind() == Kind::kList) && (b.kind() == Kind::kInt || b.kind() == Kind::kBool)) {
      return repeat(a, b.as_int());
    }
    if ((b.is_string() || b.kind() == Kind::kList) && (a.kind() == Kind::kInt || a.kind() == Kind::kBool)) {
      return repeat(b, a.as_int());
    }
    unsupported_operands(op, a, b);
  }
  if (!numbers) unsupported_operands(op, a, b);
  if (op == "/") {
    PLUMB_CHECK(b.as_float() != 0, "division by zero");
    return Value::real(a.as_float() / b.as_float());
  }
  if (op == "//") {
    if (ints) return Value::integer(floor_div(a.as_int(), b.as_int()));
    PLUMB_CHECK(b.as_float() != 0, "float floor division by zero");
    return Value::real(std::floor(a.as_float() / b.as_float()));
  }
  if (op == "%") {
    if (ints) {
      const int64_t q = floor_div(a.as_int(), b.as_int());
      return Value::integer(a.as_int() - q * b.as_int());
    }
    PLUMB_CHECK(b.as_float() != 0, "float modulo");
    const double m = std::fmod(a.as_float(), b.as_float());
    return Value::real(m != 0 && ((m < 0) != (b.as_float() < 0)) ? m + b.as_float() : m);
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t result = 1, base = a.as_int();
      for (int64_t e = b.as_int(); e > 0; --e) {
        result = checked(mul_overflows, result, base, op);
        if (result == 0 || result == 1) break;
      }
      return Value::integer(result);
    }
    return Value::real(std::pow(a.as_float(), b.as_float()));
  }
  PLUMB_FAIL("unknown operator '{}'", op);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kString:
      PLUMB_CHECK(item.is_string(), "'in <string>' requires string as left operand, not {}", item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Kind::kList:
      return std::any_of(container.as_list().begin(), container.as_list().end(),
                         [&](const Value& v) { return equal(v, item); });
    case Kind::kDict:
    case Kind::kNamespace:
      return item.is_string() && container.find(item.as_string()) != nullptr;
    case Kind::kUndefined:
      return false;
    default:
      PLUMB_FAIL("argument of type '{}' is not iterable", container.type_name());
  }
}

Value get_attr(const Value& object, const std::string& name) {
  switch (object.kind()) {
    case Kind::kUndefined:
      PLUMB_FAIL("cannot read attribute '{}' of an undefined value", name);
    case Kind::kString:
      return string_method(object.as_string(), name);
    case Kind::kList:
      return list_method(object, name);
    case Kind::kNamespace: {
      const Value* v = object.find(name);
      return v ? *v : Value();
    }
    case Kind::kDict: {
      const Value method = dict_method(object, name);  // Jinja tries the Python attribute before the key
      if (!method.is_undefined()) return method;
      const Value* v = object.find(name);
      return v ? *v : Value();
    }
    default:
      return Value();
  }
}

Value get_item(const Value& object, const Value& key) {
  switch (object.kind()) {
    case Kind::kUndefined:
      PLUMB_FAIL("cannot index an undefined value");
    case Kind::kDict:
    case Kind::kNamespace:
      if (key.is_string()) {
        if (const Value* v = object.find(key.as_string())) return *v;
        return object.kind() == Kind::kDict ? dict_method(object, key.as_string()) : Value();
      }
      return Value();
    case Kind::kList:
    case Kind::kString: {
      if (key.is_string()) return get_attr(object, key.as_string());
      if (key.kind() != Kind::kInt && key.kind() != Kind::kBool) return Value();
      if (object.kind() == Kind::kList) {
        const auto n = static_cast<int64_t>(object.as_list().size());
        const int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
        return i >= 0 && i < n ? object.as_list()[i] : Value();
      }
      const std::vector<char32_t> cps = utf8_codepoints(object.as_string());
      const auto n = static_cast<int64_t>(cps.size());
      const int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
      return i >= 0 && i < n ? Value::string(utf8_from_codepoints({cps[i]})) : Value();
    }
    default:
      return Value();
  }
}

Value slice(const Value& object, const Value& start, const Value& stop, const Value& step_value) {
  const int64_t step = step_value.is_none() || step_value.is_undefined() ? 1 : step_value.as_int();
  PLUMB_CHECK(step != 0, "slice step cannot be zero");
  PLUMB_CHECK(object.kind() == Kind::kList || object.is_string(), "'{}' object is not subscriptable",
              object.type_name());
  if (object.kind() == Kind::kList) {
    int64_t lo = 0, hi = 0;
    slice_bounds(static_cast<int64_t>(object.as_list().size()), start, stop, step, lo, hi);
    List out;
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) out.push_back(object.as_list()[i]);
    return Value::list(std::move(out));
  }
  const std::vector<char32_t> cps = utf8_codepoints(object.as_string());
  int64_t lo = 0, hi = 0;
  slice_bounds(static_cast<int64_t>(cps.size()), start, stop, step, lo, hi);
  std::vector<char32_t> out;
  for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) out.push_back(cps[i]);
  return Value::string(utf8_from_codepoints(out));
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return {};
    case Kind::kList:
      return v.as_list();
    case Kind::kDict:
    case Kind::kNamespace: {
      std::vector<Value> keys;
      for (const auto& [k, _] : v.as_dict()) keys.push_back(Value::string(k));
      return keys;
    }
    case Kind::kString: {
      std::vector<Value> chars;
      for (char32_t cp : utf8_codepoints(v.as_string())) chars.push_back(Value::string(utf8_from_codepoints({cp})));
      return chars;
    }
    default:
      PLUMB_FAIL("'{}' object is not iterable", v.type_name());
  }
}

Dict default_globals() {
  Dict g;
  g.emplace_back("range", Value::function("range", [](CallArgs& a) {
                   PLUMB_CHECK(a.keyword.empty() && !a.positional.empty() && a.positional.size() <= 3,
                               "range() takes 1 to 3 integer arguments");
                   for (const Value& v : a.positional) {
                     PLUMB_CHECK(v.kind() == Kind::kInt || v.kind() == Kind::kBool,
                                 "range() arguments must be integers");
                   }
                   const int64_t start = a.positional.size() > 1 ? a.positional[0].as_int() : 0;
                   const int64_t stop = a.positional.size() > 1 ? a.positional[1].as_int() : a.positional[0].as_int();
                   const int64_t step = a.positional.size() > 2 ? a.positional[2].as_int() : 1;
                   PLUMB_CHECK(step != 0, "range() arg 3 must not be zero");
                   List out;
                   for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                     PLUMB_CHECK(static_cast<int64_t>(out.size()) < kMaxSequence, "range() is too long");
                     out.push_back(Value::integer(i));
                   }
                   return Value::list(std::move(out));
                 }));
  auto keyword_dict = [](CallArgs& a, bool name_space) {
    Dict items;
    PLUMB_CHECK(a.positional.size() <= 1, "{}() takes at most one positional argument",
                name_space ? "namespace" : "dict");
    if (!a.positional.empty()) {
      PLUMB_CHECK(a.positional[0].is_mapping(), "{}() positional argument must be a mapping",
                  name_space ? "namespace" : "dict");
      items = a.positional[0].as_dict();
    }
    for (const auto& keyword : a.keyword) {  // not a structured binding: clang 14 cannot capture those
      auto it = std::find_if(items.begin(), items.end(), [&](const auto& item) { return item.first == keyword.first; });
      if (it != items.end()) {
        it->second = keyword.second;
      } else {
        items.push_back(keyword);
      }
    }
    return name_space ? Value::name_space(std::move(items)) : Value::dict(std::move(items));
  };
  g.emplace_back("namespace",
                 Value::function("namespace", [keyword_dict](CallArgs& a) { return keyword_dict(a, true); }));
  g.emplace_back("dict", Value::function("dict", [keyword_dict](CallArgs& a) { return keyword_dict(a, false); }));
  g.emplace_back("raise_exception", Value::function("raise_exception", [](CallArgs& a) -> Value {
                   PLUMB_FAIL("the template raised an exception: {}", arg(a, 0, "message").str());
                 }));
  g.emplace_back("strftime_now", Value::function("strftime_now", [](CallArgs& a) {
                   const std::string format = string_arg(a, 0, "format", "strftime_now");
                   const std::time_t now = std::time(nullptr);
                   std::tm local{};
                   localtime_r(&now, &local);
                   char buffer[256];
                   const size_t n = std::strftime(buffer, sizeof(buffer), format.c_str(), &local);
                   return Value::string(std::string(buffer, n));
                 }));
  return g;
}

}  // namespace plumb::tokenizer::jinja
