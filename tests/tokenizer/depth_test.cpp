// Issue 24's stack overflows: chat templates, template arguments and JSON files nested deeper than the documented
// limits (256 levels) fail with a plumb::Error naming the limit and the line, while nesting up to the limit still
// parses and renders.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "core/json_depth.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/tokenizer.h"

namespace plumb::tokenizer {
namespace {

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

std::string render_source(const std::string& source) {
  const ChatTemplate t = ChatTemplate::from_string(source);
  return render_chat(t, {{"messages", nlohmann::ordered_json::array()}});
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

constexpr const char* kTemplateLimit = "nest deeper than 256 levels (the limit)";

// The reproductions from the issue: each overflowed the parser's or the interpreter's stack.
TEST(TemplateDepth, DeepTemplatesFailToLoad) {
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"(", "{{ " + repeat("(", 10000) + "1" + repeat(")", 10000) + " }}"},
      {"[", "{{ " + repeat("[", 10000) + repeat("]", 10000) + " }}"},
      {"{", "{{ " + repeat("{'a': ", 10000) + "1" + repeat("}", 10000) + " }}"},
      {"if", repeat("{% if true %}", 10000) + "x" + repeat("{% endif %}", 10000)},
      {"for", repeat("{% for a in [1] %}", 10000) + repeat("{% endfor %}", 10000)},
      {"not", "{{ " + repeat("not ", 100000) + "1 }}"},
      {"-", "{{ " + repeat("-", 100000) + "1 }}"},
      {"1+", "{{ " + repeat("1+", 100000) + "1 }}"},
      {"~", "{{ " + repeat("'a' ~ ", 100000) + "'a' }}"},
      {".attr", "{{ x" + repeat(".a", 100000) + " }}"},
      {"[0]", "{{ x" + repeat("[0]", 100000) + " }}"},
      {"|filter", "{{ 1" + repeat("|string", 100000) + " }}"},
      {"if-else", "{{ " + repeat("1 if true else ", 100000) + "1 }}"},
      {"( chains )", "{{ " + repeat("(" + repeat("1+", 200), 100) + "1" + repeat(")", 100) + " }}"}};
  for (const auto& [what, source] : cases) {
    const std::string message = error_of([&] { ChatTemplate::from_string(source); });
    EXPECT_NE(message.find(kTemplateLimit), std::string::npos) << what << ": '" << message << "'";
    EXPECT_NE(message.find("chat template line 1"), std::string::npos) << what << ": '" << message << "'";
  }
}

TEST(TemplateDepth, NestingWithinTheLimitRenders) {
  // 200 levels of each, below the limit of 256 (the print tag and the expression take a level each).
  EXPECT_EQ(render_source("{{ " + repeat("(", 200) + "7" + repeat(")", 200) + " }}"), "7");
  EXPECT_EQ(render_source("{{ " + repeat("1+", 200) + "1 }}"), "201");
  EXPECT_EQ(render_source("{{ " + repeat("not ", 200) + "false }}"), "False");
  EXPECT_EQ(render_source(repeat("{% if true %}", 200) + "x" + repeat("{% endif %}", 200)), "x");
  EXPECT_EQ(render_source("{{ " + repeat("[", 200) + repeat("]", 200) + "|length }}"), "1");
}

TEST(TemplateDepth, TheErrorNamesTheLineAndTheFile) {
  const std::string dir = (std::filesystem::temp_directory_path() / "plumb-template-depth").string();
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/chat_template.jinja")
      << "line one\n{{ " << repeat("(", 5000) << "1" << repeat(")", 5000) << " }}\n";
  const std::string message = error_of([&] { ChatTemplate::from_dir(dir); });
  EXPECT_NE(message.find("chat template line 2"), std::string::npos) << message;
  EXPECT_NE(message.find(kTemplateLimit), std::string::npos) << message;
  EXPECT_NE(message.find(dir + "/chat_template.jinja"), std::string::npos) << message;
  std::filesystem::remove_all(dir);
}

TEST(TemplateDepth, DeepArgumentsAreRefused) {
  // A value nested past kMaxJsonDepth reaches the template only through code that built it (requests and files are
  // refused as text first, since even copying such a value recurses once per level); its conversion refuses it.
  nlohmann::ordered_json deep = nlohmann::ordered_json::array();
  for (int i = 0; i < 300; ++i) deep = nlohmann::ordered_json::array({std::move(deep)});
  const ChatTemplate t = ChatTemplate::from_string("{{ messages|length }}");
  const std::string message = error_of([&] {
    render_chat(t, {{"messages", nlohmann::ordered_json::array()}, {"x", deep}});
  });
  EXPECT_NE(message.find("chat template arguments nest deeper than 256 levels (the limit)"), std::string::npos)
      << message;
  nlohmann::ordered_json fine = nlohmann::ordered_json::array();
  for (int i = 0; i < 200; ++i) fine = nlohmann::ordered_json::array({std::move(fine)});
  EXPECT_EQ(render_chat(t, {{"messages", nlohmann::ordered_json::array()}, {"x", fine}}), "0");
}

TEST(JsonDepth, CountsBracketsOutsideStrings) {
  EXPECT_FALSE(json_too_deep(repeat("[", 256) + repeat("]", 256)));
  EXPECT_TRUE(json_too_deep(repeat("[", 257) + repeat("]", 257)));
  EXPECT_FALSE(json_too_deep("[\"" + repeat("[", 1000) + "\"]"));      // inside a string
  EXPECT_FALSE(json_too_deep("[\"\\\"" + repeat("{", 1000) + "\"]"));  // after an escaped quote
  EXPECT_FALSE(json_too_deep(repeat("[]", 10000)));                    // wide, not deep
  const std::optional<JsonTooDeep> deep = json_too_deep("{\n\"a\":\n" + repeat("[", 300));
  ASSERT_TRUE(deep);
  EXPECT_EQ(deep->line, 3);
}

TEST(JsonDepth, DeepTokenizerFilesFailToLoad) {
  const std::string dir = (std::filesystem::temp_directory_path() / "plumb-json-depth").string();
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << "{\"model\": " << repeat("[", 20000) << repeat("]", 20000) << "}";
  std::ofstream(dir + "/tokenizer_config.json")
      << "{\"chat_template\": \"x\", \"a\": " << repeat("{\"a\":", 20000) << "1" << repeat("}", 20000) << "}";
  std::string message = error_of([&] { Tokenizer::from_dir(dir); });
  EXPECT_NE(message.find(dir + "/tokenizer.json line 1: JSON nests deeper than 256 levels"), std::string::npos)
      << message;
  message = error_of([&] { ChatTemplate::from_dir(dir); });
  EXPECT_NE(message.find(dir + "/tokenizer_config.json line 1: JSON nests deeper than 256 levels"), std::string::npos)
      << message;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace plumb::tokenizer
