// Structured output in the server: response_format and forced tool_choice parsed into a schema with its tool-call
// wrapping, and the constraint handed to the engine: free inside an opened <think> block, then the grammar's.
#include "server/structured.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "server/openai_api.h"
#include "support/fixtures.h"

namespace plumb::server {
namespace {

Json chat(Json extra) {
  Json body = Json::parse(R"({"messages": [{"role": "user", "content": "hi"}]})");
  for (auto& [k, v] : extra.items()) body[k] = v;
  return body;
}

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}},
  {"type": "function", "function": {"name": "g"}}])");

TEST(StructuredRequest, ResponseFormatsBecomeSchemas) {
  EXPECT_FALSE(
      parse_api_request(Endpoint::kChatCompletions, chat({{"response_format", {{"type", "text"}}}})).structured);
  const auto object =
      parse_api_request(Endpoint::kCompletions, Json{{"prompt", "p"}, {"response_format", {{"type", "json_object"}}}});
  ASSERT_TRUE(object.structured);
  EXPECT_EQ(object.structured->schema, Json({{"type", "object"}}));
  const Json schema = {{"type", "array"}};
  const auto with_schema = parse_api_request(
      Endpoint::kChatCompletions,
      chat({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", schema}}}}}}));
  ASSERT_TRUE(with_schema.structured);
  EXPECT_EQ(with_schema.structured->schema, schema);
  EXPECT_EQ(with_schema.structured->prefix, "");
}

TEST(StructuredRequest, AGuidedRegexReplacesTheSchema) {
  const auto r = parse_api_request(Endpoint::kCompletions, Json{{"prompt", "p"}, {"guided_regex", "(yes|no)!"}});
  ASSERT_TRUE(r.structured);
  EXPECT_EQ(r.structured->regex, "(yes|no)!");
  EXPECT_EQ(r.structured->source, "'guided_regex'");
  const auto g = parse_api_request(Endpoint::kChatCompletions, chat({{"guided_grammar", "root ::= \"a\""}}));
  ASSERT_TRUE(g.structured);
  EXPECT_EQ(g.structured->gbnf, "root ::= \"a\"");
  EXPECT_FALSE(g.structured->regex);
}

TEST(StructuredRequest, ForcedToolChoicesBecomeToolCallSchemas) {
  const auto named = parse_api_request(
      Endpoint::kChatCompletions,
      chat({{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}}));
  ASSERT_TRUE(named.structured);
  EXPECT_EQ(named.structured->prefix, "<tool_call>\n");
  EXPECT_EQ(named.structured->suffix, "\n</tool_call>");
  EXPECT_EQ(named.structured->schema["properties"]["name"], Json({{"const", "f"}}));
  EXPECT_EQ(named.structured->schema["properties"]["arguments"], kTools[0]["function"]["parameters"]);
  const auto required =
      parse_api_request(Endpoint::kChatCompletions, chat({{"tools", kTools}, {"tool_choice", "required"}}));
  ASSERT_TRUE(required.structured);
  ASSERT_EQ(required.structured->schema["anyOf"].size(), 2u);
  EXPECT_EQ(required.structured->schema["anyOf"][1]["properties"]["arguments"], Json({{"type", "object"}}));
  EXPECT_FALSE(
      parse_api_request(Endpoint::kChatCompletions, chat({{"tools", kTools}, {"tool_choice", "auto"}})).structured);
}

TEST(StructuredRequest, RefusesWhatItCannotConstrain) {
  for (const Json& extra :
       {Json{{"response_format", {{"type", "yaml"}}}}, Json{{"response_format", {{"type", "json_schema"}}}},
        Json{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "n"}}}}}},
        Json{{"tool_choice", "required"}}, Json{{"tools", kTools}, {"tool_choice", "always"}},
        Json{{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "h"}}}}}},
        Json{{"tools", kTools}, {"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}},
        Json{{"guided_regex", 3}}, Json{{"guided_regex", "a"}, {"response_format", {{"type", "json_object"}}}},
        Json{{"tools", kTools}, {"tool_choice", "required"}, {"guided_regex", "a"}},
        Json{{"guided_regex", "a"}, {"guided_grammar", "root ::= \"a\""}}, Json{{"guided_grammar", Json::array()}}})
    EXPECT_THROW(parse_api_request(Endpoint::kChatCompletions, chat(extra)), Error) << extra.dump();
}

StructuredOutput schema_output(Json schema, std::string source) {
  StructuredOutput out;
  out.schema = std::move(schema);
  out.source = std::move(source);
  return out;
}

