// Chat-template rendering against transformers' apply_chat_template: every fixture conversation must render to
// exactly transformers' prompt, and that prompt must encode to exactly Hugging Face's ids.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/checks.h"
#include "tokenizer/fixture_io.h"
#include "tokenizer/tokenizer.h"

namespace plumb::tokenizer {
namespace {

using test::tokenizer_fixtures;

TEST(ChatTemplateTiny, RenderMatchesTransformers) {
  check_render_fixture(tokenizer_fixtures() + "/tiny", tokenizer_fixtures() + "/tiny/render.json", 20);
}

TEST(ChatTemplateTiny, SpecialTokensFromConfig) {
  const auto tmpl = ChatTemplate::from_dir(tokenizer_fixtures() + "/tiny");
  EXPECT_EQ(tmpl.eos_token(), std::optional<std::string>("<|im_end|>"));
  EXPECT_FALSE(tmpl.bos_token().has_value());
}

TEST(ChatTemplateQwen3, RenderMatchesTransformers) {
  if (test::qwen3_tokenizer_dir().empty()) GTEST_SKIP() << "run scripts/setup.sh to fetch the Qwen3 tokenizer";
  check_render_fixture(test::qwen3_tokenizer_dir(), tokenizer_fixtures() + "/qwen3/render.json", 20);
}

}  // namespace
}  // namespace plumb::tokenizer
