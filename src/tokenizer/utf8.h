// UTF-8 helpers shared by the tokenizer and the chat-template interpreter: validation, code-point iteration, the
// lossy decoding that Hugging Face's ByteLevel decoder applies (Rust's String::from_utf8_lossy), and Unicode
// normalization through utf8proc. All functions take and return UTF-8 in std::string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace plumb::tokenizer {

// How the bytes at the front of a buffer start: a whole character, an impossible byte sequence, or the start of a
// character that the buffer cuts short.
enum class Utf8Status { kComplete, kInvalid, kTruncated };

struct Utf8Step {
  Utf8Status status;
  size_t length;       // kComplete: bytes of the character; otherwise the bytes that form a valid prefix (>= 1)
  char32_t codepoint;  // kComplete only
};

// Classifies the sequence at s[0..]; s must not be empty. Follows the Unicode "maximal subpart" rule, so kInvalid's
// length is the number of bytes one U+FFFD replaces.
Utf8Step utf8_step(std::string_view s);

// True if s is well-formed UTF-8 (no surrogates, no overlongs, nothing above U+10FFFF).
bool utf8_valid(std::string_view s);

// Throws plumb::Error naming `what` and the byte offset if s is not well-formed UTF-8.
void utf8_require_valid(std::string_view s, std::string_view what);

// Replaces each maximal invalid subpart (and a truncated tail) with U+FFFD, as Rust's String::from_utf8_lossy does.
std::string utf8_lossy(std::string_view bytes);

// Appends the UTF-8 encoding of cp.
void utf8_append(std::string& out, char32_t cp);

// Decodes valid UTF-8 into code points (the caller has validated it).
std::vector<char32_t> utf8_codepoints(std::string_view s);

// Encodes code points as UTF-8.
std::string utf8_from_codepoints(const std::vector<char32_t>& cps);

// Unicode normalization forms, applied with utf8proc.
enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };

// Returns the normalization of valid UTF-8 s. Pure ASCII is returned unchanged without calling utf8proc.
std::string unicode_normalize(std::string_view s, NormalForm form);

// Unicode White_Space (what Python's str.split() and Rust's char::is_whitespace split on, minus U+001C..U+001F for
// Rust); `python` selects Python's str.isspace set, which adds U+001C..U+001F.
bool is_unicode_space(char32_t cp, bool python);

}  // namespace plumb::tokenizer
