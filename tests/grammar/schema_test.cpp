// The JSON Schema compiler: which texts a schema's grammar takes whole, and the schemas it refuses, with messages
// that name the keyword and where it is.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace plumb::test {
namespace {

using nlohmann::ordered_json;

// A schema's grammar, which tells whether it matches all of a text (fed as bytes; no vocabulary needed).
class Accepts {
 public:
  explicit Accepts(const char* schema)
      : grammar_(std::make_shared<const grammar::CompiledGrammar>(
            grammar::compile_json_schema(ordered_json::parse(schema)),
            std::make_shared<const grammar::Vocabulary>(std::vector<std::string>{"x"}, std::vector<int32_t>{}))) {}
  bool operator()(const std::string& text) const {
    grammar::Matcher m(grammar_);
    return m.accept_bytes(text) && m.complete();
  }

 private:
  std::shared_ptr<const grammar::CompiledGrammar> grammar_;
};

bool matches(const char* schema, const std::string& text) {
  return Accepts(schema)(text);
}

TEST(JsonSchema, ObjectsFollowTheDeclaredOrderAndRequiredSet) {
  const char* s = R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                      "required": ["b"]})";
  EXPECT_TRUE(matches(s, R"({"b":"x"})"));
  EXPECT_TRUE(matches(s, R"({"a": -12, "b": ""})"));
  EXPECT_TRUE(matches(s, "{\n  \"a\": 0,\n  \"b\": \"\\u00e9\\n\"\n}"));
  EXPECT_FALSE(matches(s, R"({"a":1})"));
  EXPECT_FALSE(matches(s, R"({"b":"x","a":1})"));
  EXPECT_FALSE(matches(s, R"({"b":"x","c":1})"));
  EXPECT_FALSE(matches(s, R"({"a":01,"b":"x"})"));
  EXPECT_FALSE(matches(s, R"({"a":1.5,"b":"x"})"));
}

TEST(JsonSchema, AnObjectWithoutPropertiesIsAnyObjectAndNothingElse) {
  EXPECT_TRUE(matches(R"({"type": "object"})", R"({"k": [1, "x", {"n": null}], "k2": false})"));
  EXPECT_TRUE(matches(R"({"type": "object", "properties": {}})", "{ }"));
  EXPECT_FALSE(matches(R"({"type": "object"})", "4"));
  EXPECT_FALSE(matches(R"({"type": "object", "properties": {}})", R"("s")"));
}

TEST(JsonSchema, WhitespaceIsBounded) {
  const char* s = R"({"type": "array"})";
  EXPECT_TRUE(matches(s, "[" + std::string(grammar::kMaxWhitespace, ' ') + "]"));
  EXPECT_FALSE(matches(s, "[" + std::string(grammar::kMaxWhitespace + 1, ' ') + "]"));
  EXPECT_FALSE(matches(s, " []"));
  EXPECT_FALSE(matches(s, "[] "));
}

TEST(JsonSchema, StringLengthsCountCharactersNotBytes) {
  const char* s = R"({"type": "string", "minLength": 2, "maxLength": 3})";
  EXPECT_TRUE(matches(s, "\"éé\""));
  EXPECT_TRUE(matches(s, R"("a\nb")"));
  EXPECT_TRUE(matches(s, R"("\u00e9\u4e2dz")"));
  EXPECT_FALSE(matches(s, "\"a\""));
  EXPECT_FALSE(matches(s, "\"abcd\""));
  EXPECT_FALSE(matches(s, R"("\ud83d\ude00")"));  // surrogate escapes would count twice here, once in JSON Schema
  EXPECT_FALSE(matches(s, "\"a\x01\""));
  EXPECT_FALSE(matches(s, "\"a\xff\""));
}

TEST(JsonSchema, AdditionalPropertiesNeverRepeatADeclaredName) {
  const char* s = R"({"type": "object", "properties": {"ab": {"type": "null"}, "é": {"type": "null"}},
                      "additionalProperties": {"type": "boolean"}})";
  EXPECT_TRUE(matches(s, R"({"ab":null,"a":true,"abc":false,"b":true,"":false})"));
  EXPECT_FALSE(matches(s, R"({"ab":null,"ab":true})"));
  EXPECT_FALSE(matches(s, R"({"é":null,"é":true})"));
  EXPECT_FALSE(matches(s, R"({"x":1})"));
}

