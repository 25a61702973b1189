// The held-out set: texts, id lists and conversations made by tools/make_tokenizer_fixtures.py with a different seed
// from the fixtures, kept out of development and checked the same way.
#include <gtest/gtest.h>

#include "tokenizer/checks.h"
#include "tokenizer/fixture_io.h"

namespace plumb::tokenizer {
namespace {

const std::string& heldout() {
  static const std::string dir = test::tokenizer_fixtures() + "/heldout";
  return dir;
}

TEST(HeldOut, Tiny) {
  const std::string dir = test::tokenizer_fixtures() + "/tiny";
  const auto tok = Tokenizer::from_dir(dir);
  check_encode_fixture(tok, heldout() + "/tiny/encode.json");
  check_decode_fixture(tok, heldout() + "/tiny/decode.json");
  check_render_fixture(dir, heldout() + "/tiny/render.json", 15);
}

TEST(HeldOut, Qwen3) {
  if (test::qwen3_tokenizer_dir().empty()) GTEST_SKIP() << "run scripts/setup.sh to fetch the Qwen3 tokenizer";
  const auto tok = Tokenizer::from_dir(test::qwen3_tokenizer_dir());
  check_encode_fixture(tok, heldout() + "/qwen3/encode.json");
  check_decode_fixture(tok, heldout() + "/qwen3/decode.json");
  check_render_fixture(test::qwen3_tokenizer_dir(), heldout() + "/qwen3/render.json", 15);
}

TEST(HeldOut, Variants) {
  for (const char* name : {"added_token_flags", "gpt2_regex_prefix_space", "nfd_removed_inverted", "split_contiguous",
                           "split_inverted", "split_merged_next", "split_merged_previous", "split_removed"}) {
    SCOPED_TRACE(name);
    const auto tok = Tokenizer::from_dir(test::tokenizer_fixtures() + "/variants/" + name);
    check_encode_fixture(tok, heldout() + "/variants/" + name + "/encode.json");
  }
}

}  // namespace
}  // namespace plumb::tokenizer
