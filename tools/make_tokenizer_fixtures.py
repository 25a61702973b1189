#!/usr/bin/env python3
"""Makes the tokenizer fixtures: what Hugging Face `tokenizers` and `transformers` produce, for plumb's tests to match.

Run on a machine with tokenizers and transformers (the H200 machine has them):
    python3 tools/make_tokenizer_fixtures.py --qwen-dir .cache/qwen3-tokenizer --out tests/fixtures/tokenizer

It writes, under --out:
  tiny/tokenizer.json, tiny/tokenizer_config.json   a byte-level BPE trained here (vocab 384, Qwen-style specials)
  variants/<name>/tokenizer.json                    the tiny tokenizer with other normalizers, pre-tokenizers, merge
                                                    spellings and added-token flags, to cover what Qwen3 does not use
  {qwen3,tiny}/encode.json                          texts with their ids and decodings
  {qwen3,tiny}/decode.json                          random id lists with their decodings (with and without specials)
  {qwen3,tiny}/render.json                          conversations with the apply_chat_template prompt and its ids
  variants/<name>/encode.json                       texts with their ids for each variant
  heldout/...                                       the same kinds of files from another seed, only for final checks
  env.json                                          library versions and the chat-template Jinja settings seen
With --bench-corpus it also writes the benchmark text and times Hugging Face on it (see bench/tokenizer/).
The generators below use only `random.Random(seed)`, so the same seed gives the same texts everywhere.
"""
import argparse
import json
import os
import random
import time

from qwen_style_bpe import train_qwen_style_bpe

# ---------------------------------------------------------------------------------------------------------------------
# Texts

CODE_TEXTS = [
    "def f(x):\n    return x * 2\n", "int main() {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (let i = 0; i < n; ++i) { sum += a[i]; }", "<div class=\"x\">&amp;</div>", "SELECT * FROM t WHERE id = 1;",
    "#include <vector>\n#include <string>\n", "    if x:\n        pass\n    else:\n        raise ValueError('no')",
]
FIXED_TEXTS = [
    "", " ", "  ", "\n", "\n\n\n", "\t", " \t \n ", "\r\n", "a\r\nb\rc\n", "Hello world", "Hello, world!",
    "The quick brown fox jumps over the lazy dog.", "  leading spaces", "trailing spaces   ", "multiple   inner    spaces",
    "It's, I'm, you're, we've, they'll, he'd, IT'S, I'M, You'Re, WE'VE", "don't can't won't shouldn't",
    "'s 't 're 've 'm 'll 'd", "x's", "it'ſ 'K 'Ｓ", "rock 'n' roll", "1234567890", "3.14159 2.71828 -42 +7 1e10 0x1F",
    "Phone: +1 (555) 123-4567", "2026-11-29T19:22:00Z", "100,000,000.00 USD", "١٢٣٤٥ ٦٧٨٩٠", "Ⅻ ⅷ ½ ² ³ ⁴",
] + CODE_TEXTS + [
    "::: ;;; ... !!! ??? ~~~ ``` ''' \"\"\"", "a\u00a0b\u2003c\u3000d\u2028e\u2029f\u0085g", "\u000b\u000c\u001c",
    "你好，世界！", "我爱自然语言处理。今天天气很好。", "日本語のテキストです。カタカナとひらがな。", "한국어 문장입니다.",
    "中文English混合text测试123", "Ελληνικά κείμενα", "Русский текст, ёжик.", "ภาษาไทย", "हिन्दी भाषा", "தமிழ்",
    "مرحبا بالعالم", "שלום עולם", "العربية 123 עברית abc", "\u202eRTL override\u202c", "\u200fmark\u200e",
    "👋🌍", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "👍🏽 thumbs", "🇫🇷🇯🇵", "❤️ ❤", "🧑🏿‍💻", "*️⃣ #️⃣ 1️⃣",
    "e\u0301 vs \u00e9", "A\u030a \u212b \u00c5", "n\u0303o\u0308", "\u1100\u1161\u11a8", "Zalgo: Z\u0351\u0337a\u0336\u0327l\u0335g\u0334o",
    "\u0915\u094d\u0937", "ﬁ ﬂ ﬃ", "Ａｂｃ１２３", "ℌ𝔢𝔩𝔩𝔬 𝐁𝐨𝐥𝐝", "\ufb01nancial",
    "\ufffd replacement", "\ufeffBOM at start", "noncharacter \uffff \ufffe", "\U0010ffff \U000e0001", "\ue000 private",
    "\u00c0\u0080 looks overlong", "nul\u0000byte", "\u007f del \u0080 c1 \u009f", "\u200b zero \u200c width \u200d joiner",
    "<|endoftext|>", "<|im_start|>user\nHello<|im_end|>\n", "text<|im_end|>more", "<|im_start|><|im_start|>",
    "<|im_", "<|im_end", "im_end|>", "<<|endoftext|>>", "a <|endoftext|> b", " <|im_start|> ", "<|endoftext|>\n\n",
    "<think>\nreasoning\n</think>\n\nanswer", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "<|fim_prefix|>x<|fim_suffix|>",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", " " * 40 + "x", "\n" * 20, "-" * 100,
    "=" * 33 + "\n" + "=" * 33, "0" * 50, "ab" * 40, "The end." + " " * 7, "word\tword\t\tword",
    "https://example.com/path?q=1&r=%20#frag", "user@example.org", "C:\\Users\\name\\file.txt", "$HOME/.bashrc",
    "{\"key\": [1, 2, {\"nested\": null}], \"emoji\": \"😀\"}", "λx. x + 1", "∀x ∈ ℝ: x² ≥ 0", "E = mc²",
]

