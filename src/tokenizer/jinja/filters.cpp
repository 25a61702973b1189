// Jinja's built-in filters and tests as transformers' environment has them (tojson is transformers' own: no HTML
// escaping, ensure_ascii=False, optional indent/separators/sort_keys).
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "core/error.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/strings.h"
#include "tokenizer/utf8.h"

namespace plumb::tokenizer::jinja {
namespace {

// Named parameters of a filter or test after its subject; rejects unknown keywords and surplus positionals.
class Params {
 public:
  Params(CallArgs& args, std::string_view fn, std::vector<std::string_view> names) : args_(args), names_(names) {
    PLUMB_CHECK(args.positional.size() <= names.size(), "{}() takes at most {} arguments", fn, names.size());
    for (const auto& [k, _] : args.keyword) {
      PLUMB_CHECK(std::find(names.begin(), names.end(), k) != names.end(), "{}() got an unexpected keyword '{}'", fn,
                  k);
    }
  }
  Value operator()(size_t index, Value fallback = Value()) const {
    if (index < args_.positional.size()) return args_.positional[index];
    for (const auto& [k, v] : args_.keyword) {
      if (k == names_[index]) return v;
    }
    return fallback;
  }

 private:
  CallArgs& args_;
  std::vector<std::string_view> names_;
};

// Follows a dotted attribute path ("function.name"), as Jinja's attribute= arguments do.
Value attribute_path(const Value& v, const std::string& path) {
  Value current = v;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    current = numeric ? get_item(current, Value::integer(decimal_int64(part, "attribute path index")))
                      : get_item(current, Value::string(part));
    if (dot == std::string::npos || current.is_undefined()) return current;
    start = dot + 1;
  }
}

// For sort/min/max/unique: strings compare case-insensitively unless case_sensitive.
Value sort_key(const Value& v, const Value& attribute, bool case_sensitive) {
  Value key = attribute.is_string() ? attribute_path(v, attribute.as_string()) : v;
  if (!case_sensitive && key.is_string()) key = Value::string(python_case(key.as_string(), "lower"));
  return key;
}

// select/reject/selectattr/rejectattr: keeps items whose test result equals `keep`.
Value filter_items(const Value& seq, CallArgs& args, bool by_attribute, bool keep) {
  List out;
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    PLUMB_CHECK(!args.positional.empty() && args.positional[0].is_string(), "selectattr needs an attribute name");
    attribute = args.positional[next++].as_string();
  }
  std::string test;
  if (next < args.positional.size()) {
    PLUMB_CHECK(args.positional[next].is_string(), "select needs a test name");
    test = args.positional[next++].as_string();
    PLUMB_CHECK(is_known_test(test), "test '{}' is not supported", test);
  }
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
  test_args.keyword = args.keyword;
  for (const Value& item : iterate(seq)) {
    const Value subject = by_attribute ? attribute_path(item, attribute) : item;
    const bool passed = test.empty() ? subject.truthy() : call_test(test, subject, test_args);
    if (passed == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

std::string indent_text(const std::string& s, const Value& width, bool first, bool blank) {
  const std::string pad = width.is_string()
                              ? width.as_string()
                              : std::string(static_cast<size_t>(std::max<int64_t>(width.as_int(), 0)), ' ');
  std::string out;
  size_t start = 0;
  bool is_first = true;
  while (start <= s.size()) {
    const size_t nl = s.find('\n', start);
    const std::string line = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    const bool indent = (is_first ? first : true) && (blank || !line.empty());
    out += (indent ? pad : "") + line;
    if (nl == std::string::npos) break;
    out += '\n';
    start = nl + 1;
    is_first = false;
  }
  return out;
}

using FilterFn = std::function<Value(const Value&, CallArgs&)>;

const std::map<std::string, FilterFn, std::less<>>& filters() {
  static const std::map<std::string, FilterFn, std::less<>> table = [] {
    std::map<std::string, FilterFn, std::less<>> t;
    t["tojson"] = [](const Value& v, CallArgs& a) {
      const Params p(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
      PLUMB_CHECK(!p(0, Value::boolean(false)).truthy(), "tojson(ensure_ascii=True) is not supported");
      const Value indent = p(1, Value::none());
      const Value separators = p(2, Value::none());
      std::string item_sep = indent.is_none() ? ", " : ",", key_sep = ": ";
      if (!separators.is_none()) {
        PLUMB_CHECK(separators.kind() == Kind::kList && separators.as_list().size() == 2 &&
                        separators.as_list()[0].is_string() && separators.as_list()[1].is_string(),
                    "tojson separators must be a pair of strings");
        item_sep = separators.as_list()[0].as_string();
        key_sep = separators.as_list()[1].as_string();
      }
      const int width = indent.is_none() ? -1 : static_cast<int>(std::clamp<int64_t>(indent.as_int(), 0, 64));
      return Value::string(v.to_json(width, item_sep, key_sep, p(3, Value::boolean(false)).truthy()));
    };
    t["length"] = [](const Value& v, CallArgs&) {
      switch (v.kind()) {
        case Kind::kString:
          return Value::integer(codepoint_count(v.as_string()));
        case Kind::kList:
          return Value::integer(static_cast<int64_t>(v.as_list().size()));
        case Kind::kDict:
        case Kind::kNamespace:
          return Value::integer(static_cast<int64_t>(v.as_dict().size()));
        case Kind::kUndefined:
          return Value::integer(0);
        default:
          PLUMB_FAIL("object of type '{}' has no len()", v.type_name());
      }
    };
    t["count"] = t["length"];
    t["trim"] = [](const Value& v, CallArgs& a) {
      const Value chars = Params(a, "trim", {"chars"})(0, Value::none());
      return Value::string(python_strip(v.str(), chars.is_string() ? &chars.as_string() : nullptr, true, true));
    };
    for (const char* how : {"upper", "lower", "title", "capitalize"}) {
      t[how] = [how](const Value& v, CallArgs&) { return Value::string(python_case(v.str(), how)); };
    }
    t["string"] = [](const Value& v, CallArgs&) { return Value::string(v.str()); };
    t["safe"] = [](const Value& v, CallArgs&) { return v; };
    t["escape"] = [](const Value& v, CallArgs&) {
      std::string out;
      for (char c : v.str()) {
        switch (c) {
          case '&':
            out += "&amp;";
            break;
          case '<':
            out += "&lt;";
            break;
          case '>':
            out += "&gt;";
            break;
          case '"':
            out += "&#34;";
            break;
          case '\'':
            out += "&#39;";
            break;
          default:
            out += c;
        }
      }
      return Value::string(std::move(out));
    };
    t["e"] = t["escape"];
    t["default"] = [](const Value& v, CallArgs& a) {
      const Params p(a, "default", {"default_value", "boolean"});
      const bool use_default = p(1, Value::boolean(false)).truthy() ? !v.truthy() : v.is_undefined();
      return use_default ? p(0, Value::string("")) : v;
    };
    t["d"] = t["default"];
    t["first"] = [](const Value& v, CallArgs&) {
      const std::vector<Value> items = iterate(v);
      return items.empty() ? Value() : items.front();
    };
    t["last"] = [](const Value& v, CallArgs&) {
      const std::vector<Value> items = iterate(v);
      return items.empty() ? Value() : items.back();
    };
    t["list"] = [](const Value& v, CallArgs&) { return Value::list(iterate(v)); };
    t["items"] = [](const Value& v, CallArgs&) {
      if (v.is_undefined()) return Value::list({});
      PLUMB_CHECK(v.is_mapping(), "items filter needs a mapping, not {}", v.type_name());
      CallArgs none;
      return get_attr(v, "items").call(none);
    };
    t["dictsort"] = [](const Value& v, CallArgs& a) {
      const Params p(a, "dictsort", {"case_sensitive", "by", "reverse"});
      PLUMB_CHECK(v.is_mapping(), "dictsort needs a mapping, not {}", v.type_name());
      const bool by_value = p(1, Value::string("key")).str() == "value";
      const bool case_sensitive = p(0, Value::boolean(false)).truthy();
      List pairs;
      for (const auto& [k, item] : v.as_dict()) pairs.push_back(Value::list({Value::string(k), item}));
      std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
        const size_t i = by_value ? 1 : 0;
        return less(sort_key(x.as_list()[i], Value(), case_sensitive),
                    sort_key(y.as_list()[i], Value(), case_sensitive));
      });
      if (p(2, Value::boolean(false)).truthy()) std::reverse(pairs.begin(), pairs.end());
      return Value::list(std::move(pairs));
    };
    t["join"] = [](const Value& v, CallArgs& a) {
      const Params p(a, "join", {"d", "attribute"});
      const std::string sep = p(0, Value::string("")).str();
      const Value attribute = p(1, Value::none());
      std::string out;
      bool first = true;
      for (const Value& item : iterate(v)) {
        out += (first ? "" : sep) + (attribute.is_string() ? attribute_path(item, attribute.as_string()) : item).str();
        first = false;
      }
      return Value::string(std::move(out));
    };
    t["map"] = [](const Value& v, CallArgs& a) {
      List out;
      const Value* attribute = nullptr;
      Value fallback;
      for (const auto& [k, val] : a.keyword) {
        if (k == "attribute") attribute = &val;
        if (k == "default") fallback = val;
      }
      if (attribute != nullptr) {
        for (const Value& item : iterate(v)) {
          Value x = attribute_path(item, attribute->str());
          out.push_back(x.is_undefined() ? fallback : x);
        }
        return Value::list(std::move(out));
      }
      PLUMB_CHECK(!a.positional.empty() && a.positional[0].is_string(), "map needs a filter name or attribute=");
      const std::string name = a.positional[0].as_string();
      PLUMB_CHECK(is_known_filter(name), "filter '{}' is not supported", name);
      CallArgs rest;
      rest.positional.assign(a.positional.begin() + 1, a.positional.end());
      rest.keyword = a.keyword;
      for (const Value& item : iterate(v)) out.push_back(call_filter(name, item, rest));
      return Value::list(std::move(out));
    };
    t["select"] = [](const Value& v, CallArgs& a) { return filter_items(v, a, false, true); };
    t["reject"] = [](const Value& v, CallArgs& a) { return filter_items(v, a, false, false); };
    t["selectattr"] = [](const Value& v, CallArgs& a) { return filter_items(v, a, true, true); };
    t["rejectattr"] = [](const Value& v, CallArgs& a) { return filter_items(v, a, true, false); };
    t["sort"] = [](const Value& v, CallArgs& a) {
      const Params p(a, "sort", {"reverse", "case_sensitive", "attribute"});
      std::vector<Value> items = iterate(v);
      const bool case_sensitive = p(1, Value::boolean(false)).truthy();
      const Value attribute = p(2, Value::none());
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        return less(sort_key(x, attribute, case_sensitive), sort_key(y, attribute, case_sensitive));
      });
      if (p(0, Value::boolean(false)).truthy()) std::reverse(items.begin(), items.end());
      return Value::list(std::move(items));
    };
    t["unique"] = [](const Value& v, CallArgs& a) {
      const Params p(a, "unique", {"case_sensitive", "attribute"});
      List out, keys;
      for (const Value& item : iterate(v)) {
        const Value key = sort_key(item, p(1, Value::none()), p(0, Value::boolean(false)).truthy());
        if (std::none_of(keys.begin(), keys.end(), [&](const Value& k) { return equal(k, key); })) {
          keys.push_back(key);
          out.push_back(item);
        }
      }
      return Value::list(std::move(out));
    };
    for (const char* which : {"min", "max"}) {
      const bool is_max = std::string_view(which) == "max";
      t[which] = [is_max, which](const Value& v, CallArgs& a) {
        const Params p(a, which, {"case_sensitive", "attribute"});
        const std::vector<Value> items = iterate(v);
        if (items.empty()) return Value();
        auto key = [&](const Value& x) {
          return sort_key(x, p(1, Value::none()), p(0, Value::boolean(false)).truthy());
        };
        size_t best = 0;
        for (size_t i = 1; i < items.size(); ++i) {
          if (is_max ? less(key(items[best]), key(items[i])) : less(key(items[i]), key(items[best]))) best = i;
        }
        return items[best];
      };
    }
    t["sum"] = [](const Value& v, CallArgs& a) {
      const Params p(a, "sum", {"attribute", "start"});
      Value total = p(1, Value::integer(0));
      for (const Value& item : iterate(v)) {
        total = binary_op("+", total, p(0).is_string() ? attribute_path(item, p(0).as_string()) : item);
      }
      return total;
    };
    t["reverse"] = [](const Value& v, CallArgs&) {
      if (v.is_string()) return slice(v, Value::none(), Value::none(), Value::integer(-1));
      std::vector<Value> items = iterate(v);
      std::reverse(items.begin(), items.end());
      return Value::list(std::move(items));
    };
    t["replace"] = [](const Value& v, CallArgs& a) {
      const Params p(a, "replace", {"old", "new", "count"});
      const Value count = p(2, Value::none());
      return Value::string(python_replace(v.str(), p(0).str(), p(1).str(), count.is_none() ? -1 : count.as_int()));
    };
    t["int"] = [](const Value& v, CallArgs& a) {
      const Params p(a, "int", {"default", "base"});
      if (v.kind() == Kind::kInt || v.kind() == Kind::kBool) return Value::integer(v.as_int());
      if (v.kind() == Kind::kFloat && std::isfinite(v.as_float()) && std::fabs(v.as_float()) < 9.2e18) {
        return Value::integer(static_cast<int64_t>(v.as_float()));
      }
      if (v.is_string()) {
        const std::string s = python_strip(v.as_string(), nullptr, true, true);
        char* end = nullptr;
        errno = 0;
        const long long i = std::strtoll(s.c_str(), &end, static_cast<int>(p(1, Value::integer(10)).as_int()));
        if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return Value::integer(i);
        const double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18) {
          return Value::integer(static_cast<int64_t>(d));
        }
      }
      return p(0, Value::integer(0));
    };
    t["float"] = [](const Value& v, CallArgs& a) {
      const Params p(a, "float", {"default"});
      if (v.is_number()) return Value::real(v.as_float());
      if (v.is_string()) {
        const std::string s = python_strip(v.as_string(), nullptr, true, true);
        char* end = nullptr;
        const double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && end == s.c_str() + s.size()) return Value::real(d);
      }
      return p(0, Value::real(0.0));
    };
    t["abs"] = [](const Value& v, CallArgs&) {
      PLUMB_CHECK(v.is_number(), "bad operand type for abs(): '{}'", v.type_name());
      if (v.kind() == Kind::kFloat) return Value::real(std::fabs(v.as_float()));
      PLUMB_CHECK(v.as_int() != INT64_MIN, "integer overflow in abs()");
      return Value::integer(std::llabs(v.as_int()));
    };
    t["round"] = [](const Value& v, CallArgs& a) {
      const Params p(a, "round", {"precision", "method"});
      const double scale = std::pow(10.0, static_cast<double>(p(0, Value::integer(0)).as_int()));
      const std::string method = p(1, Value::string("common")).str();
      const double x = v.as_float() * scale;
      const double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
      return Value::real(r / scale);
    };
    t["wordcount"] = [](const Value& v, CallArgs&) {
      return Value::integer(static_cast<int64_t>(python_split(v.str(), nullptr, -1, false).size()));
    };
    t["indent"] = [](const Value& v, CallArgs& a) {
      const Params p(a, "indent", {"width", "first", "blank"});
      return Value::string(indent_text(v.str(), p(0, Value::integer(4)), p(1, Value::boolean(false)).truthy(),
                                       p(2, Value::boolean(false)).truthy()));
    };
    t["attr"] = [](const Value& v, CallArgs& a) { return get_attr(v, Params(a, "attr", {"name"})(0).str()); };
    return t;
  }();
  return table;
}