TEST(JsonSchema, ArraysCountTheirItems) {
  const char* s = R"({"type": "array", "prefixItems": [{"type": "boolean"}], "items": {"type": "integer"},
                      "minItems": 2, "maxItems": 3})";
  EXPECT_TRUE(matches(s, "[true,1]"));
  EXPECT_TRUE(matches(s, "[false, 1, 2]"));
  EXPECT_FALSE(matches(s, "[true]"));
  EXPECT_FALSE(matches(s, "[true,1,2,3]"));
  EXPECT_FALSE(matches(s, "[1,1]"));
  EXPECT_TRUE(matches(R"({"prefixItems": [{"type": "null"}], "items": false})", "[null]"));
  EXPECT_FALSE(matches(R"({"prefixItems": [{"type": "null"}], "items": false})", "[null,null]"));
}

TEST(JsonSchema, EnumsConstsAlternativesAndRecursiveRefs) {
  EXPECT_TRUE(matches(R"({"enum": ["a", 1, null, {"k": [true]}]})", R"({"k":[true]})"));
  EXPECT_FALSE(matches(R"({"enum": ["a", 1]})", "2"));
  EXPECT_TRUE(matches(R"({"type": "string", "enum": ["a", 1]})", R"("a")"));
  EXPECT_FALSE(matches(R"({"type": "string", "enum": ["a", 1]})", "1"));
  const char* tree = R"({"definitions": {"t": {"type": "object", "properties": {"kids": {"type": "array",
                         "items": {"$ref": "#/definitions/t"}}}, "required": ["kids"]}}, "$ref": "#/definitions/t"})";
  EXPECT_TRUE(matches(tree, R"({"kids":[{"kids":[]},{"kids":[{"kids":[]}]}]})"));
  EXPECT_FALSE(matches(tree, R"({"kids":[{}]})"));
  EXPECT_TRUE(matches(R"({"oneOf": [{"type": "boolean"}, {"type": "array", "maxItems": 0}]})", "[]"));
}

TEST(JsonSchema, NumbersHaveBoundedDigits) {
  EXPECT_TRUE(matches(R"({"type": "number"})", "-0.5e+10"));
  EXPECT_TRUE(matches(R"({"type": "number"})", std::string(grammar::kMaxDigits, '9')));
  EXPECT_FALSE(matches(R"({"type": "number"})", std::string(grammar::kMaxDigits + 1, '9')));
  EXPECT_FALSE(matches(R"({"type": "number"})", "1e100"));
  EXPECT_FALSE(matches(R"({"type": "integer"})", "1e5"));
}

TEST(JsonSchema, PatternsMatchAnywhereUnlessAnchored) {
  const char* code = R"({"type": "string", "pattern": "^[a-z]+-[0-9]{2,3}$"})";
  EXPECT_TRUE(matches(code, R"("abc-12")"));
  EXPECT_TRUE(matches(code, R"("x-123")"));
  EXPECT_FALSE(matches(code, R"("abc-1234")"));
  EXPECT_FALSE(matches(code, R"("Abc-12")"));
  EXPECT_FALSE(matches(code, R"("abc-12x")"));
  EXPECT_TRUE(matches(R"({"pattern": "ab"})", R"("xxabyy")"));
  EXPECT_TRUE(matches(R"({"pattern": "ab"})", R"("ab")"));
  EXPECT_FALSE(matches(R"({"pattern": "ab"})", R"("ba")"));
  const char* either = R"({"type": "string", "pattern": "^ab$|cd"})";
  EXPECT_TRUE(matches(either, R"("ab")"));
  EXPECT_TRUE(matches(either, R"("xcdx")"));
  EXPECT_FALSE(matches(either, R"("abx")"));
  const char* repeated = R"({"type": "string", "pattern": "^(?:ab){2,}(?<tail>c|d)?$"})";
  EXPECT_TRUE(matches(repeated, R"("abab")"));
  EXPECT_TRUE(matches(repeated, R"("abababd")"));
  EXPECT_FALSE(matches(repeated, R"("abc")"));
  EXPECT_TRUE(matches(R"({"type": "string", "pattern": "^\\d\\w\\s\\S$"})", R"("1_ A")"));
}