// A guided_regex (`regex`) or guided_grammar.
StructuredOutput text_output(std::string source, std::string text, bool regex) {
  StructuredOutput out;
  out.source = std::move(source);
  (regex ? out.regex : out.gbnf) = std::move(text);
  return out;
}

// How many of a row's logits the constraint leaves finite. Its bits for a draw on the device (allowed()) must name
// the same tokens, with every bit past the vocabulary clear.
int64_t allowed(const TokenConstraint& c, int64_t vocab) {
  std::vector<float> logits(static_cast<size_t>(vocab), 0.0f);
  EXPECT_TRUE(c.mask(logits.data(), vocab));
  std::vector<uint32_t> bits(static_cast<size_t>(allowed_words(vocab)), 0xa5a5a5a5u);  // to be overwritten
  EXPECT_TRUE(c.allowed(bits.data(), vocab));
  int64_t n = 0, differ = 0;
  for (int64_t t = 0; t < vocab; ++t) {
    n += std::isfinite(logits[t]);
    differ += token_allowed(bits.data(), t) != std::isfinite(logits[t]);
  }
  EXPECT_EQ(differ, 0) << "tokens whose bit disagrees with the mask";
  if (vocab % 32 != 0) {
    EXPECT_EQ(bits.back() >> (vocab % 32), 0u) << "bits past the vocabulary";
  }
  return n;
}

TEST(StructuredOutputs, ReasoningIsFreeUntilThinkCloses) {
  const ModelText text = ModelText::from_dir(test::source_dir() + "/models/default");
  // Logits past the tokenizer's ids, as checkpoints pad their vocabulary, and not a whole number of 32-bit words.
  const int64_t vocab = text.tokenizer().vocab_size() + 7;
  StructuredOutputs outputs(text, vocab);
  const auto constraint =
      outputs.constraint(schema_output(Json{{"type", "boolean"}}, "test"), /*opens_reasoning=*/true);
  EXPECT_EQ(allowed(*constraint, vocab), vocab);
  for (int32_t id : text.encode("hmm, true or false? </think>")) {
    EXPECT_FALSE(constraint->finished());
    constraint->accept(id);
  }
  const int64_t answer = allowed(*constraint, vocab);
  EXPECT_GT(answer, 0);
  EXPECT_LT(answer, 20);
  for (int32_t id : text.encode("false")) constraint->accept(id);
  EXPECT_TRUE(constraint->finished());
}

TEST(StructuredOutputs, AGuidedRegexConstrainsTheWholeAnswer) {
  const ModelText text = ModelText::from_dir(test::source_dir() + "/models/default");
  const int64_t vocab = text.tokenizer().vocab_size();
  StructuredOutputs outputs(text, vocab);
  const auto constraint = outputs.constraint(text_output("'guided_regex'", "(yes|no)[!.]", true), false);
  const int64_t first = allowed(*constraint, vocab);
  EXPECT_GT(first, 0);
  EXPECT_LT(first, 20);
  for (int32_t id : text.encode("no!")) {
    EXPECT_FALSE(constraint->finished());
    EXPECT_TRUE(constraint->accept(id));
  }
  EXPECT_TRUE(constraint->finished());
  const auto again = outputs.constraint(text_output("'guided_regex'", "(yes|no)[!.]", true), false);
  EXPECT_FALSE(again->accept(text.encode("maybe").front()));
}

TEST(StructuredOutputs, ASchemaErrorNamesWhereTheSchemaCameFrom) {
  const ModelText text = ModelText::from_dir(test::source_dir() + "/models/default");
  StructuredOutputs outputs(text, text.tokenizer().vocab_size());
  try {
    (void)outputs.constraint(schema_output(Json{{"type", "string"}, {"format", "uuid"}}, "'response_format.x'"), false);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "'response_format.x': unsupported JSON Schema keyword 'format' at #");
  }
  try {
    (void)outputs.constraint(text_output("'guided_regex'", "a(?=b)", true), false);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "'guided_regex': the regular expression: a lookaround assertion ('(?=', '(?!', '(?<=', '(?<!') at "
                 "offset 1 of the pattern");
  }
  try {
    (void)outputs.constraint(text_output("'guided_grammar'", "root ::= x", false), false);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "'guided_grammar': GBNF line 1: rule 'x' is used but not defined");
  }
  const ModelText ids_only = ModelText::token_ids_only("synthetic");
  StructuredOutputs without_tokenizer(ids_only, 10);
  EXPECT_THROW((void)without_tokenizer.constraint(schema_output(Json{{"type", "null"}}, "x"), false), Error);
}

}  // namespace
}  // namespace plumb::server
