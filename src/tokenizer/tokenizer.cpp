// Tokenizer loading, encoding, decoding and streaming decoding (see tokenizer.h).
#include "tokenizer/tokenizer.h"

#include <deque>
#include <unordered_map>

#include "core/error.h"
#include "core/files.h"
#include "core/json_depth.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/utf8.h"

namespace plumb::tokenizer {
namespace {

constexpr std::string_view kFile = "tokenizer.json";

// Components that only change offsets, padding or batching are accepted; anything that changes ids is not.
void check_post_processing(const nlohmann::json& j) {
  for (const char* key : {"truncation", "padding"}) {
    PLUMB_CHECK(!j.contains(key) || j[key].is_null(), "{}: {} is set; plumb does not truncate or pad", kFile, key);
  }
  if (j.contains("post_processor") && !j["post_processor"].is_null()) {
    const std::string type = json_type(j["post_processor"], kFile, "post_processor");
    PLUMB_CHECK(type == "ByteLevel", "{}: post_processor.type '{}' is not supported (supported: ByteLevel, null)",
                kFile, type);
  }
  const nlohmann::json& decoder = json_member(j, "decoder", kFile, "");
  PLUMB_CHECK(!decoder.is_null(), "{}: decoder is null; plumb needs the ByteLevel decoder", kFile);
  const std::string type = json_type(decoder, kFile, "decoder");
  PLUMB_CHECK(type == "ByteLevel", "{}: decoder.type '{}' is not supported (supported: ByteLevel)", kFile, type);
}

}  // namespace

struct Tokenizer::Impl {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel model;
  AddedTokenMatcher raw_matcher;                       // added tokens with normalized=false, matched in the raw text
  AddedTokenMatcher normalized_matcher;                // added tokens with normalized=true, matched after normalization
  std::unordered_map<std::string, int32_t> added_ids;  // content -> id
  std::vector<std::string> id_text;                    // id -> token text ("" where no token)
  std::vector<std::string> id_bytes;                   // id -> decoded bytes
  std::vector<uint8_t> id_kind;                        // 0 none, 1 token, 2 special token

