// libFuzzer target over the tokenizer and chat templates. The first input byte picks what the rest is fed to:
//   0: encode (tiny and, when fetched, Qwen3 tokenizer), then decode the ids back and compare with NFC of the input
//   1: decode / stream-decode arbitrary ids (pairs of bytes)
//   2: parse and render the rest as a chat template
//   3: render the tiny chat template with the rest as a conversation (JSON)
// A plumb::Error of kind kInput is an accepted outcome (invalid UTF-8, bad ids, template errors); one of kind kInternal
// (a PLUMB_INTERNAL_CHECK: plumb's own invariant broke), crashes, hangs, sanitizer reports and a failed round trip
// are not. The fixtures load once before the first input, and the run aborts if they cannot: an Error there would
// otherwise read as every input rejected. PLUMB_FUZZ_CONTROL=internal plants an internal check failure in every input,
// so scripts/fuzz.sh can see the harness report it. Built by scripts/fuzz.sh with
// clang++ -fsanitize=fuzzer,address,undefined.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using plumb::tokenizer::ChatTemplate;
using plumb::tokenizer::StreamDecoder;
using plumb::tokenizer::Tokenizer;

struct Fixtures {
  std::vector<Tokenizer> tokenizers;
  ChatTemplate tiny_template;
};

std::string source_dir() {
  const char* env = std::getenv("PLUMB_SOURCE_DIR");
  return env ? env : ".";
}

const Fixtures& fixtures() {
  static const Fixtures f = [] {
    const std::string tiny = source_dir() + "/tests/fixtures/tokenizer/tiny";
    std::vector<Tokenizer> toks;
    toks.push_back(Tokenizer::from_dir(tiny));
    const std::string qwen = source_dir() + "/.cache/qwen3-tokenizer";
    if (std::ifstream(qwen + "/tokenizer.json").good()) toks.push_back(Tokenizer::from_dir(qwen));
    return Fixtures{std::move(toks), ChatTemplate::from_dir(tiny)};
  }();
  return f;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz invariant failed: %s\n", what);
    std::abort();
  }
}

bool internal_failure_planted() {
  static const bool planted = [] {
    const char* control = std::getenv("PLUMB_FUZZ_CONTROL");
    return control != nullptr && std::string(control) == "internal";
  }();
  return planted;
}

void fuzz_encode(const std::string& text) {
  for (const Tokenizer& tok : fixtures().tokenizers) {
    const std::vector<int32_t> ids = tok.encode(text);  // throws on invalid UTF-8 before anything else
    const std::string expected = plumb::tokenizer::unicode_normalize(text, plumb::tokenizer::NormalForm::kNFC);
    check(tok.decode(ids) == expected, "decode(encode(s)) == NFC(s)");
  }
}

void fuzz_decode(const std::string& bytes) {
  for (const Tokenizer& tok : fixtures().tokenizers) {
    std::vector<int32_t> ids;
    for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
      const auto raw = static_cast<uint16_t>(static_cast<uint8_t>(bytes[i]) << 8 | static_cast<uint8_t>(bytes[i + 1]));
      ids.push_back(static_cast<int32_t>(raw % tok.vocab_size()));
    }
    std::string whole;
    try {
      whole = tok.decode(ids);
    } catch (const plumb::Error& e) {
      if (e.kind() == plumb::Error::Kind::kInternal) throw;
      continue;  // an id inside a gap of the vocabulary
    }
    check(plumb::tokenizer::utf8_valid(whole), "decode gives valid UTF-8");
    StreamDecoder stream(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    check(streamed == whole, "stream decode == decode");
  }
}

void fuzz_template(const std::string& source) {
  const nlohmann::ordered_json kwargs = {
      {"messages", {{{"role", "system"}, {"content", "s"}}, {{"role", "user"}, {"content", "u"}}}},
      {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}},
      {"add_generation_prompt", true}};
  const std::string out = plumb::tokenizer::render_chat(ChatTemplate::from_string(source), kwargs);
  check(out.size() <= (64u << 20), "bounded output");
}

void fuzz_conversation(const std::string& json_text) {
  const auto kwargs = nlohmann::ordered_json::parse(json_text, nullptr, false);
  if (kwargs.is_discarded()) return;
  plumb::tokenizer::render_chat(fixtures().tiny_template, kwargs);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  try {
    fixtures();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: the fixtures failed to load (PLUMB_SOURCE_DIR=%s): %s\n", source_dir().c_str(),
                 e.what());
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    PLUMB_INTERNAL_CHECK(!internal_failure_planted(), "planted by PLUMB_FUZZ_CONTROL=internal");
    switch (data[0] % 4) {
      case 0:
        fuzz_encode(rest);
        break;
      case 1:
        fuzz_decode(rest);
        break;
      case 2:
        fuzz_template(rest);
        break;
      default:
        fuzz_conversation(rest);
        break;
    }
  } catch (const plumb::Error& e) {
    // Rejecting bad input is the expected outcome; a broken invariant is a bug, reported as a crash with this input.
    if (e.kind() == plumb::Error::Kind::kInternal) {
      std::fprintf(stderr, "fuzz: %s\n", e.what());
      std::abort();
    }
  } catch (const nlohmann::json::exception&) {
    // Non-UTF-8 strings inside a conversation are rejected by the JSON library when dumped.
  }
  return 0;
}