TEST(JsonSchema, PatternCharactersAreCodePointsWrittenAsJson) {
  // '"', '\' and controls as JSON escapes, everything else as UTF-8.
  EXPECT_TRUE(matches(R"({"type": "string", "pattern": "^a\"b\\\\c$"})", R"("a\"b\\c")"));
  const char* not_lower = R"({"type": "string", "pattern": "^[^a-z]$"})";
  EXPECT_TRUE(matches(not_lower, "\"é\""));
  EXPECT_TRUE(matches(not_lower, R"("\n")"));
  EXPECT_TRUE(matches(not_lower, R"("\u0001")"));
  EXPECT_FALSE(matches(not_lower, R"("a")"));
  EXPECT_FALSE(matches(not_lower, "\"\n\""));  // a raw control character is no JSON
  const char* dot = R"({"type": "string", "pattern": "^.$"})";
  EXPECT_TRUE(matches(dot, "\"é\""));
  EXPECT_TRUE(matches(dot, "\"\xF0\x9F\x98\x80\""));
  EXPECT_FALSE(matches(dot, R"("\n")"));
  EXPECT_FALSE(matches(dot, "\"\xE2\x80\xA8\""));  // U+2028, a line terminator
  EXPECT_TRUE(matches(R"({"type": "string", "pattern": "^\\u00e9\\u{1F600}[\\u0800-\\uFFFF]$"})",
                      "\"é\xF0\x9F\x98\x80\xEF\xBF\xBF\""));
}

TEST(JsonSchema, IntegerBoundsAreExact) {
  const std::pair<int64_t, int64_t> ranges[] = {{-12, 305}, {0, 0},     {7, 7}, {-1000, -999},
                                                {10, 99},   {99, 1000}, {-9, 9}};
  for (const auto& [lo, hi] : ranges) {
    const std::string schema = fmt::format(R"({{"type": "integer", "minimum": {}, "maximum": {}}})", lo, hi);
    const Accepts accepts(schema.c_str());
    for (int64_t v = lo - 120; v <= hi + 120; ++v)
      EXPECT_EQ(accepts(std::to_string(v)), v >= lo && v <= hi) << schema << " " << v;
    EXPECT_FALSE(accepts("-0")) << schema;
    EXPECT_FALSE(accepts(fmt::format("0{}", std::max<int64_t>(lo, 0)))) << schema;
  }
  const Accepts open(R"({"type": "integer", "exclusiveMinimum": 0.5, "exclusiveMaximum": 4})");
  for (int v = -3; v < 8; ++v) EXPECT_EQ(open(std::to_string(v)), v >= 1 && v <= 3) << v;
  const Accepts below(R"({"type": "integer", "maximum": -3, "exclusiveMaximum": -3})");
  EXPECT_TRUE(below("-4"));
  EXPECT_FALSE(below("-3"));
  EXPECT_TRUE(below(fmt::format("-{}", std::string(grammar::kMaxDigits, '9'))));
}

TEST(JsonSchema, NumberBoundsHoldForEveryNumberWritten) {
  const Accepts unit(R"({"type": "number", "minimum": 0, "maximum": 1})");
  for (const char* ok : {"0", "1", "0.93", "0.000"}) EXPECT_TRUE(unit(ok)) << ok;
  for (const char* no : {"1.5", "-0.1", "2", "1e0", "-0"}) EXPECT_FALSE(unit(no)) << no;
  const Accepts negative(R"({"type": "number", "minimum": -5, "exclusiveMaximum": -1})");
  for (const char* ok : {"-3.5", "-4.99", "-5", "-2"}) EXPECT_TRUE(negative(ok)) << ok;
  for (const char* no : {"-5.5", "-1", "-0.5", "0", "3"}) EXPECT_FALSE(negative(no)) << no;
  const Accepts positive(R"({"type": "number", "exclusiveMinimum": 0})");
  EXPECT_TRUE(positive("12.5"));
  EXPECT_FALSE(positive("0"));
  EXPECT_FALSE(positive("-1.5"));
}

void expect_refused(const char* schema, const std::vector<std::string>& parts) {
  try {
    (void)grammar::compile_json_schema(ordered_json::parse(schema));
    ADD_FAILURE() << "accepted " << schema;
  } catch (const Error& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what() << " lacks " << part;
  }
}

