// Values of the chat-template interpreter, with Python semantics: what Jinja templates see when transformers renders
// them (None, bool, int, float, str, list, dict, plus Jinja's Undefined and callables). Lists and dicts are shared
// and immutable once built, as in transformers' ImmutableSandboxedEnvironment; only namespace() objects change.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace plumb::tokenizer::jinja {

class Value;
using List = std::vector<Value>;
// Insertion-ordered string-keyed map (Python dicts keep insertion order; chat templates rely on it for tojson).
using Dict = std::vector<std::pair<std::string, Value>>;

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using Function = std::function<Value(CallArgs&)>;

enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };

class Value {
 public:
  Value() = default;  // Undefined
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value real(double d);
  static Value string(std::string s);
  static Value list(List items);
  static Value dict(Dict items);
  static Value name_space(Dict items);  // a mutable namespace() object
  static Value function(std::string name, Function fn);
  // Throws plumb::Error when `j` nests arrays and objects deeper than kMaxJsonDepth (core/json_depth.h) levels:
  // the conversion, and every later use of the value, recurses once per level.
  static Value from_json(const nlohmann::ordered_json& j, int depth = 0);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_mapping() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? int64_t{b_} : i_; }  // Python bools are ints
  double as_float() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
  const std::string& as_string() const { return *s_; }
  const List& as_list() const { return *list_; }
  const Dict& as_dict() const { return *dict_; }
  Dict& namespace_items() const { return *dict_; }
  const std::string& function_name() const { return *s_; }
  Value call(CallArgs& args) const { return (*fn_)(args); }
  // The shared object behind a namespace or function (they compare by identity, as in Python).
  const void* identity() const { return dict_ ? static_cast<const void*>(dict_.get()) : fn_.get(); }

  // Python truthiness (Undefined is false).
  bool truthy() const;
  // The member `key` of a dict or namespace, or nullptr.
  const Value* find(const std::string& key) const;

  // Python type name, for error messages ("str", "int", "NoneType", ...).
  std::string type_name() const;
  // Python str() (Undefined prints as "").
  std::string str() const;
  // Python repr().
  std::string repr() const;
  // json.dumps(value, ensure_ascii=False, indent=indent, separators=..., sort_keys=...); indent < 0 means None.
  std::string to_json(int indent, const std::string& item_sep, const std::string& key_sep, bool sort_keys) const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Function> fn_;

  // Appends repr() to `out`, failing once `out` passes kMaxValueTextBytes.
  void append_repr(std::string& out) const;
};

// The most text one value's str(), repr() or JSON may have (a list repeated into itself a few times has a text of
// gigabytes: tokenizer_fuzz's `((9,)*9999,)*8100` spent its time printing 81 M elements); past it, a plumb::Error. A
// message's content is a string and prints as itself, unbounded here (the rendered prompt has its own limit).
constexpr size_t kMaxValueTextBytes = size_t{16} << 20;

// Python ==.
bool equal(const Value& a, const Value& b);
// Python <; throws plumb::Error for types Python cannot order.
bool less(const Value& a, const Value& b);
// Python float repr: shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string python_float_repr(double d);

}  // namespace plumb::tokenizer::jinja