WORDS = ("the of and to in is you that it he was for on are as with his they at be this have from or one had by word "
         "but not what all were we when your can said there use an each which she do how their if will up other about "
         "out many then them these so some her would make like him into time has look two more write go see number no "
         "way could people my than first water been call who oil its now find long down day did get come made may part "
         "Tokenizer Model Qwen transformer attention gradient inference streaming").split()
PIECES = [
    "你好", "世界", "自然语言", "处理", "東京", "こんにちは", "안녕하세요", "مرحبا", "שלום", "Привет", "γειά", "नमस्ते",
    "😀", "👨‍👩‍👧", "🏳️‍🌈", "👍🏻", "🇩🇪", "e\u0301", "a\u0308", "o\u0302\u0323", "\u00e9", "ﬁ", "½", "①", "٣",
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</think>", "\t", "\n", "\r\n", "  ", "   ", "\u00a0",
    "\u3000", "'s", "'LL", "123", "4.5", "-7", "0x7f", "()", "[]", "{}", "=>", "::", "...", "!?", "#", "@", "$", "%",
    "def", "return", "self.x", "i++", "\\n", "\"q\"", "'", "`code`",
]
RANGES = [(0x20, 0x7e), (0xa0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff), (0x590, 0x6ff), (0x900, 0x97f),
          (0x1100, 0x11ff), (0x2000, 0x206f), (0x3040, 0x30ff), (0x4e00, 0x9fff), (0xac00, 0xd7a3), (0xe000, 0xe0ff),
          (0xfe00, 0xfe0f), (0xff00, 0xffef), (0x1f300, 0x1faff), (0x20000, 0x2a6df), (0x0, 0x1f)]


def random_text(rng):
    kind = rng.randrange(4)
    if kind == 0:  # prose
        n = rng.randint(1, 40)
        words = [rng.choice(WORDS) for _ in range(n)]
        text = " ".join(words)
        if rng.random() < 0.5:
            text = text[0].upper() + text[1:] + rng.choice([".", "!", "?", "...", ",", ""])
        return text
    if kind == 1:  # a mixture of pieces, words and separators
        parts = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            parts.append(rng.choice(PIECES) if r < 0.5 else rng.choice(WORDS) if r < 0.8 else str(rng.randint(0, 10**6)))
            parts.append(rng.choice(["", " ", "  ", "\n", "\t", " \n", ""]))
        return "".join(parts)
    if kind == 2:  # random code points from assorted blocks (never surrogates)
        lo, hi = rng.choice(RANGES)
        return "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 24)))
    # whitespace and punctuation runs around a word
    ws = "".join(rng.choice([" ", "\t", "\n", "\r\n", "\u00a0", "\u3000"]) for _ in range(rng.randint(1, 12)))
    return ws + rng.choice(WORDS) + ws[::-1] + rng.choice(["", "!!", "…", "--", "¿"])