TEST(JsonSchema, UnsupportedOrInvalidSchemasAreRefusedByName) {
  expect_refused(R"({"properties": {"id": {"type": "string", "format": "uuid"}}})",
                 {"unsupported JSON Schema keyword 'format'", "#/properties/id"});
  expect_refused(R"({"type": "integer", "multipleOf": 3})", {"'multipleOf'", "at #"});
  expect_refused(R"({"type": "integer", "minimum": 5, "maximum": 4})", {"no integer satisfies", "at #"});
  expect_refused(R"({"type": "number", "exclusiveMinimum": true})", {"'exclusiveMinimum'", "draft 4"});
  expect_refused(R"({"type": "number", "minimum": 0.25, "maximum": 0.75})", {"at #", "narrower bounds"});
  expect_refused(R"({"type": "integer", "maximum": "3"})", {"'maximum'", "must be a number"});
  expect_refused(R"({"type": "string", "pattern": "^a", "maxLength": 3})", {"'pattern' together with 'maxLength'"});
  expect_refused(R"({"type": "string", "pattern": 3})", {"'pattern'", "must be a string"});
  expect_refused(R"({"properties": {"w": {"pattern": "\\bword"}}})",
                 {"'pattern' at #/properties/w", "word boundary", "offset 0"});
  expect_refused(R"j({"pattern": "a(?=b)"})j", {"lookaround"});
  expect_refused(R"({"pattern": "(a)\\1"})", {"back-reference"});
  expect_refused(R"({"pattern": "\\p{L}"})", {"Unicode property"});
  expect_refused(R"({"pattern": "a{2,1}"})", {"m < n"});
  expect_refused(R"({"pattern": "(a*)*"})", {"can match nothing"});
  expect_refused(R"({"pattern": "a^b"})", {"'^' inside"});
  expect_refused(R"({"pattern": "a$b"})", {"'$' inside"});
  expect_refused(R"({"pattern": "[z-a]"})", {"out of order"});
  expect_refused(R"({"pattern": "[]"})", {"empty class"});
  expect_refused(R"({"pattern": "(ab"})", {"unterminated group"});
  expect_refused(R"j({"pattern": "ab)"})j", {"unmatched ')'"});
  expect_refused(R"({"pattern": "*a"})", {"nothing to repeat"});
  expect_refused(R"({"pattern": "\\q"})", {"unknown escape '\\q'"});
  expect_refused(R"({"type": "string", "format": "date"})", {"'format'"});
  expect_refused(R"({"items": {"multipleOf": 2}})", {"'multipleOf'", "#/items"});
  expect_refused(R"({"patternProperties": {}})", {"'patternProperties'"});
  expect_refused(R"({"type": "date"})", {"'type'", "JSON types"});
  expect_refused(R"({"$ref": "#/$defs/missing"})", {"'$ref'", "not in the schema"});
  expect_refused(R"({"$ref": "https://example.com/s.json"})", {"'$ref'", "inside the schema"});
  expect_refused(R"({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"})",
                 {"left-recursive"});
  expect_refused(R"({"type": "string", "minLength": 3, "maxLength": 2})", {"'minLength' 3 exceeds 'maxLength' 2"});
  expect_refused(R"({"type": "string", "maxLength": 100000})", {"'maxLength'", "[0, 4096]"});
  expect_refused(R"({"allOf": [{"type": "null"}, {"type": "null"}]})", {"'allOf'"});
  expect_refused(R"({"items": [{"type": "null"}]})", {"'items'", "prefixItems"});
  expect_refused(R"({"properties": {"a": false}})", {"#/properties/a", "false"});
  expect_refused(R"({"properties": {"a": {}}, "required": ["b"]})", {"required property 'b'"});
  expect_refused(R"({"type": "object", "anyOf": [{"type": "null"}]})", {"'anyOf' together with 'type'"});
  expect_refused(R"({"type": "array", "minItems": 2, "maxItems": 1})", {"'minItems' is 2"});
  expect_refused(R"({"enum": []})", {"'enum'", "non-empty"});
  expect_refused(R"({"type": "integer", "enum": ["a"]})", {"no value of 'enum'"});
  expect_refused(R"(7)", {"must be an object or a boolean"});
}

}  // namespace
}  // namespace plumb::test
