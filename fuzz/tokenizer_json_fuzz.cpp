// libFuzzer target over tokenizer.json, the file of a model folder that plumb parses before it can encode a word:
// the input is the file's text, loaded as Tokenizer::from_file loads one (depth check, parse, every field read). A
// tokenizer that loads then encodes a few fixed texts, and decodes the ids back: every id must lie in its vocabulary
// and the text must be valid UTF-8. Bad input must end in a plumb::Error of input kind; a crash, hang, sanitizer
// report or an internal error (PLUMB_INTERNAL_CHECK) is a failure. Built by scripts/fuzz.sh with clang++
// -fsanitize=fuzzer,address,undefined; seeded with the tiny fixture's tokenizer.json and hand-made files.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz invariant failed: %s\n", what);
    std::abort();
  }
}

void fuzz_tokenizer_json(const std::string& text) {
  using plumb::tokenizer::Tokenizer;
  const Tokenizer tok = Tokenizer::from_text(text, "tokenizer.json");
  for (const char* sample :
       {"Hello, world!", "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x99\x82", "  12345\n\t<|x|>"}) {
    const std::vector<int32_t> ids = tok.encode(sample);
    for (int32_t id : ids) check(id >= 0 && id < tok.vocab_size(), "encoded ids lie in the vocabulary");
    check(plumb::tokenizer::utf8_valid(tok.decode(ids)), "decode gives valid UTF-8");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    fuzz_tokenizer_json(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const plumb::Error& e) {
    // Rejecting bad input is the expected outcome; a broken invariant is a bug, reported as a crash with this input.
    if (e.kind() == plumb::Error::Kind::kInternal) {
      std::fprintf(stderr, "fuzz: %s\n", e.what());
      std::abort();
    }
  }
  return 0;
}
