#include "server/structured.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace plumb::server {

namespace {

const std::string kThinkClose = "</think>";

class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const grammar::CompiledGrammar> grammar, const tokenizer::Tokenizer& tokenizer,
                    bool in_reasoning)
      : matcher_(std::move(grammar)), tokenizer_(tokenizer), in_reasoning_(in_reasoning) {}

  bool mask(float* logits, int64_t vocab) const override {
    if (in_reasoning_) return true;
    return grammar::apply_mask(*matcher_.allowed(), logits, vocab);
  }

  bool allowed(uint32_t* bits, int64_t vocab) const override {
    if (!in_reasoning_) return grammar::mask_bits(*matcher_.allowed(), bits, vocab);
    const int64_t words = allowed_words(vocab);
    std::fill(bits, bits + words, ~0u);
    if (vocab % 32 != 0) bits[words - 1] = (1u << (vocab % 32)) - 1u;
    return true;
  }

  bool accept(int32_t id) override {
    if (!in_reasoning_) return matcher_.accept(id);
    // The reasoning ends at "</think>" however it was tokenized; only its last bytes need keeping.
    if (id >= 0 && id < tokenizer_.vocab_size() && tokenizer_.token_text(id)) tail_ += tokenizer_.token_bytes(id);
    if (tail_.ends_with(kThinkClose)) {
      in_reasoning_ = false;
    } else if (tail_.size() > kThinkClose.size()) {
      tail_.erase(0, tail_.size() - kThinkClose.size());
    }
    return true;
  }

  bool finished() const override { return !in_reasoning_ && matcher_.finished(); }

 private:
  grammar::Matcher matcher_;
  const tokenizer::Tokenizer& tokenizer_;
  bool in_reasoning_;
  std::string tail_;
};

}  // namespace

std::shared_ptr<TokenConstraint> StructuredOutputs::constraint(const StructuredOutput& output, bool opens_reasoning) {
  PLUMB_CHECK(text_.has_tokenizer(), "structured output needs the model's tokenizer, and this server has none");
  const tokenizer::Tokenizer& tokenizer = text_.tokenizer();
  std::call_once(built_, [&] {
    const int64_t size = std::max(vocab_size_, tokenizer.vocab_size());
    cache_ = std::make_unique<grammar::GrammarCache>(
        std::make_shared<const grammar::Vocabulary>(tokenizer.text_token_bytes(size), text_.eos_ids()));
  });
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  try {
    grammar = output.regex  ? cache_->regex(*output.regex)
              : output.gbnf ? cache_->gbnf(*output.gbnf)
                            : cache_->json_schema(output.schema, {output.prefix, output.suffix});
  } catch (const Error& e) {
    PLUMB_FAIL("{}: {}", output.source, e.what());
  }
  return std::make_shared<GrammarConstraint>(std::move(grammar), tokenizer, opens_reasoning);
}

}  // namespace plumb::server
