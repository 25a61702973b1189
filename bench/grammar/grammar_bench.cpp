// Benchmark of the grammar matcher (grammar/matcher.h): the time to compute one row's allowed-token mask, per token
// of a typical answer to a typical schema, over a real tokenizer's vocabulary. Each answer is encoded by the
// tokenizer (as a model would write it) and replayed: at every step the mask is taken, then the answer's next token.
// "compile" is the schema's grammar built and its contexts' token sets precomputed (matcher.h), as the server does
// once per schema; "cold" replays the answer on that fresh grammar, every state's mask made from the contexts on its
// first visit; "warm" replays it again, as for a schema the server has seen (masks from the cache). "late" counts the
// contexts a replay met that were not precomputed (0: every first visit was covered). Prints a table; with a path,
// also writes JSON. "apply" is the mask's cost on a row of logits (engine side: -inf where not allowed).
//
// Usage: plumb_grammar_bench TOKENIZER_DIR [out.json] [--repeat N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace {

struct Case {
  const char* name;
  const char* schema;
  const char* answer;
  plumb::grammar::JsonWrapping wrapping;
};

const Case kCases[] = {
    {"tool call (2 fields, enum)",
     R"({"type": "object", "properties": {"name": {"const": "get_weather"}, "arguments": {"type": "object",
         "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
         "required": ["city", "unit"]}}, "required": ["name", "arguments"]})",
     R"({"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}})",
     {"<tool_call>\n", "\n</tool_call>"}},
    {"nested order (objects, arrays)",
     R"({"type": "object", "properties": {"order_id": {"type": "string", "maxLength": 12},
         "customer": {"type": "object", "properties": {"name": {"type": "string"}, "email": {"type": "string"}},
         "required": ["name", "email"]}, "items": {"type": "array", "minItems": 1, "items": {"type": "object",
         "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}, "price": {"type": "number"}},
         "required": ["sku", "qty", "price"]}}, "paid": {"type": "boolean"}},
         "required": ["order_id", "customer", "items", "paid"]})",
     R"({"order_id": "A-1029", "customer": {"name": "Ada Lovelace", "email": "ada@example.com"}, "items": [{"sku": )"
     R"("X-1", "qty": 2, "price": 9.99}, {"sku": "Y-22", "qty": 1, "price": 120.5}], "paid": true})",
     {}},
    {"json_object (any object)",
     R"({"type": "object"})",
     R"({"summary": "The meeting moved to Tuesday at 10am.", "attendees": ["Ana", "Bo"], "priority": 2})",
     {}},
    {"classification (enum, number)",
     R"({"type": "object", "properties": {"label": {"enum": ["positive", "negative", "neutral"]},
         "confidence": {"type": "number"}}, "required": ["label", "confidence"], "additionalProperties": false})",
     R"({"label": "positive", "confidence": 0.93})",
     {}},
    {"recursive tree ($ref)",
     R"({"$defs": {"n": {"type": "object", "properties": {"value": {"type": "integer"}, "children": {"type": "array",
         "items": {"$ref": "#/$defs/n"}}}, "required": ["value", "children"]}}, "$ref": "#/$defs/n"})",
     R"({"value": 1, "children": [{"value": 2, "children": []}, {"value": 3, "children": [{"value": 4, )"
     R"("children": []}]}]})",
     {}},
};

struct Timing {
  double mean_us = 0, median_us = 0, max_us = 0;
};

Timing summarize(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  Timing t;
  for (double u : us) t.mean_us += u / static_cast<double>(us.size());
  t.median_us = us[us.size() / 2];
  t.max_us = us.back();
  return t;
}