  void encode_plain(std::string_view text, std::vector<int32_t>& ids) const {
    thread_local std::vector<std::string_view> words;
    std::deque<std::string> arena;
    words.clear();
    pre_tokenizer.split(text, words, arena);
    for (std::string_view word : words) model.encode_word(word, ids);
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  return from_file(dir + "/tokenizer.json");
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  return from_text(read_regular_file(path), path);
}

Tokenizer Tokenizer::from_text(const std::string& text, const std::string& what) {
  check_json_depth(text, what);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  PLUMB_CHECK(!j.is_discarded(), "{}: not valid JSON", what);
  try {
    return from_json(j);
  } catch (const Error& e) {
    throw Error(fmt::format("{} ({})", e.what(), what), e.kind());  // an internal error stays one
  }
}

Tokenizer Tokenizer::from_json(const nlohmann::json& j) {
  PLUMB_CHECK(j.is_object(), "{}: the top level must be an object", kFile);
  check_post_processing(j);
  auto impl = std::unique_ptr<Impl>(new Impl{Normalizer::from_json(j.value("normalizer", nlohmann::json())),
                                             PreTokenizer::from_json(j.value("pre_tokenizer", nlohmann::json())),
                                             BpeModel::from_json(json_member(j, "model", kFile, "")),
                                             {},
                                             {},
                                             {},
                                             {},
                                             {},
                                             {}});
  const std::vector<AddedToken> added = parse_added_tokens(j.value("added_tokens", nlohmann::json()));

  int64_t size = static_cast<int64_t>(impl->model.tokens().size());
  // Against the model's vocabulary alone, before the added tokens extend it: checked as it grows, a chain of added
  // ids each within the bound of the one before would still reach any size.
  for (const AddedToken& t : added) {
    PLUMB_CHECK(t.id < size + static_cast<int64_t>(added.size()) + kMaxUnusedTokenIds,
                "{}: added token '{}' has id {} but the model's vocabulary ends at {} and there are only {} added "
                "tokens (at most {} ids may go unused)",
                kFile, t.content, t.id, size, added.size(), kMaxUnusedTokenIds);
  }
  for (const AddedToken& t : added) size = std::max<int64_t>(size, int64_t{t.id} + 1);
  impl->id_text.assign(static_cast<size_t>(size), std::string());
  impl->id_kind.assign(static_cast<size_t>(size), 0);
  for (size_t id = 0; id < impl->model.tokens().size(); ++id) {
    if (impl->model.tokens()[id].empty()) continue;
    impl->id_text[id] = impl->model.tokens()[id];
    impl->id_kind[id] = 1;
  }
  std::vector<AddedToken> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  for (const AddedToken& t : added) {
    impl->id_text[t.id] = t.content;  // an added token's content wins over the model's token of the same id
    impl->id_kind[t.id] = t.special ? 2 : 1;
    impl->added_ids[t.content] = t.id;
    if (t.normalized) {
      normalized_patterns.push_back(impl->normalizer.apply(t.content));
      normalized.push_back(t);
    } else {
      raw_patterns.push_back(t.content);
      raw.push_back(t);
    }
  }
  impl->raw_matcher = AddedTokenMatcher(std::move(raw), std::move(raw_patterns));
  impl->normalized_matcher = AddedTokenMatcher(std::move(normalized), std::move(normalized_patterns));
  impl->id_bytes.resize(impl->id_text.size());
  for (size_t id = 0; id < impl->id_text.size(); ++id) impl->id_bytes[id] = byte_level_decode_token(impl->id_text[id]);
  // tokenizers decodes a normalized added token as its normalized content ("ﬁne" comes back as "fine" under NFKC).
  for (const AddedToken& t : added) {
    if (t.normalized) impl->id_bytes[t.id] = byte_level_decode_token(impl->normalizer.apply(t.content));
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  utf8_require_valid(text, "text to encode");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<TextSegment> segments, pieces;
  impl_->raw_matcher.split(text, segments);
  for (const TextSegment& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    const std::string normalized = impl_->normalizer.apply(text.substr(seg.begin, seg.end - seg.begin));
    pieces.clear();
    impl_->normalized_matcher.split(normalized, pieces);
    for (const TextSegment& piece : pieces) {
      if (piece.id >= 0) {
        ids.push_back(piece.id);
      } else {
        impl_->encode_plain(std::string_view(normalized).substr(piece.begin, piece.end - piece.begin), ids);
      }
    }
  }
  return ids;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  PLUMB_CHECK(id >= 0 && id < static_cast<int64_t>(impl_->id_kind.size()) && impl_->id_kind[id] != 0,
              "token id {} is not in the vocabulary (vocab_size {})", id, vocab_size());
  return impl_->id_bytes[id];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, SpecialTokens special) const {
  std::string bytes;
  for (int32_t id : ids) {
    const std::string_view b = token_bytes(id);
    if (special == SpecialTokens::kSkip && impl_->id_kind[id] == 2) continue;
    bytes.append(b);
  }
  return utf8_lossy(bytes);
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  const std::string key(token);
  if (auto it = impl_->added_ids.find(key); it != impl_->added_ids.end()) return it->second;
  if (auto it = impl_->model.vocab().find(key); it != impl_->model.vocab().end()) return it->second;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= static_cast<int64_t>(impl_->id_kind.size()) || impl_->id_kind[id] == 0) return std::nullopt;
  return impl_->id_text[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < static_cast<int64_t>(impl_->id_kind.size()) && impl_->id_kind[id] == 2;
}

std::vector<std::string> Tokenizer::text_token_bytes(int64_t size) const {
  PLUMB_CHECK(size >= vocab_size(), "a vocabulary of {} ids is smaller than the tokenizer's {}", size, vocab_size());
  std::vector<std::string> bytes(static_cast<size_t>(size));
  for (size_t id = 0; id < impl_->id_kind.size(); ++id)
    if (impl_->id_kind[id] == 1) bytes[id] = impl_->id_bytes[id];
  return bytes;
}

int64_t Tokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->id_kind.size());
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, SpecialTokens special)
    : tokenizer_(&tokenizer), special_(special) {}

std::string StreamDecoder::push(int32_t id) {
  const std::string_view bytes = tokenizer_->token_bytes(id);
  if (special_ == SpecialTokens::kSkip && tokenizer_->is_special(id)) return {};
  pending_.append(bytes);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const Utf8Step step = utf8_step(std::string_view(pending_).substr(i));
    if (step.status == Utf8Status::kTruncated) break;  // the next token may complete this character
    if (step.status == Utf8Status::kComplete) {
      out.append(pending_, i, step.length);
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += step.length;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace plumb::tokenizer
