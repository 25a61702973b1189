#include "grammar/json_schema.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "grammar/ranges.h"
#include "grammar/regex.h"

namespace plumb::grammar {

namespace {

using Json = nlohmann::ordered_json;

const std::set<std::string> kAnnotations = {"title",       "description", "default",  "examples",
                                            "$schema",     "$id",         "$comment", "$defs",
                                            "definitions", "deprecated",  "readOnly", "writeOnly"};
const std::set<std::string> kKeywords = {"type",
                                         "enum",
                                         "const",
                                         "anyOf",
                                         "oneOf",
                                         "allOf",
                                         "$ref",
                                         "properties",
                                         "required",
                                         "additionalProperties",
                                         "items",
                                         "prefixItems",
                                         "minItems",
                                         "maxItems",
                                         "minLength",
                                         "maxLength",
                                         "pattern",
                                         "minimum",
                                         "maximum",
                                         "exclusiveMinimum",
                                         "exclusiveMaximum"};
// The largest integer a number's integer part can write (kMaxDigits nines).
constexpr int64_t kMaxInteger = 999'999'999'999'999;
static_assert(kMaxDigits == 15);
const std::set<std::string> kTypes = {"object", "array", "string", "number", "integer", "boolean", "null"};

// An integer as JSON Schema counts them: 3 and 3.0 alike.
bool is_integer(const Json& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && std::floor(d) == d;
}

std::string at(const std::string& pointer) {
  return "#" + pointer;
}

std::string child(const std::string& pointer, const std::string& key) {
  std::string escaped;
  for (char c : key) escaped += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return pointer + "/" + escaped;
}

Sequence literal(std::string_view text) {
  Sequence s;
  append_literal(s, text);
  return s;
}

// The UTF-8 encodings of the code points U+0080..U+10FFFF other than surrogates, as byte-set sequences.
std::vector<Sequence> multibyte_characters() {
  const ByteSet tail = byte_range(0x80, 0xBF);
  auto seq = [](std::initializer_list<ByteSet> sets) {
    Sequence s;
    for (const ByteSet& b : sets) s.push_back(bytes_item(b));
    return s;
  };
  return {seq({byte_range(0xC2, 0xDF), tail}),
          seq({one_byte(0xE0), byte_range(0xA0, 0xBF), tail}),
          seq({byte_range(0xE1, 0xEC), tail, tail}),
          seq({one_byte(0xED), byte_range(0x80, 0x9F), tail}),
          seq({byte_range(0xEE, 0xEF), tail, tail}),
          seq({one_byte(0xF0), byte_range(0x90, 0xBF), tail, tail}),
          seq({byte_range(0xF1, 0xF3), tail, tail, tail}),
          seq({one_byte(0xF4), byte_range(0x80, 0x8F), tail, tail})};
}

// The ASCII characters a JSON string may hold unescaped.
ByteSet plain_ascii() {
  ByteSet set = byte_range(0x20, 0x7F);
  set.reset('"');
  set.reset('\\');
  return set;
}

// A number schema's bounds; a side without one is open.
struct Bounds {
  std::optional<double> lo, hi;
  bool lo_exclusive = false, hi_exclusive = false;
};

// The integers within `b`, clamped to what kMaxDigits digits write; nullopt if none.
std::optional<std::pair<int64_t, int64_t>> integers_within(const Bounds& b) {
  const auto clamp = [](double v) {
    return std::clamp(v, -static_cast<double>(kMaxInteger), static_cast<double>(kMaxInteger));
  };
  const double lo =
      b.lo ? clamp(b.lo_exclusive ? std::floor(*b.lo) + 1 : std::ceil(*b.lo)) : -static_cast<double>(kMaxInteger);
  const double hi =
      b.hi ? clamp(b.hi_exclusive ? std::ceil(*b.hi) - 1 : std::floor(*b.hi)) : static_cast<double>(kMaxInteger);
  if (lo > hi) return std::nullopt;
  return std::make_pair(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
}

class Compiler {
 public:
  explicit Compiler(const Json& root) : root_(root) {}

  Grammar compile(const JsonWrapping& wrapping) {
    Sequence top = literal(wrapping.prefix);
    top.push_back(rule_item(schema(root_, "")));
    append_literal(top, wrapping.suffix);
    return builder_.build(builder_.rule("root", {top}));
  }

 private:
  int32_t schema(const Json& s, const std::string& path);
  int32_t reference(const Json& ref, const std::string& path);
  int32_t literals(const Json& s, const std::string& path);
  std::vector<std::string> types(const Json& s, const std::string& path);
  int32_t typed(const Json& s, const std::string& type, const std::string& path);
  int32_t object(const Json& s, const std::string& path);
  int32_t array(const Json& s, const std::string& path);
  int32_t string(std::optional<int64_t> min, std::optional<int64_t> max, const std::string& path);
  int32_t key_node(const std::vector<std::string>& keys, size_t depth);
  int32_t extra_key(const std::vector<std::string>& declared);
  int32_t ws();
  int32_t character();
  int32_t plain_character();
  int32_t digits(int count);
  int32_t number(bool integer);
  int32_t bounded_number(const Bounds& b, bool integer, const std::string& path);
  Bounds bounds(const Json& s, const std::string& path) const;
  int32_t pattern(const Json& s, const std::string& path);
  int32_t any();

  // Fails unless every key of `s` other than `keyword` is an annotation (or one of `also`).
  void alone(const Json& s, const std::string& keyword, const std::string& path,
             const std::set<std::string>& also = {}) const {
    for (const auto& [k, v] : s.items())
      PLUMB_CHECK(k == keyword || kAnnotations.count(k) || also.count(k),
                  "'{}' together with '{}' is not supported at {}", keyword, k, at(path));
  }
  std::optional<int64_t> count(const Json& s, const char* key, const std::string& path) const {
    if (!s.contains(key)) return std::nullopt;
    const Json& v = s[key];
    PLUMB_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= kMaxCountBound,
                "'{}' at {} must be an integer in [0, {}], got {}", key, at(path), kMaxCountBound, v.dump());
    return v.get<int64_t>();
  }
  Sequence separator(bool first) {
    Sequence s = first ? Sequence{} : literal(",");
    s.push_back(rule_item(ws()));
    return s;
  }
  Sequence closing(char bracket) {
    Sequence s{rule_item(ws())};
    append_literal(s, std::string(1, bracket));
    return s;
  }
  // ws key ws ":" ws value, after the separator.
  void append_member(Sequence& s, int32_t key, int32_t value) {
    s.insert(s.end(), {rule_item(key), rule_item(ws())});
    append_literal(s, ":");
    s.insert(s.end(), {rule_item(ws()), rule_item(value)});
  }

  const Json& root_;
  GrammarBuilder builder_;
  std::map<std::string, int32_t> references_;
  std::map<std::pair<int64_t, int64_t>, int32_t> strings_;  // (min, max or -1) -> rule
  std::map<int, int32_t> digits_;
  int32_t ws_ = -1, character_ = -1, plain_character_ = -1, number_ = -1, integer_ = -1, any_ = -1, any_object_ = -1;
  int32_t free_key_ = -1;
};

int32_t Compiler::schema(const Json& s, const std::string& path) {
  if (s.is_boolean()) {
    PLUMB_CHECK(s.get<bool>(), "the schema at {} is false: no value satisfies it", at(path));
    return any();
  }
  PLUMB_CHECK(s.is_object(), "the schema at {} must be an object or a boolean, got {}", at(path), s.dump());
  for (const auto& [k, v] : s.items())
    PLUMB_CHECK(kAnnotations.count(k) || kKeywords.count(k), "unsupported JSON Schema keyword '{}' at {}", k, at(path));
  if (s.contains("$ref")) {
    alone(s, "$ref", path);
    return reference(s["$ref"], path);
  }
  for (const char* keyword : {"anyOf", "oneOf", "allOf"}) {
    if (!s.contains(keyword)) continue;
    alone(s, keyword, path);
    const Json& list = s[keyword];
    const std::string here = child(path, keyword);
    PLUMB_CHECK(list.is_array() && !list.empty(), "'{}' at {} must be a non-empty list of schemas", keyword, at(path));
    PLUMB_CHECK(std::string(keyword) != "allOf" || list.size() == 1,
                "'allOf' with more than one schema is not supported at {}", at(path));
    std::vector<Sequence> alternatives;
    for (size_t i = 0; i < list.size(); ++i)
      alternatives.push_back({rule_item(schema(list[i], child(here, std::to_string(i))))});
    return builder_.rule(here, std::move(alternatives));
  }
  if (s.contains("enum") || s.contains("const")) return literals(s, path);
  std::vector<Sequence> alternatives;
  for (const std::string& type : types(s, path)) alternatives.push_back({rule_item(typed(s, type, path))});
  return alternatives.size() == 1 ? alternatives[0][0].rule : builder_.rule(at(path), std::move(alternatives));
}

int32_t Compiler::reference(const Json& ref, const std::string& path) {
  PLUMB_CHECK(ref.is_string() && ref.get<std::string>().starts_with("#"),
              "'$ref' at {} must be a reference inside the schema (\"#/$defs/...\"), got {}", at(path), ref.dump());
  const std::string pointer = ref.get<std::string>().substr(1);
  if (const auto it = references_.find(pointer); it != references_.end()) return it->second;
  const Json* target = nullptr;
  try {
    const Json::json_pointer p(pointer);
    if (root_.contains(p)) target = &root_.at(p);
  } catch (const nlohmann::json::exception&) {
  }
  PLUMB_CHECK(target, "'$ref' at {} names {}, which is not in the schema", at(path), ref.dump());
  // Registered before the target is compiled, so a recursive reference finds it.
  const int32_t rule = builder_.add_rule("$ref " + at(pointer));
  references_.emplace(pointer, rule);
  builder_.add_alternative(rule, {rule_item(schema(*target, pointer))});
  return rule;
}

int32_t Compiler::literals(const Json& s, const std::string& path) {
  PLUMB_CHECK(!(s.contains("enum") && s.contains("const")), "'enum' together with 'const' is not supported at {}",
              at(path));
  const char* keyword = s.contains("enum") ? "enum" : "const";
  alone(s, keyword, path, {"type"});
  const Json values = s.contains("enum") ? s["enum"] : Json::array({s["const"]});
  PLUMB_CHECK(values.is_array() && !values.empty(), "'enum' at {} must be a non-empty list", at(path));
  const std::vector<std::string> allowed = s.contains("type") ? types(s, path) : std::vector<std::string>{};
  auto has_type = [&](const Json& v) {
    if (allowed.empty()) return true;
    for (const std::string& t : allowed) {
      if ((t == "object" && v.is_object()) || (t == "array" && v.is_array()) || (t == "string" && v.is_string()) ||
          (t == "number" && v.is_number()) || (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) ||
          (t == "integer" && is_integer(v)))
        return true;
    }
    return false;
  };
  std::vector<Sequence> alternatives;
  for (const Json& v : values)
    if (has_type(v)) alternatives.push_back(literal(v.dump()));
  PLUMB_CHECK(!alternatives.empty(), "no value of '{}' at {} has the schema's 'type'", keyword, at(path));
  return builder_.rule(child(path, keyword), std::move(alternatives));
}

std::vector<std::string> Compiler::types(const Json& s, const std::string& path) {
  std::vector<std::string> out;
  if (s.contains("type")) {
    const Json& t = s["type"];
    const Json list = t.is_array() ? t : Json::array({t});
    PLUMB_CHECK(!list.empty(), "'type' at {} is an empty list", at(path));
    for (const Json& name : list) {
      PLUMB_CHECK(name.is_string() && kTypes.count(name.get<std::string>()),
                  "'type' at {} must name JSON types (object, array, string, number, integer, boolean, null), got {}",
                  at(path), t.dump());
      if (std::find(out.begin(), out.end(), name.get<std::string>()) == out.end())
        out.push_back(name.get<std::string>());
    }
    return out;
  }
  // Without a type, the types its keywords constrain (a subset of what the schema allows), or any value.
  auto any_of = [&](std::initializer_list<const char*> keys) {
    return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return s.contains(k); });
  };
  if (any_of({"properties", "required", "additionalProperties"})) out.push_back("object");
  if (any_of({"items", "prefixItems", "minItems", "maxItems"})) out.push_back("array");
  if (any_of({"minLength", "maxLength", "pattern"})) out.push_back("string");
  if (any_of({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) out.push_back("number");
  if (out.empty()) out = {"object", "array", "string", "number", "boolean", "null"};
  return out;
}

int32_t Compiler::typed(const Json& s, const std::string& type, const std::string& path) {
  if (type == "object") return object(s, path);
  if (type == "array") return array(s, path);
  if (type == "string" && s.contains("pattern")) return pattern(s, path);
  if (type == "string") return string(count(s, "minLength", path), count(s, "maxLength", path), path);
  if (type == "number" || type == "integer") {
    const Bounds b = bounds(s, path);
    if (b.lo || b.hi) return bounded_number(b, type == "integer", path);
    return number(type == "integer");
  }
  if (type == "boolean") return builder_.rule("boolean", {literal("true"), literal("false")});
  return builder_.rule("null", {literal("null")});
}

int32_t Compiler::object(const Json& s, const std::string& path) {
  const Json properties = s.contains("properties") ? s["properties"] : Json::object();
  PLUMB_CHECK(properties.is_object(), "'properties' at {} must be an object", at(path));
  std::vector<std::string> required;
  if (s.contains("required")) {
    PLUMB_CHECK(s["required"].is_array(), "'required' at {} must be a list of property names", at(path));
    for (const Json& name : s["required"]) {
      PLUMB_CHECK(name.is_string(), "'required' at {} must be a list of property names", at(path));
      required.push_back(name.get<std::string>());
    }
  }
  // Absent additionalProperties means none where properties are declared (the strict reading, as OpenAI's strict
  // mode and XGrammar take it), and any where none are.
  const Json additional = s.contains("additionalProperties") ? s["additionalProperties"] : Json(properties.empty());
  if (properties.empty() && required.empty() && additional == Json(true)) {
    any();
    return any_object_;
  }
  const bool extras = additional != Json(false);
  const int32_t extra_value = extras ? schema(additional, child(path, "additionalProperties")) : -1;

  struct Member {
    std::string key;
    int32_t value;
    bool required;
  };
  std::vector<Member> members;
  auto is_required = [&](const std::string& k) {
    return std::find(required.begin(), required.end(), k) != required.end();
  };
  const std::string props_path = child(path, "properties");
  for (const auto& [k, v] : properties.items()) members.push_back({k, schema(v, child(props_path, k)), is_required(k)});
  for (const std::string& k : required) {
    if (properties.contains(k)) continue;
    PLUMB_CHECK(extras, "required property '{}' at {} is not in 'properties' and 'additionalProperties' is false", k,
                at(path));
    if (std::none_of(members.begin(), members.end(), [&](const Member& m) { return m.key == k; }))
      members.push_back({k, extra_value, true});
  }
  std::vector<std::string> declared;
  for (const Member& m : members) declared.push_back(m.key);

  // rules[i][f]: the members from i on, after members were written (f = 1) or not yet (f = 0).
  const size_t n = members.size();
  std::vector<std::array<int32_t, 2>> rules(n + 1);
  for (auto& r : rules)
    for (int32_t& id : r) id = builder_.add_rule(at(path) + " members");
  for (int f = 0; f < 2; ++f) {
    for (size_t i = 0; i < n; ++i) {
      Sequence with = separator(f == 0);
      append_member(with, builder_.rule(members[i].key, {literal(Json(members[i].key).dump())}), members[i].value);
      with.push_back(rule_item(rules[i + 1][1]));
      builder_.add_alternative(rules[i][f], std::move(with));
      if (!members[i].required) builder_.add_alternative(rules[i][f], {rule_item(rules[i + 1][f])});
    }
    builder_.add_alternative(rules[n][f], closing('}'));
  }
  if (extras) {
    const int32_t key = extra_key(declared);
    const int32_t more = builder_.add_rule(at(path) + " additional properties");
    builder_.add_alternative(more, closing('}'));
    for (int f = 0; f < 2; ++f) {
      Sequence with = separator(f == 0);
      append_member(with, key, extra_value);
      with.push_back(rule_item(more));
      builder_.add_alternative(f == 0 ? rules[n][0] : more, with);
      if (f == 1) builder_.add_alternative(rules[n][1], std::move(with));
    }
  }
  Sequence open = literal("{");
  open.push_back(rule_item(rules[0][0]));
  return builder_.rule(at(path), {open});
}

int32_t Compiler::array(const Json& s, const std::string& path) {
  std::vector<int32_t> prefix;
  if (s.contains("prefixItems")) {
    const Json& list = s["prefixItems"];
    PLUMB_CHECK(list.is_array(), "'prefixItems' at {} must be a list of schemas", at(path));
    for (size_t i = 0; i < list.size(); ++i)
      prefix.push_back(schema(list[i], child(child(path, "prefixItems"), std::to_string(i))));
  }
  const Json items = s.contains("items") ? s["items"] : Json(true);
  PLUMB_CHECK(!items.is_array(), "'items' at {} is a list (draft 4-7 tuples); write 'prefixItems' instead", at(path));
  const int32_t item = items == Json(false) ? -1 : schema(items, child(path, "items"));
  const int64_t min = count(s, "minItems", path).value_or(0);
  std::optional<int64_t> max = count(s, "maxItems", path);
  if (item < 0) max = std::min<int64_t>(max.value_or(kMaxCountBound), static_cast<int64_t>(prefix.size()));
  PLUMB_CHECK(!max || min <= *max, "the array at {} can never have enough items ('minItems' is {}, at most {} fit)",
              at(path), min, *max);
  // rules[i]: after i items. Unbounded, the last rule loops on itself.
  const int64_t loop = std::max<int64_t>({static_cast<int64_t>(prefix.size()), min, 1});
  const int64_t last = max ? *max : loop;
  std::vector<int32_t> rules;
  for (int64_t i = 0; i <= last; ++i) rules.push_back(builder_.add_rule(at(path) + " items"));
  for (int64_t i = 0; i <= last; ++i) {
    const auto at_i = static_cast<size_t>(i);
    if (i >= min) builder_.add_alternative(rules[at_i], closing(']'));
    if (max && i == *max) continue;
    Sequence with = separator(i == 0);
    with.push_back(rule_item(at_i < prefix.size() ? prefix[at_i] : item));
    with.push_back(rule_item(rules[max || i < loop ? at_i + 1 : at_i]));
    builder_.add_alternative(rules[at_i], std::move(with));
  }
  Sequence open = literal("[");
  open.push_back(rule_item(rules[0]));
  return builder_.rule(at(path), {open});
}

int32_t Compiler::string(std::optional<int64_t> min_length, std::optional<int64_t> max_length,
                         const std::string& path) {
  const int64_t min = min_length.value_or(0);
  PLUMB_CHECK(!max_length || min <= *max_length, "'minLength' {} exceeds 'maxLength' {} at {}", min, *max_length,
              at(path));
  const auto key = std::make_pair(min, max_length.value_or(-1));
  if (const auto it = strings_.find(key); it != strings_.end()) return it->second;
  // body[i]: the rest of the string after i characters; unbounded, the last one loops.
  const int64_t last = max_length.value_or(min);
  std::vector<int32_t> body;
  for (int64_t i = 0; i <= last; ++i) body.push_back(builder_.add_rule("string"));
  for (int64_t i = 0; i <= last; ++i) {
    const auto at_i = static_cast<size_t>(i);
    if (i >= min) builder_.add_alternative(body[at_i], literal("\""));
    if (max_length && i == *max_length) continue;
    builder_.add_alternative(body[at_i],
                             {rule_item(character()), rule_item(body[!max_length && i == last ? at_i : at_i + 1])});
  }
  Sequence open = literal("\"");
  open.push_back(rule_item(body[0]));
  return strings_[key] = builder_.rule("string", {open});
}

int32_t Compiler::key_node(const std::vector<std::string>& keys, size_t depth) {
  // A trie node of the declared keys: a key may go on along a declared one, leave it at a character boundary (and
  // is then free), or end where no declared key ends.
  const int32_t rule = builder_.add_rule("additional property name");
  std::map<uint8_t, std::vector<std::string>> next;
  bool terminal = false;
  for (const std::string& k : keys) {
    if (k.size() == depth) {
      terminal = true;
    } else {
      next[static_cast<uint8_t>(k[depth])].push_back(k);
    }
  }
  const bool boundary = next.empty() || (next.begin()->first & 0xC0) != 0x80;
  ByteSet taken;
  for (const auto& [byte, sub] : next) {
    taken.set(byte);
    builder_.add_alternative(rule, {bytes_item(one_byte(byte)), rule_item(key_node(sub, depth + 1))});
  }
  if (!boundary) return rule;
  if (!terminal) builder_.add_alternative(rule, literal("\""));
  if (free_key_ < 0) {
    free_key_ = builder_.add_rule("additional property name");
    builder_.add_alternative(free_key_, literal("\""));
    builder_.add_alternative(free_key_, {rule_item(plain_character()), rule_item(free_key_)});
  }
  const ByteSet ascii = plain_ascii() & ~taken;
  if (ascii.any()) builder_.add_alternative(rule, {bytes_item(ascii), rule_item(free_key_)});
  for (Sequence s : multibyte_characters()) {
    s[0].bytes &= ~taken;
    if (!s[0].bytes.any()) continue;
    s.push_back(rule_item(free_key_));
    builder_.add_alternative(rule, std::move(s));
  }
  return rule;
}

int32_t Compiler::extra_key(const std::vector<std::string>& declared) {
  // Only names written without escapes, so a name's bytes are the name and it cannot repeat a declared one; a
  // declared name that needs escapes cannot be written that way at all.
  std::vector<std::string> plain;
  for (const std::string& k : declared)
    if (std::all_of(k.begin(), k.end(), [](char c) {
          const auto b = static_cast<uint8_t>(c);
          return b >= 0x20 && c != '"' && c != '\\';
        }))
      plain.push_back(k);
  Sequence open = literal("\"");
  open.push_back(rule_item(key_node(plain, 0)));
  return builder_.rule("additional property name", {open});
}

int32_t Compiler::ws() {
  if (ws_ >= 0) return ws_;
  ByteSet blank = one_byte(' ');
  blank.set('\t');
  blank.set('\n');
  int32_t rule = builder_.rule("whitespace", {{}});
  for (int i = 1; i <= kMaxWhitespace; ++i)
    rule = builder_.rule("whitespace", {{}, {bytes_item(blank), rule_item(rule)}});
  return ws_ = rule;
}

int32_t Compiler::plain_character() {
  if (plain_character_ >= 0) return plain_character_;
  std::vector<Sequence> alternatives = multibyte_characters();
  alternatives.push_back({bytes_item(plain_ascii())});
  return plain_character_ = builder_.rule("character", std::move(alternatives));
}

int32_t Compiler::character() {
  if (character_ >= 0) return character_;
  const ByteSet hex = byte_range('0', '9') | byte_range('a', 'f') | byte_range('A', 'F');
  ByteSet escaped;
  for (char c : std::string_view("\"\\/bfnrt")) escaped.set(static_cast<uint8_t>(c));
  // \uXXXX outside the surrogates, so every escape is one character (as JSON Schema counts a string's length).
  auto unicode = [&](ByteSet first, ByteSet second) {
    Sequence s = literal("\\u");
    s.insert(s.end(), {bytes_item(first), bytes_item(second), bytes_item(hex), bytes_item(hex)});
    return s;
  };
  const ByteSet not_d =
      byte_range('0', '9') | byte_range('a', 'c') | byte_range('A', 'C') | byte_range('e', 'f') | byte_range('E', 'F');
  const ByteSet d = one_byte('d') | one_byte('D');
  Sequence simple = literal("\\");
  simple.push_back(bytes_item(escaped));
  return character_ = builder_.rule(
             "string character",
             {{rule_item(plain_character())}, simple, unicode(not_d, hex), unicode(d, byte_range('0', '7'))});
}

int32_t Compiler::digits(int count) {
  if (const auto it = digits_.find(count); it != digits_.end()) return it->second;
  int32_t rule = builder_.rule("digits", {{}});
  for (int i = 1; i <= count; ++i)
    rule = builder_.rule("digits", {{}, {bytes_item(byte_range('0', '9')), rule_item(rule)}});
  return digits_[count] = rule;
}

int32_t Compiler::number(bool integer) {
  int32_t& cached = integer ? integer_ : number_;
  if (cached >= 0) return cached;
  const Item digit = bytes_item(byte_range('0', '9'));
  const int32_t minus = builder_.rule("sign", {{}, literal("-")});
  const int32_t whole = builder_.rule(
      "integer part", {literal("0"), {bytes_item(byte_range('1', '9')), rule_item(digits(kMaxDigits - 1))}});
  Sequence s{rule_item(minus), rule_item(whole)};
  if (!integer) {
    Sequence fraction = literal(".");
    fraction.insert(fraction.end(), {digit, rule_item(digits(kMaxDigits - 1))});
    const int32_t exponent_sign = builder_.rule("exponent sign", {{}, literal("+"), literal("-")});
    const Sequence exponent{bytes_item(one_byte('e') | one_byte('E')), rule_item(exponent_sign), digit,
                            rule_item(digits(1))};
    s.push_back(rule_item(builder_.rule("fraction", {{}, fraction})));
    s.push_back(rule_item(builder_.rule("exponent", {{}, exponent})));
  }
  return cached = builder_.rule(integer ? "integer" : "number", {s});
}

int32_t Compiler::pattern(const Json& s, const std::string& path) {
  PLUMB_CHECK(s["pattern"].is_string(), "'pattern' at {} must be a string, got {}", at(path), s["pattern"].dump());
  for (const char* k : {"minLength", "maxLength"})
    PLUMB_CHECK(!s.contains(k), "'pattern' together with '{}' is not supported at {}", k, at(path));
  Sequence quoted = literal("\"");
  quoted.push_back(rule_item(
      regex_rule(builder_, s["pattern"].get<std::string>(), RegexText::kJsonString, true, "'pattern' at " + at(path))));
  append_literal(quoted, "\"");
  return builder_.rule("pattern string", {quoted});
}

Bounds Compiler::bounds(const Json& s, const std::string& path) const {
  Bounds b;
  for (const char* k : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
    if (!s.contains(k)) continue;
    const Json& v = s[k];
    PLUMB_CHECK(!v.is_boolean(), "'{}' at {} is a boolean (the draft 4 form); give the bound as a number", k, at(path));
    PLUMB_CHECK(v.is_number(), "'{}' at {} must be a number, got {}", k, at(path), v.dump());
    const double d = v.get<double>();
    const bool exclusive = k[0] == 'e', lower = std::string_view(k).ends_with("inimum");
    std::optional<double>& side = lower ? b.lo : b.hi;
    bool& side_exclusive = lower ? b.lo_exclusive : b.hi_exclusive;
    // Of two bounds on one side, the stricter.
    if (!side || (lower ? d > *side : d < *side) || (d == *side && exclusive)) {
      side = d;
      side_exclusive = exclusive;
    }
  }
  return b;
}

int32_t Compiler::bounded_number(const Bounds& b, bool integer, const std::string& path) {
  std::vector<Sequence> alternatives;
  if (const auto ints = integers_within(b))
    alternatives.push_back({rule_item(integer_range_rule(builder_, ints->first, ints->second))});
  if (!integer) {
    // Decimals without an exponent, I.F, for the integer parts I whose every such number is within the bounds: a
    // subset of the numbers there (not 0.7 for a minimum of 0.5), but each one valid. I.F lies in [I, I + 1);
    // -I.F in (-(I + 1), -I].
    Sequence fraction = literal(".");
    fraction.insert(fraction.end(), {bytes_item(byte_range('0', '9')), rule_item(digits(kMaxDigits - 1))});
    Bounds positive{b.lo, b.hi ? std::optional<double>(*b.hi - 1) : std::nullopt, b.lo_exclusive, false};
    Bounds negative{b.hi ? std::optional<double>(-*b.hi) : std::nullopt,
                    b.lo ? std::optional<double>(-*b.lo - 1) : std::nullopt, b.hi_exclusive, false};
    for (Bounds* part : {&positive, &negative}) {
      if (!part->lo || *part->lo < 0) {
        part->lo = 0;
        part->lo_exclusive = false;
      }
      const auto range = integers_within(*part);
      if (!range) continue;
      Sequence s = part == &negative ? literal("-") : Sequence{};
      s.push_back(rule_item(integer_range_rule(builder_, range->first, range->second)));
      s.insert(s.end(), fraction.begin(), fraction.end());
      alternatives.push_back(std::move(s));
    }
  }
  PLUMB_CHECK(!integer || !alternatives.empty(), "no integer satisfies the bounds at {}", at(path));
  PLUMB_CHECK(!alternatives.empty(),
              "the bounds at {} hold no integer and no whole interval [n, n + 1): numbers are written as integers "
              "and decimals n.f whose interval is within the bounds, so narrower bounds are not supported",
              at(path));
  return builder_.rule(at(path) + " bounded", std::move(alternatives));
}

int32_t Compiler::any() {
  if (any_ >= 0) return any_;
  any_ = builder_.add_rule("any value");
  const int32_t string_rule = string(std::nullopt, std::nullopt, "");
  // Objects: members after the first come after a comma; arrays likewise.
  const int32_t more_members = builder_.add_rule("any object members");
  const int32_t members = builder_.add_rule("any object members");
  for (int32_t r : {members, more_members}) {
    builder_.add_alternative(r, closing('}'));
    Sequence with = separator(r == members);
    append_member(with, string_rule, any_);
    with.push_back(rule_item(more_members));
    builder_.add_alternative(r, std::move(with));
  }
  const int32_t more_items = builder_.add_rule("any array items");
  const int32_t items = builder_.add_rule("any array items");
  for (int32_t r : {items, more_items}) {
    builder_.add_alternative(r, closing(']'));
    Sequence with = separator(r == items);
    with.insert(with.end(), {rule_item(any_), rule_item(more_items)});
    builder_.add_alternative(r, std::move(with));
  }
  Sequence object = literal("{"), array = literal("[");
  object.push_back(rule_item(members));
  array.push_back(rule_item(items));
  any_object_ = builder_.rule("any object", {object});
  for (Sequence s : {Sequence{rule_item(any_object_)}, array, Sequence{rule_item(string_rule)},
                     Sequence{rule_item(number(false))}, literal("true"), literal("false"), literal("null")})
    builder_.add_alternative(any_, std::move(s));
  return any_;
}

}  // namespace

Grammar compile_json_schema(const nlohmann::ordered_json& schema, const JsonWrapping& wrapping) {
  return Compiler(schema).compile(wrapping);
}

}  // namespace plumb::grammar