using TestFn = std::function<bool(const Value&, CallArgs&)>;

const std::map<std::string, TestFn, std::less<>>& tests() {
  static const std::map<std::string, TestFn, std::less<>> table = [] {
    std::map<std::string, TestFn, std::less<>> t;
    auto other = [](CallArgs& a, std::string_view name) {
      PLUMB_CHECK(a.positional.size() == 1 && a.keyword.empty(), "test '{}' takes one argument", name);
      return a.positional[0];
    };
    t["defined"] = [](const Value& v, CallArgs&) { return !v.is_undefined(); };
    t["undefined"] = [](const Value& v, CallArgs&) { return v.is_undefined(); };
    t["none"] = [](const Value& v, CallArgs&) { return v.is_none(); };
    t["boolean"] = [](const Value& v, CallArgs&) { return v.kind() == Kind::kBool; };
    t["true"] = [](const Value& v, CallArgs&) { return v.kind() == Kind::kBool && v.as_bool(); };
    t["false"] = [](const Value& v, CallArgs&) { return v.kind() == Kind::kBool && !v.as_bool(); };
    t["string"] = [](const Value& v, CallArgs&) { return v.is_string(); };
    t["number"] = [](const Value& v, CallArgs&) { return v.is_number(); };
    t["integer"] = [](const Value& v, CallArgs&) { return v.kind() == Kind::kInt; };
    t["float"] = [](const Value& v, CallArgs&) { return v.kind() == Kind::kFloat; };
    t["mapping"] = [](const Value& v, CallArgs&) { return v.kind() == Kind::kDict; };
    t["sequence"] = [](const Value& v, CallArgs&) {
      return v.kind() == Kind::kList || v.is_string() || v.kind() == Kind::kDict;
    };
    t["iterable"] = [](const Value& v, CallArgs&) {
      return v.kind() == Kind::kList || v.is_string() || v.is_mapping();
    };
    t["callable"] = [](const Value& v, CallArgs&) { return v.kind() == Kind::kFunction; };
    t["odd"] = [](const Value& v, CallArgs&) { return v.as_int() % 2 != 0; };
    t["even"] = [](const Value& v, CallArgs&) { return v.as_int() % 2 == 0; };
    t["divisibleby"] = [other](const Value& v, CallArgs& a) {
      const int64_t d = other(a, "divisibleby").as_int();
      PLUMB_CHECK(d != 0, "divisibleby 0");
      return v.as_int() % d == 0;
    };
    t["lower"] = [](const Value& v, CallArgs&) {
      return v.is_string() && python_case(v.as_string(), "lower") == v.as_string();
    };
    t["upper"] = [](const Value& v, CallArgs&) {
      return v.is_string() && python_case(v.as_string(), "upper") == v.as_string();
    };
    t["eq"] = [other](const Value& v, CallArgs& a) { return equal(v, other(a, "eq")); };
    t["ne"] = [other](const Value& v, CallArgs& a) { return !equal(v, other(a, "ne")); };
    t["lt"] = [other](const Value& v, CallArgs& a) { return less(v, other(a, "lt")); };
    t["gt"] = [other](const Value& v, CallArgs& a) { return less(other(a, "gt"), v); };
    t["le"] = [other](const Value& v, CallArgs& a) { return !less(other(a, "le"), v); };
    t["ge"] = [other](const Value& v, CallArgs& a) { return !less(v, other(a, "ge")); };
    t["in"] = [other](const Value& v, CallArgs& a) { return contains(other(a, "in"), v); };
    t["sameas"] = [other](const Value& v, CallArgs& a) {
      const Value o = other(a, "sameas");
      // Python "is": singletons and small values compare by value here; containers by identity.
      if (v.kind() != o.kind()) return false;
      if (v.kind() == Kind::kList || v.is_mapping() || v.kind() == Kind::kFunction) {
        return v.kind() == Kind::kList ? &v.as_list() == &o.as_list() : v.identity() == o.identity();
      }
      return equal(v, o);
    };
    for (const auto& [alias, name] : std::vector<std::pair<std::string, std::string>>{{"equalto", "eq"},
                                                                                      {"==", "eq"},
                                                                                      {"!=", "ne"},
                                                                                      {"<", "lt"},
                                                                                      {"lessthan", "lt"},
                                                                                      {">", "gt"},
                                                                                      {"greaterthan", "gt"},
                                                                                      {"<=", "le"},
                                                                                      {">=", "ge"}}) {
      t[alias] = t[name];
    }
    return t;
  }();
  return table;
}

}  // namespace

bool is_known_filter(std::string_view name) {
  return filters().count(name) > 0;
}
bool is_known_test(std::string_view name) {
  return tests().count(name) > 0;
}

Value call_filter(std::string_view name, const Value& target, CallArgs& args) {
  const auto it = filters().find(name);
  PLUMB_CHECK(it != filters().end(), "filter '{}' is not supported", name);
  return it->second(target, args);
}

bool call_test(std::string_view name, const Value& value, CallArgs& args) {
  const auto it = tests().find(name);
  PLUMB_CHECK(it != tests().end(), "test '{}' is not supported", name);
  return it->second(value, args);
}

}  // namespace plumb::tokenizer::jinja