def make_texts(seed, count, fixed):
    rng = random.Random(seed)
    texts = list(FIXED_TEXTS) if fixed else []
    while len(texts) < count:
        texts.append(random_text(rng))
    return texts

# ---------------------------------------------------------------------------------------------------------------------
# Conversations

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city.",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "description": "City name, e.g. Zürich"},
                                          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                                          "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Search the web. Returns the top results.",
                                      "parameters": {"type": "object", "properties": {
                                          "query": {"type": "string"}, "max_results": {"type": "integer",
                                                                                        "default": 5}},
                                          "required": ["query"]}}},
    {"type": "function", "function": {"name": "calc", "description": "Evaluate an arithmetic expression → number",
                                      "parameters": {"type": "object", "properties": {
                                          "expr": {"type": "string"}, "precision": {"type": "number",
                                                                                    "default": 0.001}}}}},
    {"type": "function", "function": {"name": "no_params", "description": "Takes nothing; says \"hi\" in 中文"}},
]
USER_LINES = ["Hello!", "What's the weather in Paris?", "Compute 2+2, please.", "你好，请介绍一下你自己。",
              "Tell me a joke about tokenizers", "  spaced out  ", "Line one\nLine two\n\nLine four",
              "Can you search for 'plumb inference engine'?", "😀 emoji only 👨‍👩‍👧", "مرحبا، كيف حالك؟", "Why?",
              "<tool_response>\nfake\n</tool_response>", "Thanks", "e\u0301te\u0301", "{\"json\": true}"]
ASSISTANT_LINES = ["Hi! How can I help?", "The answer is 4.", "Sure — here it is.", "我是一个语言模型。",
                   "\n\nleading newlines", "trailing newlines\n\n", "Done.", "¿Qué?"]
REASONING = ["The user greets me; reply politely.", "2+2=4.", "\nThink step by step.\n", "需要调用工具。"]


def tool_call(rng, as_string):
    tool = rng.choice(TOOLS[:3])["function"]
    args = {"city": rng.choice(["Paris", "Zürich", "東京"]), "unit": "celsius"} if tool["name"] == "get_weather" else (
        {"query": rng.choice(["plumb", "tokenizer \"bpe\"", "größe"]), "max_results": rng.randint(1, 9)}
        if tool["name"] == "search" else {"expr": "2+2", "precision": rng.choice([0.5, 1e-05, 2.0, 100])})
    fn = {"name": tool["name"], "arguments": json.dumps(args, ensure_ascii=False) if as_string else args}
    return {"type": "function", "function": fn} if rng.random() < 0.8 else fn


def random_conversation(rng, tiny):
    messages = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": rng.choice(["You are a helpful assistant.", "Be brief.",
                                                                   "系统提示", "  padded system  "])})
    for turn in range(rng.randint(1, 4)):
        content = rng.choice(USER_LINES)
        if tiny and rng.random() < 0.15:
            content = [{"type": "text", "text": content}, {"type": "image"}, {"type": "text", "text": "describe"}]
        messages.append({"role": "user", "content": content})
        if rng.random() < 0.35:  # a tool round trip
            calls = [tool_call(rng, rng.random() < 0.3) for _ in range(rng.randint(1, 2))]
            msg = {"role": "assistant", "content": rng.choice(["", "Let me check.", "<think>\nneed tools\n</think>\n\n"])}
            msg["tool_calls"] = calls
            messages.append(msg)
            for _ in calls:
                messages.append({"role": "tool", "content": rng.choice(["{\"temp\": 21}", "42", "no results", "晴"])})
        if turn < 3 and rng.random() < 0.8:
            msg = {"role": "assistant", "content": rng.choice(ASSISTANT_LINES)}
            r = rng.random()
            if r < 0.3:
                msg["reasoning_content"] = rng.choice(REASONING)
            elif r < 0.5:
                msg["content"] = "<think>\n" + rng.choice(REASONING) + "\n</think>\n\n" + msg["content"]
            elif r < 0.6:
                msg["reasoning_content"] = None
            messages.append(msg)
    kwargs = {"messages": messages}
    if rng.random() < 0.4:
        kwargs["tools"] = rng.sample(TOOLS, rng.randint(1, len(TOOLS)))
    kwargs["add_generation_prompt"] = rng.random() < 0.6
    r = rng.random()
    if r < 0.33:
        kwargs["enable_thinking"] = False
    elif r < 0.66:
        kwargs["enable_thinking"] = True
    return kwargs


