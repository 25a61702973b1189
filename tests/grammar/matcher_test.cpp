// The token matcher against a plain reference: in every state that random walks reach, a token is in the mask
// exactly when feeding its bytes one by one to a copy of the matcher succeeds (stop tokens: exactly when complete),
// the cached mask equals one computed afresh, and a refused token leaves the state as it was.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "grammar/cache.h"
#include "walk.h"

namespace plumb::test {
namespace {

using nlohmann::ordered_json;

const char* const kSchemas[] = {
    R"({"type": "object"})",
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"enum": ["a", "bc", "déf"]}, "maxItems": 3}}, "required": ["name"]})",
    R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "number"},
        "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["v", "next"]}},
        "$ref": "#/$defs/node"})",
    R"({"type": "object", "properties": {"id": {"const": 7}}, "additionalProperties": {"type": "boolean"}})",
    R"({"type": ["string", "number", "null"], "minLength": 2})",
};

void check_against_reference(const grammar::Matcher& matcher) {
  const grammar::Vocabulary& v = matcher.compiled().vocabulary();
  const auto mask = matcher.allowed();
  ASSERT_EQ(*mask, matcher.compiled().reference_mask(matcher.stacks()));
  ASSERT_EQ(matcher.compiled().context_mask(matcher.stacks()), *mask);
  for (int32_t id = 0; id < v.size(); ++id) {
    grammar::Matcher copy = matcher;
    bool reference = false;
    if (v.is_stop(id)) {
      reference = matcher.complete();
    } else if (!v.token(id).empty()) {
      for (char c : v.token(id)) {
        reference = copy.accept_bytes(std::string_view(&c, 1));
        if (!reference) break;
      }
    }
    ASSERT_EQ(grammar::mask_has(*mask, id), reference) << "token " << id << " '" << v.token(id) << "'";
    grammar::Matcher taker = matcher;
    ASSERT_EQ(taker.accept(id), reference) << "token " << id;
    if (!reference) {
      ASSERT_EQ(taker.stacks().key(), matcher.stacks().key()) << "a refused token changed the state";
    }
  }
}

TEST(Matcher, MaskAgreesWithTheByteByByteReferenceOnRandomWalks) {
  for (const TestVocabulary& tv : test_vocabularies()) {
    grammar::GrammarCache cache(tv.vocabulary);
    for (const char* text : kSchemas) {
      const auto grammar = cache.json_schema(ordered_json::parse(text));
      for (uint64_t seed = 0; seed < 4; ++seed) {
        SCOPED_TRACE(tv.name + " seed " + std::to_string(seed) + " schema " + text);
        const Walk walk = random_walk(grammar, seed, 120, check_against_reference);
        if (walk.complete) {
          EXPECT_TRUE(nlohmann::json::accept(walk.text)) << walk.text;
        }
      }
    }
  }
}

TEST(Matcher, RandomTokensAreTakenExactlyWhenTheMaskHasThem) {
  const TestVocabulary tv = test_vocabularies()[1];
  grammar::GrammarCache cache(tv.vocabulary);
  const auto grammar = cache.json_schema(ordered_json::parse(kSchemas[1]));
  std::mt19937_64 rng(5);
  int64_t taken = 0;
  for (int run = 0; run < 50; ++run) {
    grammar::Matcher matcher(grammar);
    for (int step = 0; step < 40; ++step) {
      // Half the tokens are random, half drawn from the mask, so the sequences get past the first byte.
      const auto mask = matcher.allowed();
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < tv.vocabulary->size(); ++id)
        if (grammar::mask_has(*mask, id)) allowed.push_back(id);
      auto id = static_cast<int32_t>(rng() % static_cast<uint64_t>(tv.vocabulary->size()));
      if (rng() % 2 == 0 && !allowed.empty()) id = allowed[rng() % allowed.size()];
      const bool in_mask = grammar::mask_has(*matcher.allowed(), id);
      ASSERT_EQ(matcher.accept(id), in_mask) << "token " << id;
      taken += in_mask;
    }
  }
  EXPECT_GT(taken, 0);
}

TEST(Matcher, AFinishedObjectAllowsOnlyTheStopTokens) {
  const TestVocabulary tv = test_vocabularies()[1];
  grammar::GrammarCache cache(tv.vocabulary);
  grammar::Matcher matcher(cache.json_schema(ordered_json::parse(R"({"type": "object"})")));
  EXPECT_FALSE(matcher.complete());
  ASSERT_TRUE(matcher.accept_bytes(R"({"a": [1, {}]})"));
  EXPECT_TRUE(matcher.finished());
  const auto mask = matcher.allowed();
  for (int32_t id = 0; id < tv.vocabulary->size(); ++id)
    EXPECT_EQ(grammar::mask_has(*mask, id), tv.vocabulary->is_stop(id)) << id;
}

TEST(Matcher, ATopLevelNumberMayStopOrGoOn) {
  const TestVocabulary tv = test_vocabularies()[1];
  grammar::GrammarCache cache(tv.vocabulary);
  grammar::Matcher matcher(cache.json_schema(ordered_json::parse(R"({"type": "integer"})")));
  ASSERT_TRUE(matcher.accept_bytes("12"));
  EXPECT_TRUE(matcher.complete());
  EXPECT_FALSE(matcher.finished());
  const auto mask = matcher.allowed();
  for (int32_t stop : tv.vocabulary->stop_ids()) EXPECT_TRUE(grammar::mask_has(*mask, stop));
}

TEST(GrammarCache, OneCompiledGrammarPerSchemaAndWrapping) {
  const TestVocabulary tv = test_vocabularies()[0];
  grammar::GrammarCache cache(tv.vocabulary);
  const auto schema = ordered_json::parse(kSchemas[1]);
  EXPECT_EQ(cache.json_schema(schema), cache.json_schema(schema));
  EXPECT_NE(cache.json_schema(schema), cache.json_schema(schema, {"<tool_call>\n", "\n</tool_call>"}));
}

// A cache whose byte budget holds two grammars' worth (each counted as its contexts plus the masks it may grow to)
// starts over at the third.
TEST(GrammarCache, StartsOverPastItsByteBudget) {
  const TestVocabulary tv = test_vocabularies()[0];
  const auto first_schema = ordered_json::parse(kSchemas[0]), second_schema = ordered_json::parse(kSchemas[1]);
  grammar::GrammarCache probe(tv.vocabulary);
  const size_t first = probe.json_schema(first_schema)->context_bytes() + grammar::kMaxMaskCacheBytes;
  const size_t second = probe.json_schema(second_schema)->context_bytes() + grammar::kMaxMaskCacheBytes;
  grammar::GrammarCache cache(tv.vocabulary, 32, first + second);
  const auto a = cache.json_schema(first_schema);
  EXPECT_EQ(cache.json_schema(first_schema), a);  // held
  const auto b = cache.json_schema(second_schema);
  EXPECT_EQ(cache.json_schema(first_schema), a);  // both fit the budget
  EXPECT_EQ(cache.json_schema(second_schema), b);
  cache.json_schema(first_schema, {"<tool_call>\n", "\n</tool_call>"});  // a third grammar passes the budget
  EXPECT_NE(cache.json_schema(second_schema), b);                        // so the cache started over
}

}  // namespace
}  // namespace plumb::test
