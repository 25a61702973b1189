// Encoding and decoding against Hugging Face `tokenizers`: every fixture text must give exactly HF's ids, and every
// id list exactly HF's text, for the real Qwen3 tokenizer, the tiny test tokenizer and the tiny variants that cover
// other normalizers, split behaviours and added-token flags.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "tokenizer/checks.h"
#include "tokenizer/fixture_io.h"
#include "tokenizer/tokenizer.h"

namespace plumb::tokenizer {
namespace {

using test::tokenizer_fixtures;

TEST(TokenizerTiny, EncodeMatchesHuggingFace) {
  const auto tok = Tokenizer::from_dir(tokenizer_fixtures() + "/tiny");
  check_encode_fixture(tok, tokenizer_fixtures() + "/tiny/encode.json");
}

TEST(TokenizerTiny, DecodeMatchesHuggingFace) {
  const auto tok = Tokenizer::from_dir(tokenizer_fixtures() + "/tiny");
  check_decode_fixture(tok, tokenizer_fixtures() + "/tiny/decode.json");
}

TEST(TokenizerTiny, Vocabulary) {
  const auto tok = Tokenizer::from_dir(tokenizer_fixtures() + "/tiny");
  EXPECT_EQ(tok.vocab_size(), 384);
  EXPECT_EQ(tok.token_id("<|im_end|>"), std::optional<int32_t>(2));
  EXPECT_TRUE(tok.is_special(2));
  EXPECT_EQ(tok.token_text(0), std::optional<std::string>("<|endoftext|>"));
  EXPECT_FALSE(tok.token_id("no such token").has_value());
  EXPECT_THROW(tok.decode({384}), Error);
  EXPECT_THROW(tok.decode({-1}), Error);
  EXPECT_THROW(tok.encode("\xC3"), Error);
}

TEST(TokenizerVariants, EncodeMatchesHuggingFace) {
  const std::string root = tokenizer_fixtures() + "/variants";
  size_t count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    SCOPED_TRACE(entry.path().filename().string());
    const auto tok = Tokenizer::from_dir(entry.path().string());
    check_encode_fixture(tok, entry.path().string() + "/encode.json");
    ++count;
  }
  EXPECT_GE(count, 8u);
}

class TokenizerQwen3 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (test::qwen3_tokenizer_dir().empty()) GTEST_SKIP() << "run scripts/setup.sh to fetch the Qwen3 tokenizer";
  }
  static const Tokenizer& tok() {
    static const Tokenizer t = Tokenizer::from_dir(test::qwen3_tokenizer_dir());
    return t;
  }
};

TEST_F(TokenizerQwen3, EncodeMatchesHuggingFace) {
  check_encode_fixture(tok(), tokenizer_fixtures() + "/qwen3/encode.json");
}

TEST_F(TokenizerQwen3, DecodeMatchesHuggingFace) {
  check_decode_fixture(tok(), tokenizer_fixtures() + "/qwen3/decode.json");
}

TEST_F(TokenizerQwen3, Vocabulary) {
  EXPECT_EQ(tok().token_id("<|im_start|>"), std::optional<int32_t>(151644));
  EXPECT_EQ(tok().token_id("<|im_end|>"), std::optional<int32_t>(151645));
  EXPECT_TRUE(tok().is_special(151645));
  EXPECT_FALSE(tok().is_special(151657));  // <tool_call> is an added token but not a special one
  EXPECT_EQ(tok().decode(tok().encode("<|im_start|>user\nhi<|im_end|>"), SpecialTokens::kSkip), "user\nhi");
}

}  // namespace
}  // namespace plumb::tokenizer