def fixed_conversations():
    weather = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    return [
        {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True},
        {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True, "enable_thinking": False},
        {"messages": [{"role": "system", "content": "Sys"}, {"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": "Hello"}], "add_generation_prompt": False},
        {"messages": [{"role": "user", "content": "Weather?"},
                      {"role": "assistant", "content": "", "tool_calls": [weather]},
                      {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "22C"}],
         "tools": TOOLS, "add_generation_prompt": True},
        {"messages": [{"role": "system", "content": "With tools"}, {"role": "user", "content": "q"}],
         "tools": TOOLS[:1], "add_generation_prompt": True, "enable_thinking": True},
        {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "reasoning_content": "r1"},
                      {"role": "user", "content": "c"}, {"role": "assistant", "content": "d", "reasoning_content": "r2"}]},
        {"messages": [{"role": "user", "content": "a"},
                      {"role": "assistant", "content": "<think>\ninline\n</think>\n\nvisible"}],
         "add_generation_prompt": False},
        {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"},
                      {"role": "user", "content": "<tool_response>\nr\n</tool_response>"}],
         "add_generation_prompt": True},
        {"messages": [{"role": "system", "content": "only system"}], "add_generation_prompt": True},
        {"messages": [{"role": "user", "content": "unicode 😀 你好 e\u0301"}], "add_generation_prompt": True,
         "enable_thinking": False},
    ]


def make_conversations(seed, count, fixed, tiny):
    rng = random.Random(seed)
    convs = fixed_conversations() if fixed else []
    while len(convs) < count:
        convs.append(random_conversation(rng, tiny))
    return convs

# ---------------------------------------------------------------------------------------------------------------------
# Tokenizers


def train_tiny(texts):
    return train_qwen_style_bpe(texts, 384)


def variant_specs():
    """(name, edit) pairs; edit(tokenizer.json dict) turns the tiny tokenizer into the variant."""
    def added(content, tid, **flags):
        base = {"id": tid, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": False}
        base.update(flags)
        return base

    def gpt2(j):
        j["normalizer"] = None
        j["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
        j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]

    def flags(j):
        # ids as tokenizers assigns them on load: the vocab's id for a known content, else the next free one
        vocab, next_id = j["model"]["vocab"], len(j["model"]["vocab"])
        for content, flag in [("<mask>", {"lstrip": True, "special": True}), ("[R]", {"rstrip": True}),
                              ("word", {"single_word": True}), ("ǅx", {"normalized": True}),
                              ("ﬁne", {"normalized": True}), ("the", {"special": True})]:
            tid = vocab.get(content)
            if tid is None:
                tid, next_id = next_id, next_id + 1
            j["added_tokens"].append(added(content, tid, **flag))
        j["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "NFC"}]}

    def split(behavior, invert, pattern):
        def edit(j):
            j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": pattern, "behavior": behavior, "invert": invert},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
        return edit

    return [("gpt2_regex_prefix_space", gpt2), ("added_token_flags", flags),
            ("split_removed", split("Removed", False, {"String": " "})),
            ("split_merged_previous", split("MergedWithPrevious", False, {"Regex": r"\s+"})),
            ("split_merged_next", split("MergedWithNext", False, {"Regex": r"\p{P}"})),
            ("split_contiguous", split("Contiguous", False, {"Regex": r"\d"})),
            ("split_inverted", split("Isolated", True, {"Regex": r"\p{L}+"})),
            ("nfd_removed_inverted", lambda j: (split("Removed", True, {"Regex": r"\w+|[^\w\s]+"})(j),
                                                j.update(normalizer={"type": "NFD"})))]


def encode_records(tok, texts):
    out = []
    for t in texts:
        ids = tok.encode(t).ids
        out.append({"text": t, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
    return out


def decode_records(tok, seed, count):
    rng = random.Random(seed)
    size = tok.get_vocab_size(with_added_tokens=True)
    special = sorted(t.content for t in tok.get_added_tokens_decoder().values())
    out = []
    for _ in range(count):
        ids = [rng.randrange(size) for _ in range(rng.randint(1, 16))]
        if rng.random() < 0.3:
            ids.insert(rng.randrange(len(ids) + 1), tok.token_to_id(rng.choice(special)))
        out.append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=False),
                    "text_skip_special": tok.decode(ids, skip_special_tokens=True)})
    return out


LOADED_WITH = {}


def load_chat_tokenizer(path):
    """The transformers tokenizer of the folder; only its chat template and special tokens are used here."""
    try:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        LOADED_WITH[path] = type(tok).__name__
    except Exception as e:  # fall back to the generic fast tokenizer, which reads the same two files
        from transformers import PreTrainedTokenizerFast
        with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
        tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(path, "tokenizer.json"),
                                      chat_template=config["chat_template"], eos_token=config.get("eos_token"))
        LOADED_WITH[path] = f"PreTrainedTokenizerFast fallback after {e!r}"
    return tok


