"""Training a Qwen-style byte-level BPE tokenizer with Hugging Face `tokenizers`: NFC normalizer, Qwen's Split
pre-tokenizer regex, then ByteLevel, and the special tokens <|endoftext|>, <|im_start|>, <|im_end|>.
Shared by tools/make_tokenizer_fixtures.py (the tiny test tokenizer) and tools/train_demo_model.py (the demo model's).
"""

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")


def train_qwen_style_bpe(texts, vocab_size):
    """A tokenizers.Tokenizer trained on the iterable `texts` with `vocab_size` tokens (specials included)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok
