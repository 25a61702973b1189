// Normalizer and pre-tokenizer of tokenizer.json (see pipeline.h). The split rules follow tokenizers'
// NormalizedString::split: the pattern's matches and the gaps between them cover the piece, the behaviour decides
// which of them join, and empty pieces are dropped.
#include "tokenizer/pipeline.h"

#include <utility>

#include "core/error.h"
#include "tokenizer/json_fields.h"

namespace plumb::tokenizer {
namespace {

constexpr std::string_view kFile = "tokenizer.json";
// The GPT-2 pattern that ByteLevel applies when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

NormalForm parse_normal_form(const nlohmann::json& j, const std::string& path) {
  const std::string type = json_type(j, kFile, path);
  if (type == "NFC") return NormalForm::kNFC;
  if (type == "NFD") return NormalForm::kNFD;
  if (type == "NFKC") return NormalForm::kNFKC;
  if (type == "NFKD") return NormalForm::kNFKD;
  PLUMB_FAIL("{}: {}.type '{}' is not supported (supported: NFC, NFD, NFKC, NFKD, Sequence, null)", kFile, path, type);
}

SplitBehavior parse_behavior(const nlohmann::json& j, const std::string& path) {
  const std::string name = json_string(j, "behavior", kFile, path);
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  PLUMB_FAIL("{}: {}.behavior '{}' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous",
             kFile, path, name);
}

// A piece [begin, end) of the text being split, and whether the pattern matched it.
struct Span {
  size_t begin, end;
  bool matched;
};

}  // namespace

Normalizer Normalizer::from_json(const nlohmann::json& j) {
  Normalizer n;
  if (j.is_null()) return n;
  const std::string type = json_type(j, kFile, "normalizer");
  if (type != "Sequence") {
    n.forms_.push_back(parse_normal_form(j, "normalizer"));
    return n;
  }
  const nlohmann::json& list = json_member(j, "normalizers", kFile, "normalizer");
  PLUMB_CHECK(list.is_array(), "{}: normalizer.normalizers must be a list", kFile);
  for (size_t i = 0; i < list.size(); ++i) {
    n.forms_.push_back(parse_normal_form(list[i], field_path("normalizer.normalizers", i)));
  }
  return n;
}

std::string Normalizer::apply(std::string_view text) const {
  std::string out(text);
  for (NormalForm form : forms_) out = unicode_normalize(out, form);
  return out;
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j) {
  PLUMB_CHECK(!j.is_null(),
              "{}: pre_tokenizer is null; plumb supports byte-level BPE, whose pre_tokenizer ends "
              "with ByteLevel",
              kFile);
  std::vector<std::pair<const nlohmann::json*, std::string>> components;
  if (json_type(j, kFile, "pre_tokenizer") == "Sequence") {
    const nlohmann::json& list = json_member(j, "pretokenizers", kFile, "pre_tokenizer");
    PLUMB_CHECK(list.is_array(), "{}: pre_tokenizer.pretokenizers must be a list", kFile);
    for (size_t i = 0; i < list.size(); ++i) {
      components.emplace_back(&list[i], field_path("pre_tokenizer.pretokenizers", i));
    }
  } else {
    components.emplace_back(&j, "pre_tokenizer");
  }
  PreTokenizer p;
  bool byte_level = false;
  for (const auto& [component, path] : components) {
    const std::string type = json_type(*component, kFile, path);
    PLUMB_CHECK(!byte_level, "{}: {}.type '{}' after ByteLevel is not supported (ByteLevel must come last)", kFile,
                path, type);
    if (type == "Split") {
      const nlohmann::json& pattern = json_member(*component, "pattern", kFile, path);
      SplitStep step{
          std::nullopt, {}, parse_behavior(*component, path), json_bool(*component, "invert", false, kFile, path)};
      if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
        step.regex.emplace(pattern["Regex"].get<std::string>(), path + ".pattern.Regex");
      } else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
        step.literal = pattern["String"].get<std::string>();
      } else {
        PLUMB_FAIL("{}: {}.pattern must be {{\"Regex\": \"...\"}} or {{\"String\": \"...\"}}", kFile, path);
      }
      p.steps_.push_back(std::move(step));
    } else if (type == "ByteLevel") {
      byte_level = true;
      p.add_prefix_space_ = json_bool(*component, "add_prefix_space", true, kFile, path);
      if (json_bool(*component, "use_regex", true, kFile, path)) p.byte_level_regex_.emplace(kGpt2Pattern, path);
    } else {
      PLUMB_FAIL("{}: {}.type '{}' is not supported (supported: Sequence, Split, ByteLevel)", kFile, path, type);
    }
  }
  PLUMB_CHECK(byte_level, "{}: pre_tokenizer has no ByteLevel step; plumb supports byte-level BPE only", kFile);
  return p;
}