def render_records(chat_tok, raw_tok, convs):
    out = []
    for kwargs in convs:
        kw = dict(kwargs)
        messages = kw.pop("messages")
        text = chat_tok.apply_chat_template(messages, tokenize=False, **kw)
        out.append({"kwargs": kwargs, "rendered": text, "ids": raw_tok.encode(text).ids})
    return out


def dump(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def jinja_env_settings(chat_tok):
    try:
        return jinja_env_settings_or_raise(chat_tok)
    except Exception as e:  # the fixtures are still useful without this report
        return {"error": repr(e)}


def jinja_env_settings_or_raise(chat_tok):
    import transformers
    from transformers.utils import chat_template_utils as ctu
    compiled = ctu._compile_jinja_template(chat_tok.chat_template)
    env = compiled.environment
    return {"transformers": transformers.__version__, "trim_blocks": env.trim_blocks,
            "lstrip_blocks": env.lstrip_blocks, "keep_trailing_newline": env.keep_trailing_newline,
            "env_class": type(env).__name__, "extensions": sorted(env.extensions),
            "globals": sorted(k for k in env.globals if k in ("raise_exception", "strftime_now")),
            "filters_tojson": env.filters["tojson"].__module__}

# ---------------------------------------------------------------------------------------------------------------------
# Benchmark corpus and Hugging Face timing


def bench_corpus(seed=7, target_bytes=4 << 20):
    """Documents of 0.5-4 KB each: prose, code, CJK, numbers, emoji and whitespace in set proportions."""
    rng = random.Random(seed)
    code = CODE_TEXTS
    docs, total = [], 0
    while total < target_bytes:
        parts = []
        size = rng.randint(512, 4096)
        while sum(len(p.encode()) for p in parts) < size:
            r = rng.random()
            if r < 0.5:
                parts.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))) + ". ")
            elif r < 0.65:
                parts.append(rng.choice(code))
            elif r < 0.8:
                parts.append("".join(rng.choice(PIECES[:12]) for _ in range(rng.randint(3, 20))))
            elif r < 0.9:
                parts.append(" ".join(str(rng.randint(0, 10**rng.randint(1, 9))) for _ in range(rng.randint(2, 10))))
            else:
                parts.append(random_text(rng))
            parts.append(rng.choice(["\n", " ", "\n\n", ""]))
        doc = "".join(parts)
        docs.append(doc)
        total += len(doc.encode())
    return docs


def time_hf(tok, docs, repeats=3):
    nbytes = sum(len(d.encode()) for d in docs)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for d in docs:
            tok.encode(d)
        best = min(best, time.perf_counter() - start)
    return {"bytes": nbytes, "docs": len(docs), "best_s": best, "mb_per_s": nbytes / best / 1e6}

# ---------------------------------------------------------------------------------------------------------------------