// The mask time of every step of `tokens` on `grammar` (microseconds), or an empty list if a token is refused.
std::vector<double> replay(const std::shared_ptr<const plumb::grammar::CompiledGrammar>& grammar,
                           const std::vector<int32_t>& tokens, std::vector<double>* apply_us = nullptr) {
  plumb::grammar::Matcher matcher(grammar);
  std::vector<double> us;
  std::vector<float> logits(static_cast<size_t>(grammar->vocabulary().size()), 1.0f);  // [vocab]
  for (int32_t id : tokens) {
    const auto begin = std::chrono::steady_clock::now();
    const auto mask = matcher.allowed();
    const auto masked = std::chrono::steady_clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(masked - begin).count());
    if (apply_us) {
      plumb::grammar::apply_mask(*mask, logits.data(), static_cast<int64_t>(logits.size()));
      apply_us->push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - masked).count());
    }
    if (!plumb::grammar::mask_has(*mask, id) || !matcher.accept(id)) return {};
  }
  return matcher.finished() ? us : std::vector<double>{};
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, json_path;
  int repeat = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else if (arg.rfind("--", 0) == 0 || (!dir.empty() && !json_path.empty())) {
      std::fprintf(stderr, "usage: plumb_grammar_bench TOKENIZER_DIR [out.json] [--repeat N]\n");
      return 2;
    } else {
      (dir.empty() ? dir : json_path) = arg;
    }
  }
  if (dir.empty()) {
    std::fprintf(stderr, "usage: plumb_grammar_bench TOKENIZER_DIR [out.json] [--repeat N]\n");
    return 2;
  }
  const auto tokenizer = plumb::tokenizer::Tokenizer::from_dir(dir);
  std::vector<int32_t> stops;
  for (const char* stop : {"<|im_end|>", "<|endoftext|>"})
    if (const auto id = tokenizer.token_id(stop)) stops.push_back(*id);
  const auto vocabulary =
      std::make_shared<const plumb::grammar::Vocabulary>(tokenizer.text_token_bytes(tokenizer.vocab_size()), stops);
  std::printf("vocabulary %lld tokens (%s); mask time per token per row, microseconds; warm: best of %d replays\n",
              static_cast<long long>(vocabulary->size()), dir.c_str(), repeat);
  std::printf("%-32s %6s %9s %8s %5s %10s %11s %9s %10s %11s %10s\n", "schema", "tokens", "compile", "contexts", "late",
              "cold mean", "cold median", "cold max", "warm mean", "warm median", "apply mean");
  nlohmann::json out = nlohmann::json::array();
  for (const Case& c : kCases) {
    const auto schema = nlohmann::ordered_json::parse(c.schema);
    const std::vector<int32_t> tokens = tokenizer.encode(c.wrapping.prefix + c.answer + c.wrapping.suffix);
    const auto compile_begin = std::chrono::steady_clock::now();
    const auto grammar = std::make_shared<const plumb::grammar::CompiledGrammar>(
        plumb::grammar::compile_json_schema(schema, c.wrapping), vocabulary);
    const double compile_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - compile_begin).count();
    const std::vector<double> cold_us = replay(grammar, tokens);
    if (cold_us.empty()) {
      std::fprintf(stderr, "plumb_grammar_bench: the grammar of '%s' refuses its own answer\n", c.name);
      return 1;
    }
    Timing warm{1e300, 1e300, 0}, apply{1e300, 1e300, 0};
    for (int r = 0; r < repeat; ++r) {
      std::vector<double> apply_us;
      const Timing t = summarize(replay(grammar, tokens, &apply_us));
      if (t.mean_us < warm.mean_us) warm = t;
      const Timing a = summarize(apply_us);
      if (a.mean_us < apply.mean_us) apply = a;
    }
    const Timing cold = summarize(cold_us);
    std::printf("%-32s %6zu %7.1fms %8zu %5zu %10.1f %11.1f %9.1f %10.2f %11.2f %10.1f\n", c.name, tokens.size(),
                compile_ms, grammar->precomputed_contexts(), grammar->late_contexts(), cold.mean_us, cold.median_us,
                cold.max_us, warm.mean_us, warm.median_us, apply.mean_us);
    out.push_back({{"schema", c.name},
                   {"vocab", vocabulary->size()},
                   {"tokens", tokens.size()},
                   {"compile_ms", compile_ms},
                   {"contexts", grammar->precomputed_contexts()},
                   {"context_bytes", grammar->context_bytes()},
                   {"late_contexts", grammar->late_contexts()},
                   {"cold_mean_us", cold.mean_us},
                   {"cold_median_us", cold.median_us},
                   {"cold_max_us", cold.max_us},
                   {"warm_mean_us", warm.mean_us},
                   {"warm_median_us", warm.median_us},
                   {"apply_mean_us", apply.mean_us}});
  }
  if (!json_path.empty()) {
    std::ofstream file(json_path);
    file << out.dump(2) << "\n";
    if (!file) {
      std::fprintf(stderr, "plumb_grammar_bench: could not write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
}
