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

// Whether the grammar of `schema` matches all of `text` (fed as bytes; no vocabulary needed).
bool matches(const char* schema, const std::string& text) {
  auto vocabulary = std::make_shared<const grammar::Vocabulary>(std::vector<std::string>{"x"}, std::vector<int32_t>{});
  grammar::Matcher m(std::make_shared<const grammar::CompiledGrammar>(
      grammar::compile_json_schema(ordered_json::parse(schema)), vocabulary));
  return m.accept_bytes(text) && m.complete();
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
  expect_refused(R"({"properties": {"id": {"type": "string", "pattern": "^a"}}})",
                 {"unsupported JSON Schema keyword 'pattern'", "#/properties/id"});
  expect_refused(R"({"type": "integer", "minimum": 0})", {"'minimum'", "at #"});
  expect_refused(R"({"type": "number", "maximum": 1})", {"'maximum'"});
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
