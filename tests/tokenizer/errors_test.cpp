// Malformed or unsupported tokenizer.json files and chat templates must fail to load with a plumb::Error that names
// the field or the template line, never load and produce different ids or prompts.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/fixture_io.h"
#include "tokenizer/tokenizer.h"

namespace plumb::tokenizer {
namespace {

nlohmann::json tiny_json() {
  std::ifstream in(test::tokenizer_fixtures() + "/tiny/tokenizer.json");
  return nlohmann::json::parse(in);
}

// The message of the plumb::Error that f throws ("" if it throws none).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_load_error(const std::function<void(nlohmann::json&)>& edit, const std::string& expected) {
  nlohmann::json j = tiny_json();
  edit(j);
  const std::string message = error_of([&] { Tokenizer::from_json(j); });
  EXPECT_NE(message.find(expected), std::string::npos) << "message: '" << message << "', expected '" << expected << "'";
}

TEST(TokenizerErrors, NamesTheField) {
  expect_load_error(
      [](auto& j) {
        j["normalizer"] = {{"type", "Lowercase"}};
      },
      "tokenizer.json: normalizer.type 'Lowercase' is not supported");
  expect_load_error(
      [](auto& j) {
        j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "Strip"}}}}};
      },
      "normalizer.normalizers[0].type 'Strip' is not supported");
  expect_load_error([](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; },
                    "pre_tokenizer.pretokenizers[0].behavior 'Sideways'");
  expect_load_error(
      [](auto& j) {
        j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(unclosed"}};
      },
      "pre_tokenizer.pretokenizers[0].pattern.Regex: invalid regex");
  expect_load_error([](auto& j) { j["pre_tokenizer"]["pretokenizers"][1]["type"] = "Metaspace"; },
                    "pre_tokenizer.pretokenizers[1].type 'Metaspace' is not supported");
  expect_load_error([](auto& j) { j["pre_tokenizer"] = nullptr; }, "pre_tokenizer is null");
  expect_load_error([](auto& j) { j["model"]["type"] = "WordPiece"; }, "model.type 'WordPiece' is not supported");
  expect_load_error([](auto& j) { j["model"]["merges"][3] = "a b c"; }, "model.merges[3]");
  expect_load_error(
      [](auto& j) {
        j["model"]["merges"][4] = {"zzz-not-a-token", "a"};
      },
      "model.merges[4]: token 'zzz-not-a-token' is not in model.vocab");
  expect_load_error([](auto& j) { j["model"]["merges"][5] = 17; }, "model.merges[5] must be");
  expect_load_error([](auto& j) { j["model"]["vocab"]["x"] = "seven"; }, "model.vocab['x']");
  expect_load_error([](auto& j) { j["model"].erase("vocab"); }, "model.vocab is missing");
  // A sparse id would size the id tables for it: refused by name, not a multi-gigabyte allocation.
  expect_load_error([](auto& j) { j["model"]["vocab"]["far"] = 130000000; },
                    "model.vocab['far'] has id 130000000 but model.vocab names only");
  expect_load_error([](auto& j) { j["added_tokens"][0]["id"] = 1 << 29; }, "has id 536870912 but the model's");
  expect_load_error([](auto& j) { j["model"]["byte_fallback"] = true; }, "model.byte_fallback");
  expect_load_error([](auto& j) { j["added_tokens"][0]["id"] = -3; }, "added_tokens[0].id");
  expect_load_error([](auto& j) { j["added_tokens"][1]["lstrip"] = "yes"; }, "added_tokens[1].lstrip");
  expect_load_error([](auto& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "decoder.type 'WordPiece'");
  expect_load_error(
      [](auto& j) {
        j["post_processor"] = {{"type", "TemplateProcessing"}};
      },
      "post_processor.type 'TemplateProcessing'");
  expect_load_error([](auto& j) { j["truncation"] = {{"max_length", 8}}; }, "truncation is set");
}

TEST(TokenizerErrors, MissingOrBrokenFiles) {
  EXPECT_NE(error_of([] { Tokenizer::from_dir("/nonexistent"); }).find("cannot open"), std::string::npos);
  const std::string dir = test::scratch_dir("tokenizer-errors");
  std::ofstream(dir + "/tokenizer.json") << "{ not json";
  EXPECT_NE(error_of([&] { Tokenizer::from_dir(dir); }).find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of([&] { ChatTemplate::from_dir(dir); }).find("no chat_template.jinja or tokenizer_config.json"),
            std::string::npos);
}

TEST(ChatTemplateErrors, NamesTheLine) {
  auto parse_error = [](const std::string& source) { return error_of([&] { ChatTemplate::from_string(source); }); };
  EXPECT_NE(parse_error("a\nb\n{% include 'x.j2' %}").find("chat template line 3: '{% include %}' is not supported"),
            std::string::npos);
  EXPECT_NE(parse_error("{{ x | frobnicate }}").find("line 1: filter 'frobnicate' is not supported"),
            std::string::npos);
  EXPECT_NE(parse_error("\n{% if x is weird %}{% endif %}").find("line 2: test 'weird' is not supported"),
            std::string::npos);
  EXPECT_NE(parse_error("{% if x %}\nno end").find("missing '{% endif %}'"), std::string::npos);
  EXPECT_NE(parse_error("{{ 'unterminated }}").find("line 1: unterminated string"), std::string::npos);
  EXPECT_NE(parse_error("{{ x ").find("unexpected end of template"), std::string::npos);
  EXPECT_NE(parse_error("{# never closed").find("missing end of comment"), std::string::npos);
  EXPECT_NE(parse_error("{% break %}").find("outside a loop"), std::string::npos);
  // Numbers past 64 bits fail as the template's error (the fuzzer found an index that ended the process).
  EXPECT_NE(parse_error("\n{{ 99999999999999999999 }}").find("line 2: integer literal 99999999999999999999 is not"),
            std::string::npos);
  EXPECT_NE(parse_error("{{ messages.99999999999999999999 }}").find("line 1: index 99999999999999999999 is not"),
            std::string::npos);
}

TEST(ChatTemplateErrors, RuntimeErrorsNameTheLine) {
  const nlohmann::ordered_json kwargs = {{"messages", nlohmann::ordered_json::array()}};
  auto render_error = [&](const std::string& source) {
    return error_of([&] { render_chat(ChatTemplate::from_string(source), kwargs); });
  };
  EXPECT_NE(render_error("x\n{{ raise_exception('no system role') }}")
                .find("chat template line 2: the template raised an exception: no system role"),
            std::string::npos);
  EXPECT_NE(render_error("{{ 'a' + 1 }}").find("line 1: can only concatenate str"), std::string::npos);
  EXPECT_NE(render_error("{{ nothing.attr }}").find("undefined"), std::string::npos);
  EXPECT_NE(render_error("{{ [[1]] | map(attribute='0.99999999999999999999') | list }}")
                .find("attribute path index 99999999999999999999 is not an integer that fits 64 bits"),
            std::string::npos);
  EXPECT_NE(render_error("{% for i in range(2000) %}{% for j in range(2000) %}{% endfor %}{% endfor %}")
                .find("too much work"),
            std::string::npos);
  EXPECT_NE(render_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("nest deeper"), std::string::npos);
  EXPECT_NE(render_error("{{ 'ab' * 9 ** 9 }}").find("string repetition is too long"), std::string::npos);
  EXPECT_NE(render_error("{{ [1] * 9 ** 9 }}").find("list repetition is too long"), std::string::npos);
  // An empty sequence repeated any number of times is empty at once (tokenizer_fuzz timed out on `() * 9 ** 9`).
  EXPECT_EQ(render_chat(ChatTemplate::from_string("{{ (() * 9 ** 18) | length }}|{{ ('' * 9 ** 18) | length }}|"
                                                  "{{ [] * 2 }}{{ 'x' * -1 }}{{ 'ab' * 2 }}"),
                        kwargs),
            "0|0|[]abab");
  // A list repeated into itself has a text of gigabytes: printing it, or its JSON, stops at 16 MB (tokenizer_fuzz timed
  // out printing `((9,)*9999,)*8100`, 81 M elements).
  for (const char* source : {"{{ [{'k': ((9,) * 9999,) * 900 * 9}] }}", "{{ (((9,) * 9999,) * 8100) | tojson }}"}) {
    EXPECT_NE(render_error(source).find("a value's text is larger than 16777216 bytes"), std::string::npos) << source;
  }
  EXPECT_NE(error_of([] {
              render_chat(ChatTemplate::from_string("x"), nlohmann::ordered_json::object());
            }).find("\"messages\""),
            std::string::npos);
  // continue_final_message: refused whatever its type (a string was a JSON type error), false and null pass.
  for (const nlohmann::ordered_json& value : {nlohmann::ordered_json(true), nlohmann::ordered_json("yes")}) {
    nlohmann::ordered_json asked = kwargs;
    asked["continue_final_message"] = value;
    EXPECT_NE(error_of([&] { render_chat(ChatTemplate::from_string("x"), asked); }).find("continue_final_message"),
              std::string::npos)
        << value.dump();
  }
  for (const nlohmann::ordered_json& value : {nlohmann::ordered_json(false), nlohmann::ordered_json()}) {
    nlohmann::ordered_json asked = kwargs;
    asked["continue_final_message"] = value;
    EXPECT_EQ(render_chat(ChatTemplate::from_string("x"), asked), "x") << value.dump();
  }
}

TEST(ChatTemplateSemantics, WhitespaceControlAndScoping) {
  const nlohmann::ordered_json kwargs = {{"messages", nlohmann::ordered_json::array()}};
  auto render = [&](const std::string& source) { return render_chat(ChatTemplate::from_string(source), kwargs); };
  // Expected outputs were produced by jinja2 3.1 with transformers' settings (trim_blocks, lstrip_blocks).
  EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\n  {{ 'y' }}\n{# c #}\n  {#- d #}\nz"), "  x\n  y\nz");
  EXPECT_EQ(render("{% for i in [1,2,3] %}{% if i == 1 %}{% set x = 5 %}{% endif %}[{{ x }}]{% endfor %}{{ x }}"),
            "[5][][]");
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1,2] %}{{ x }}{% set x = x + 10 %}{{ x }};{% endfor %}{{ x }}"),
            "111;111;1");
  EXPECT_EQ(render("{{ [1,2] }}{{ {'a': 'b', 'c': none} }}{{ 1.0 }}{{ 1e20 }}{{ 'it''s' }}{{ \"a'b\" }}{{ 0.1+0.2 }}"),
            "[1, 2]{'a': 'b', 'c': None}1.01e+20itsa'b0.30000000000000004");
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ true + 1 }}"),
            "3 -4 2 3.5 1024 0.5 2");
  EXPECT_EQ(render("{{ 'x' ~ 1 ~ none }}|{{ 'abc'[::-1] }}|{{ 'abc'[-1] }}|{{ [1,2,3][1:] }}"), "x1None|cba|c|[2, 3]");
  EXPECT_EQ(render("{% macro m(a, b='d') %}{{ a }}-{{ b }}-{{ kwargs }}{% endmacro %}{{ m(1) }}|{{ m(1, 2, z=4) }}"),
            "1-d-{}|1-2-{'z': 4}");
  EXPECT_EQ(render("{{ x is defined }}{{ none is none }}{{ true is number }}{{ true is integer }}"),
            "FalseTrueTrueFalse");
  EXPECT_EQ(render("{{ 'a\\nb\\u00e9\\x41\\q' }}"),
            "a\nb\xC3\xA9"
            "A\\q");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', 1) }}"),
            "['a', 'b', '', 'c']['a', 'b']['a', 'b c']");
  EXPECT_EQ(render("{{ 1 if false }}|{{ (1 if false) is defined }}"), "|False");
  EXPECT_EQ(render("{% for a, b in {'x': 1, 'y': 2}.items() %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}"), "x11y22");
  EXPECT_EQ(render("{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}"), "012");
  EXPECT_EQ(
      render("{{ {'b': 1, 'a': [1.5, 'é\"']} | tojson }}|{{ {'b': 1, 'a': 2} | tojson(indent=2, sort_keys=true) }}"),
      "{\"b\": 1, \"a\": [1.5, \"é\\\"\"]}|{\n  \"a\": 2,\n  \"b\": 1\n}");
  EXPECT_EQ(render("line\n"), "line");  // keep_trailing_newline=False drops one final newline
}

}  // namespace
}  // namespace plumb::tokenizer
