// Comparisons of plumb's tokenizer and chat templates with the Hugging Face fixture files (see checks.h).
#include "tokenizer/checks.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/fixture_io.h"
#include "tokenizer/utf8.h"

namespace plumb::tokenizer {
namespace {

std::string shown(const std::string& text) {
  return nlohmann::json(text).dump();
}

}  // namespace

// Checks encode, decode and streaming decode of every record of an encode.json fixture.
void check_encode_fixture(const Tokenizer& tok, const std::string& path) {
  const auto records = test::read_json(path);
  ASSERT_GT(records.size(), 0u) << path;
  size_t failures = 0;
  for (const auto& r : records) {
    const std::string text = r["text"];
    const std::vector<int32_t> expected = r["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> ids = tok.encode(text);
    if (ids != expected && failures++ < 10) {
      ADD_FAILURE() << path << ": ids differ for " << shown(text) << "\n  got      " << nlohmann::json(ids).dump()
                    << "\n  expected " << nlohmann::json(expected).dump();
    }
    const std::string decoded = r["decoded"];
    EXPECT_EQ(tok.decode(expected), decoded) << path << ": " << shown(text);
    // Round trip: decoding the ids gives the NFC form of the text back when the tokenizer normalizes with NFC.
    StreamDecoder stream(tok);
    std::string streamed;
    for (int32_t id : expected) {
      const std::string piece = stream.push(id);
      EXPECT_TRUE(utf8_valid(piece)) << path << ": stream piece not whole characters for " << shown(text);
      streamed += piece;
    }
    streamed += stream.flush();
    EXPECT_EQ(streamed, decoded) << path << ": streamed text differs for " << shown(text);
  }
  EXPECT_EQ(failures, 0u) << path;
}

void check_decode_fixture(const Tokenizer& tok, const std::string& path) {
  for (const auto& r : test::read_json(path)) {
    const std::vector<int32_t> ids = r["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.decode(ids), r["text"].get<std::string>()) << path << " " << r["ids"].dump();
    EXPECT_EQ(tok.decode(ids, SpecialTokens::kSkip), r["text_skip_special"].get<std::string>())
        << path << " " << r["ids"].dump();
    for (SpecialTokens mode : {SpecialTokens::kKeep, SpecialTokens::kSkip}) {
      StreamDecoder stream(tok, mode);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.push(id);
      streamed += stream.flush();
      EXPECT_EQ(streamed, tok.decode(ids, mode)) << path << " " << r["ids"].dump();
    }
  }
}

void check_render_fixture(const std::string& dir, const std::string& fixture, size_t min_records) {
  const auto tmpl = ChatTemplate::from_dir(dir);
  const auto tok = Tokenizer::from_dir(dir);
  const auto records = test::read_json(fixture);
  ASSERT_GE(records.size(), min_records) << fixture;
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    std::string rendered;
    try {
      rendered = render_chat(tmpl, r["kwargs"]);
    } catch (const Error& e) {
      ADD_FAILURE() << fixture << " #" << i << ": " << e.what();
      continue;
    }
    EXPECT_EQ(rendered, r["rendered"].get<std::string>()) << fixture << " #" << i << "\n" << r["kwargs"].dump();
    EXPECT_EQ(tok.encode(rendered), r["ids"].get<std::vector<int32_t>>()) << fixture << " #" << i;
  }
}

}  // namespace plumb::tokenizer
