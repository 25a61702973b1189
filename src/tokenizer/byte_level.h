// The GPT-2 byte-level alphabet: every byte 0..255 is shown as one printable Unicode character, so byte-level BPE
// vocabularies are stored as text. Printable Latin-1 bytes stand for themselves; the other 68 bytes take the code
// points U+0100.. in byte order (so a space is 'Ġ', U+0120).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace plumb::tokenizer {

// The character that stands for byte b.
char32_t byte_to_char(uint8_t b);

// The byte that character c stands for, or nullopt if c is not in the alphabet.
std::optional<uint8_t> char_to_byte(char32_t c);

// The bytes that a token's text stands for under the ByteLevel decoder: each character's byte if every character is
// in the alphabet, otherwise the token's own UTF-8 (how Hugging Face decodes added tokens such as "<|im_end|>" and
// tokens outside the alphabet).
std::string byte_level_decode_token(std::string_view token);

// The byte-level text of raw bytes (each byte replaced by its character).
std::string byte_level_encode(std::string_view bytes);

}  // namespace plumb::tokenizer