def write_set(out, qwen_dir, seed, heldout):
    from tokenizers import Tokenizer
    sub = "heldout/" if heldout else ""
    texts = make_texts(seed, 120 if heldout else 240, fixed=not heldout)
    qwen_convs = make_conversations(seed + 200, 20 if heldout else 32, not heldout, tiny=False)
    tiny_convs = make_conversations(seed + 300, 20 if heldout else 32, not heldout, tiny=True)
    if heldout:  # held-out items must not also be fixtures
        seen = set(make_texts(1, 240, fixed=True))
        texts = [t for t in texts if t not in seen]
        seen = {json.dumps(c, sort_keys=True) for s in (201, 301) for c in make_conversations(s, 32, True, s == 301)}
        qwen_convs = [c for c in qwen_convs if json.dumps(c, sort_keys=True) not in seen]
        tiny_convs = [c for c in tiny_convs if json.dumps(c, sort_keys=True) not in seen]
    qwen = Tokenizer.from_file(os.path.join(qwen_dir, "tokenizer.json"))
    tiny_dir = os.path.join(out, "tiny")
    tiny = Tokenizer.from_file(os.path.join(tiny_dir, "tokenizer.json"))
    dump(f"{out}/{sub}qwen3/encode.json", encode_records(qwen, texts))
    dump(f"{out}/{sub}tiny/encode.json", encode_records(tiny, texts))
    dump(f"{out}/{sub}qwen3/decode.json", decode_records(qwen, seed + 100, 40))
    dump(f"{out}/{sub}tiny/decode.json", decode_records(tiny, seed + 100, 40))
    qwen_chat, tiny_chat = load_chat_tokenizer(qwen_dir), load_chat_tokenizer(tiny_dir)
    dump(f"{out}/{sub}qwen3/render.json", render_records(qwen_chat, qwen, qwen_convs))
    dump(f"{out}/{sub}tiny/render.json", render_records(tiny_chat, tiny, tiny_convs))
    for name, _ in variant_specs():
        vdir = os.path.join(out, "variants", name)
        vt = Tokenizer.from_file(os.path.join(vdir, "tokenizer.json"))
        extra = ["<mask> word [R]  x", "a  <mask>  b", "word words sword word.", "[R]   end", "ǅx Ǆx ǆx ﬁne fine",
                 "theme the other", " <mask>", "[R]"]
        dump(f"{out}/{sub}variants/{name}/encode.json", encode_records(vt, extra + texts[:60]))
    return qwen_chat


def make_tiny(out):
    from tokenizers import Tokenizer
    tiny = train_tiny(make_texts(11, 3000, fixed=True) + bench_corpus(seed=12, target_bytes=1 << 20))
    tiny_dir = os.path.join(out, "tiny")
    os.makedirs(tiny_dir, exist_ok=True)
    tiny.save(os.path.join(tiny_dir, "tokenizer.json"))
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "tiny_chat_template.jinja"), encoding="utf-8") as f:
        template = f.read()
    dump(os.path.join(tiny_dir, "tokenizer_config.json"), {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None, "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "unk_token": None, "add_bos_token": False, "clean_up_tokenization_spaces": False,
        "model_max_length": 4096, "chat_template": template})
    base = json.loads(Tokenizer.from_file(os.path.join(tiny_dir, "tokenizer.json")).to_str())
    for name, edit in variant_specs():
        j = json.loads(json.dumps(base))
        edit(j)
        vdir = os.path.join(out, "variants", name)
        os.makedirs(vdir, exist_ok=True)
        with open(os.path.join(vdir, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)
        Tokenizer.from_file(os.path.join(vdir, "tokenizer.json"))  # HF must accept what we test against


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qwen-dir", default=".cache/qwen3-tokenizer")
    ap.add_argument("--out", default="tests/fixtures/tokenizer")
    ap.add_argument("--bench-corpus", help="write the benchmark corpus (a JSON list of documents) here")
    ap.add_argument("--bench-only", action="store_true", help="only write the corpus (and time HF if it is there)")
    ap.add_argument("--bench-json", help="write Hugging Face's timing on the corpus here")
    args = ap.parse_args()
    if args.bench_corpus:
        docs = bench_corpus()
        dump(args.bench_corpus, docs)
        if args.bench_json:
            from tokenizers import Tokenizer
            qwen = Tokenizer.from_file(os.path.join(args.qwen_dir, "tokenizer.json"))
            result = time_hf(qwen, docs)
            result["rayon_threads"] = os.environ.get("RAYON_NUM_THREADS")
            import tokenizers
            result["tokenizers"] = tokenizers.__version__
            dump(args.bench_json, result)
            print("hf", result)
        if args.bench_only:
            return
    make_tiny(args.out)
    qwen_chat = write_set(args.out, args.qwen_dir, seed=1, heldout=False)
    write_set(args.out, args.qwen_dir, seed=2, heldout=True)
    settings = jinja_env_settings(qwen_chat)
    settings["loaded_with"] = LOADED_WITH
    dump(os.path.join(args.out, "env.json"), settings)


if __name__ == "__main__":
    main()
