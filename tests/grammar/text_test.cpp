// The grammar forms besides JSON Schema: a whole-answer regular expression (UTF-8 text, not JSON) and GBNF, which
// texts each takes whole and what each refuses, with the line or offset named.
#include <gtest/gtest.h>

#include "core/error.h"
#include "grammar/cache.h"
#include "grammar/gbnf.h"

namespace plumb::test {
namespace {

std::shared_ptr<const grammar::Vocabulary> one_token() {
  return std::make_shared<const grammar::Vocabulary>(std::vector<std::string>{"x"}, std::vector<int32_t>{});
}

bool whole(const std::shared_ptr<const grammar::CompiledGrammar>& g, const std::string& text) {
  grammar::Matcher m(g);
  return m.accept_bytes(text) && m.complete();
}

bool gbnf(const char* grammar_text, const std::string& text) {
  return whole(std::make_shared<const grammar::CompiledGrammar>(grammar::compile_gbnf(grammar_text), one_token()),
               text);
}

TEST(GuidedRegex, TheWholeTextMatchesAsUtf8) {
  grammar::GrammarCache cache(one_token());
  const auto answer = cache.regex("(yes|no), because [^.]{1,12}\\.");
  EXPECT_TRUE(whole(answer, "yes, because it is."));
  EXPECT_TRUE(whole(answer, "no, because \"é\n\"."));  // raw characters: no JSON escaping here
  EXPECT_FALSE(whole(answer, "maybe, because."));
  EXPECT_FALSE(whole(answer, "yes, because ."));
  EXPECT_FALSE(whole(answer, "xyes, because a."));  // anchored at both ends
  EXPECT_EQ(cache.regex("(yes|no), because [^.]{1,12}\\."), answer);
  EXPECT_NE(cache.gbnf("root ::= \"a\""), cache.regex("a"));
  EXPECT_THROW((void)cache.regex("a{3,2}"), Error);
}

TEST(Gbnf, RulesRecursionAndRepetition) {
  const char* arithmetic = R"g(# sums of numbers and parenthesized sums
root ::= expr
expr ::= term ("+" term)*
term ::= [0-9]+ | "(" expr ")"
)g";
  EXPECT_TRUE(gbnf(arithmetic, "1+(22+3)"));
  EXPECT_TRUE(gbnf(arithmetic, "((7))"));
  EXPECT_FALSE(gbnf(arithmetic, "1+"));
  EXPECT_FALSE(gbnf(arithmetic, "(1"));
  const char* counted = R"g(root ::= "a"{2} "b"{1,2} "c"{,1} "d"? ("e" |
    "f")+ [^a-z\n]*)g";
  EXPECT_TRUE(gbnf(counted, "aabef"));
  EXPECT_TRUE(gbnf(counted, "aabbcdfeÉ1"));
  EXPECT_FALSE(gbnf(counted, "abe"));
  EXPECT_FALSE(gbnf(counted, "aabbbe"));
  EXPECT_FALSE(gbnf(counted, "aabez"));
  EXPECT_TRUE(gbnf(R"g(root ::= "\u00e9\x41\t\"\\" [\[\]\-] .)g", "éA\t\"\\-\xF0\x9F\x98\x80"));
  EXPECT_TRUE(gbnf("root ::= a\na ::= \"x\" |\n  \"y\"\n", "y"));
}

void expect_refused(const char* text, const std::vector<std::string>& parts) {
  try {
    (void)grammar::compile_gbnf(text);
    ADD_FAILURE() << "accepted " << text;
  } catch (const Error& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what() << " lacks " << part;
  }
}

TEST(Gbnf, BadGrammarsAreRefusedWithTheirLine) {
  expect_refused("root ::= a\nb ::= \"x\"", {"GBNF line 1", "rule 'a' is used but not defined"});
  expect_refused("root ::= \"x\"\nroot ::= \"y\"", {"GBNF line 2", "defined twice"});
  expect_refused("a ::= \"x\"", {"'root'"});
  expect_refused("root ::= e\ne ::= e \"+\" \"1\" | \"1\"", {"left-recursive"});
  expect_refused("root = \"x\"", {"GBNF line 1", "'::='"});
  expect_refused("root ::= \"x", {"'\"' closing the literal"});
  expect_refused("root ::= \"\\q\"", {"unknown escape '\\q'"});
  expect_refused("root ::= [b-a]", {"out of order"});
  expect_refused("root ::= (\"a\"", {"')' closing the group"});
  expect_refused("root ::= \"a\"{3,1}", {"n < m"});
  expect_refused("root ::= \"a\" )", {"end of the line"});
}

}  // namespace
}  // namespace plumb::test
