// libFuzzer target over what a client's request body reaches before any model work: the depth check, the JSON parse,
// parse_api_request (/v1/chat/completions or /v1/completions, by the first byte), and, for structured output, the
// grammar compilers (JSON Schema, regular expression, GBNF) and a walk of up to 16 tokens over a small byte
// vocabulary, each step's mask checked against the reference matcher. This is what plumb serve does with a body
// (server.cpp, structured.cpp) up to the chat template, which tokenizer_fuzz covers. Bad input must end in a
// plumb::Error of input kind; a crash, hang, sanitizer report or an internal error (PLUMB_INTERNAL_CHECK) is a failure.
// Built by scripts/fuzz.sh with clang++ -fsanitize=fuzzer,address,undefined.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/json_depth.h"
#include "grammar/cache.h"
#include "server/openai_api.h"

namespace {

// Every byte as a token (ids 0-255), a few multi-byte ones that cross JSON's punctuation, and a stop token (id 264).
std::shared_ptr<const plumb::grammar::Vocabulary> small_vocabulary() {
  static const auto vocabulary = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
    for (const char* t : {"\": \"", "\", \"", "{\"", "\"}", "true", "null", "12", "\n  "}) tokens.emplace_back(t);
    tokens.emplace_back();  // 264: the stop token (no bytes)
    return std::make_shared<const plumb::grammar::Vocabulary>(tokens, std::vector<int32_t>{264});
  }();
  return vocabulary;
}

// Compiles the request's constraint and walks it, each step taking the lowest allowed token; at every step the mask
// made from the precomputed contexts must equal the reference walk of the whole vocabulary (matcher.h).
void walk_constraint(const plumb::server::StructuredOutput& output) {
  plumb::grammar::GrammarCache cache(small_vocabulary(), 1);
  const std::shared_ptr<const plumb::grammar::CompiledGrammar> grammar =
      output.regex  ? cache.regex(*output.regex)
      : output.gbnf ? cache.gbnf(*output.gbnf)
                    : cache.json_schema(output.schema, {output.prefix, output.suffix});
  const plumb::grammar::Vocabulary& vocabulary = grammar->vocabulary();
  plumb::grammar::StackSet stacks = grammar->initial(), next_stacks;
  for (int step = 0; step < 16; ++step) {
    const std::shared_ptr<const plumb::grammar::TokenMask> allowed = grammar->mask(stacks);
    if (*allowed != grammar->reference_mask(stacks)) {
      std::fprintf(stderr, "request_fuzz: step %d: the context mask differs from the reference walk\n", step);
      std::abort();
    }
    int32_t next = -1;
    for (int32_t id = 0; id < vocabulary.size() && next < 0; ++id)
      if (plumb::grammar::mask_has(*allowed, id)) next = id;
    if (next < 0 || vocabulary.is_stop(next)) break;
    for (const char byte : vocabulary.token(next)) {
      grammar->advance(stacks, static_cast<uint8_t>(byte), next_stacks);
      std::swap(stacks, next_stacks);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto endpoint =
      data[0] % 2 == 0 ? plumb::server::Endpoint::kChatCompletions : plumb::server::Endpoint::kCompletions;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  // The server answers a body nested past the limit with a 400 before parsing it (parsing recurses per level).
  if (plumb::json_too_deep(body)) return 0;
  const plumb::server::Json json = plumb::server::Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  try {
    const plumb::server::ApiRequest request = plumb::server::parse_api_request(endpoint, json);
    if (request.structured) walk_constraint(*request.structured);
  } catch (const plumb::Error& e) {
    if (e.kind() == plumb::Error::Kind::kInternal) {
      std::fprintf(stderr, "%s\n", e.what());
      std::abort();
    }
  }
  return 0;
}
