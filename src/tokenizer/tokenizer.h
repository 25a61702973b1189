// plumb's tokenizer: reads a model folder's tokenizer.json and turns text into token ids and back, exactly as
// Hugging Face `tokenizers` does for byte-level BPE tokenizers (Qwen2/Qwen3/Qwen3-Next/Qwen3.5, GPT-2 style).
//
//   const auto tok = plumb::tokenizer::Tokenizer::from_dir("models/qwen3");
//   std::vector<int32_t> ids = tok.encode("Hello<|im_end|>");     // added tokens are recognised in the text
//   std::string text = tok.decode(ids, SpecialTokens::kSkip);
//
// Encoding: added tokens are cut out first (normalized=false ones from the raw text, normalized=true ones after
// normalization), the rest is normalized (NFC for Qwen), pre-tokenized (regex Split, then ByteLevel) and each word is
// BPE-merged. Decoding maps each token back to bytes (ByteLevel decoder) and replaces invalid UTF-8 with U+FFFD the
// way Rust's from_utf8_lossy does. A Tokenizer is immutable after loading and safe to use from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace plumb::tokenizer {

// Whether decoding keeps or drops special tokens (added tokens marked "special": true).
enum class SpecialTokens { kKeep, kSkip };

class Tokenizer {
 public:
  // Loads <dir>/tokenizer.json. Throws plumb::Error naming the file and field on anything malformed or unsupported.
  static Tokenizer from_dir(const std::string& dir);
  // Loads a tokenizer.json file.
  static Tokenizer from_file(const std::string& path);
  // Builds from tokenizer.json text, as from_file does after reading it (`what` names the text in errors).
  static Tokenizer from_text(const std::string& text, const std::string& what);
  // Builds from parsed tokenizer.json content.
  static Tokenizer from_json(const nlohmann::json& j);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // The ids of `text`, which must be valid UTF-8 (plumb::Error otherwise). No BOS/EOS is added: like Hugging Face's
  // ByteLevel post-processor, encoding adds nothing the text does not contain.
  std::vector<int32_t> encode(std::string_view text) const;

  // The text of `ids`. Throws plumb::Error on an id that names no token.
  std::string decode(const std::vector<int32_t>& ids, SpecialTokens special = SpecialTokens::kKeep) const;

  // The bytes token `id` stands for (a multi-byte character may be split across tokens). Throws on unknown ids.
  std::string_view token_bytes(int32_t id) const;

  // The id of a token given by its text as written in tokenizer.json ("<|im_end|>", "Ġthe"), if any.
  std::optional<int32_t> token_id(std::string_view token) const;
  // The text of token `id` as written in tokenizer.json, if the id names a token.
  std::optional<std::string> token_text(int32_t id) const;
  // True if `id` is an added token marked special.
  bool is_special(int32_t id) const;
  // The bytes of every id below `size` (at least vocab_size()), for matching a grammar against the vocabulary: empty
  // for special tokens, which stand for no text, and for ids that name no token (a model's padded rows).
  std::vector<std::string> text_token_bytes(int64_t size) const;

  // One more than the largest id of any token (vocabulary and added tokens).
  int64_t vocab_size() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns a stream of ids into text incrementally: push() returns only whole UTF-8 characters, holding back the bytes
// of a character that the next token may complete, so a server can send each piece as soon as it is known.
// Concatenating every push() and the final flush() gives exactly tokenizer.decode(ids, special).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, SpecialTokens special = SpecialTokens::kKeep);

  // The text that token `id` completes (possibly empty).
  std::string push(int32_t id);
  // The held-back bytes, with an unfinished character replaced by U+FFFD; resets the decoder.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  SpecialTokens special_;
  std::string pending_;  // bytes not yet returned; at most the start of one character
};

}  // namespace plumb::tokenizer
