// UTF-8 validation, lossy decoding and normalization (see utf8.h).
#include "tokenizer/utf8.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace plumb::tokenizer {
namespace {

// The allowed range of the second byte for each lead byte (Unicode Table 3-7); later bytes are always 80..BF.
bool second_byte_ok(unsigned char lead, unsigned char b) {
  switch (lead) {
    case 0xE0:
      return b >= 0xA0 && b <= 0xBF;
    case 0xED:
      return b >= 0x80 && b <= 0x9F;
    case 0xF0:
      return b >= 0x90 && b <= 0xBF;
    case 0xF4:
      return b >= 0x80 && b <= 0x8F;
    default:
      return b >= 0x80 && b <= 0xBF;
  }
}

}  // namespace

Utf8Step utf8_step(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned char lead = p[0];
  if (lead < 0x80) return {Utf8Status::kComplete, 1, lead};
  size_t need = 0;
  char32_t cp = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 2;
    cp = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 3;
    cp = lead & 0x0F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 4;
    cp = lead & 0x07;
  } else {
    return {Utf8Status::kInvalid, 1, 0};
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= s.size()) return {Utf8Status::kTruncated, i, 0};
    const unsigned char b = p[i];
    const bool ok = i == 1 ? second_byte_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {Utf8Status::kInvalid, i, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Status::kComplete, need, cp};
}

bool utf8_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step step = utf8_step(s.substr(i));
    if (step.status != Utf8Status::kComplete) return false;
    i += step.length;
  }
  return true;
}

void utf8_require_valid(std::string_view s, std::string_view what) {
  size_t i = 0;
  while (i < s.size()) {
    const Utf8Step step = utf8_step(s.substr(i));
    PLUMB_CHECK(step.status == Utf8Status::kComplete, "{} is not valid UTF-8 (byte {} of {})", what, i, s.size());
    i += step.length;
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const Utf8Step step = utf8_step(bytes.substr(i));
    if (step.status == Utf8Status::kComplete) {
      out.append(bytes.substr(i, step.length));
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += step.length;
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::vector<char32_t> utf8_codepoints(std::string_view s) {
  std::vector<char32_t> cps;
  cps.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const Utf8Step step = utf8_step(s.substr(i));
    cps.push_back(step.status == Utf8Status::kComplete ? step.codepoint : 0xFFFD);
    i += step.length;
  }
  return cps;
}

std::string utf8_from_codepoints(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) utf8_append(out, cp);
  return out;
}

std::string unicode_normalize(std::string_view s, NormalForm form) {
  if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    return std::string(s);
  }
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNFC:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::kNFD:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::kNFKC:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::kNFKD:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()),
                   &mapped, static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owner(mapped, &std::free);
  PLUMB_INTERNAL_CHECK(n >= 0, "Unicode normalization of text already validated as UTF-8 failed: {}",
                       utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
}

bool is_unicode_space(char32_t cp, bool python) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
      return python;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace plumb::tokenizer