void PreTokenizer::apply_split(const SplitStep& step, std::string_view piece,
                               std::vector<std::string_view>& out) const {
  // 1. Matches and the gaps between them, covering the piece.
  std::vector<Span> spans;
  if (piece.empty()) {
    spans.push_back({0, 0, false});
  } else {
    std::vector<std::pair<size_t, size_t>> matches;
    if (step.regex) {
      step.regex->find_all(piece, matches);
    } else if (!step.literal.empty()) {
      for (size_t at = piece.find(step.literal); at != std::string_view::npos;
           at = piece.find(step.literal, at + step.literal.size())) {
        matches.emplace_back(at, at + step.literal.size());
      }
    }
    size_t prev = 0;
    for (const auto& [begin, end] : matches) {
      if (prev != begin) spans.push_back({prev, begin, false});
      spans.push_back({begin, end, true});
      prev = end;
    }
    if (prev != piece.size()) spans.push_back({prev, piece.size(), false});
  }
  if (step.invert) {
    for (Span& s : spans) s.matched = !s.matched;
  }
  // 2. Join according to the behaviour; `keep` marks the pieces that survive.
  std::vector<Span> joined;
  bool previous_match = false;
  switch (step.behavior) {
    case SplitBehavior::kIsolated:
    case SplitBehavior::kRemoved:
      joined = spans;
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (s.matched == previous_match && !joined.empty()) {
          joined.back().end = s.end;
        } else {
          joined.push_back(s);
        }
        previous_match = s.matched;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.matched && !previous_match && !joined.empty()) {
          joined.back().end = s.end;
        } else {
          joined.push_back(s);
        }
        previous_match = s.matched;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->matched && !previous_match && !joined.empty()) {
          joined.back().begin = it->begin;
        } else {
          joined.push_back(*it);
        }
        previous_match = it->matched;
      }
      std::reverse(joined.begin(), joined.end());
      break;
  }
  for (const Span& s : joined) {
    const bool removed = step.behavior == SplitBehavior::kRemoved && s.matched;
    if (!removed && s.end > s.begin) out.push_back(piece.substr(s.begin, s.end - s.begin));
  }
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& words,
                         std::deque<std::string>& arena) const {
  std::vector<std::string_view> pieces{text}, next;
  for (const SplitStep& step : steps_) {
    next.clear();
    for (std::string_view piece : pieces) apply_split(step, piece, next);
    pieces.swap(next);
  }
  for (std::string_view piece : pieces) {
    if (add_prefix_space_ && (piece.empty() || piece.front() != ' ')) {
      std::string& prefixed = arena.emplace_back(1, ' ');
      prefixed.append(piece);
      piece = prefixed;
    }
    if (!byte_level_regex_) {
      if (!piece.empty()) words.push_back(piece);
      continue;
    }
    std::vector<std::pair<size_t, size_t>> matches;
    byte_level_regex_->find_all(piece, matches);
    size_t prev = 0;
    for (const auto& [begin, end] : matches) {
      if (prev != begin) words.push_back(piece.substr(prev, begin - prev));
      if (end > begin) words.push_back(piece.substr(begin, end - begin));
      prev = end;
    }
    if (prev != piece.size()) words.push_back(piece.substr(prev));
  }
}

}  // namespace plumb::tokenizer
