// The GPT-2 byte-level alphabet (see byte_level.h).
#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace plumb::tokenizer {
namespace {

// Bytes that are printable Latin-1 keep their code point: '!'..'~', '¡'..'¬', '®'..'ÿ'.
constexpr bool keeps_code_point(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

struct Alphabet {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // the highest character is U+0100 + 67 = U+0143
  Alphabet() {
    to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      to_char[b] = keeps_code_point(b) ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet table;
  return table;
}

}  // namespace

char32_t byte_to_char(uint8_t b) {
  return alphabet().to_char[b];
}

std::optional<uint8_t> char_to_byte(char32_t c) {
  if (c >= alphabet().to_byte.size() || alphabet().to_byte[c] < 0) return std::nullopt;
  return static_cast<uint8_t>(alphabet().to_byte[c]);
}

std::string byte_level_decode_token(std::string_view token) {
  std::string bytes;
  size_t i = 0;
  while (i < token.size()) {
    const Utf8Step step = utf8_step(token.substr(i));
    const std::optional<uint8_t> b = step.status == Utf8Status::kComplete ? char_to_byte(step.codepoint) : std::nullopt;
    if (!b) return std::string(token);
    bytes.push_back(static_cast<char>(*b));
    i += step.length;
  }
  return bytes;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  for (char c : bytes) utf8_append(out, byte_to_char(static_cast<uint8_t>(c)));
  return out;
}

}  // namespace plumb::tokenizer
