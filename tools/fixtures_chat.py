"""The fixture qwen3_next_chat for tools/make_fixtures.py: a random-weight Qwen3-Next in the real layout (3:1 Gated
DeltaNet : gated attention, several value heads per key head, GQA, 16 experts top 4 with a shared expert), saved in
BF16 with the tiny test tokenizer (tests/fixtures/tokenizer/tiny) and its chat template, and a reference like the other
fixtures', for tests that need text in and out. Its weights are random, so the text it prints is noise.
(models/default, the trained model, is made by tools/train_demo_model.py.)
"""

import json
import os
import shutil

from fixtures_common import L, F, build_model, expert_layout, family_classes, load_hf, model_info, rounded_copy, \
    save_hf, st_dtypes, torch, transformers
from fixtures_reference import compare, write_references

CHAT_SPEC = dict(
    family="qwen3_next", seed=2001,
    # weight scale (see init_weights): at 1.0 its float32-vs-float64 logit difference was 1.0e-4, so it was lowered
    # (tools/make_fixtures.py --search-scale) to the first scale that passes the conditioning criterion
    scale=0.6,
    cfg=dict(num_hidden_layers=8, layer_types=[L, L, L, F, L, L, L, F], num_attention_heads=4, num_key_value_heads=2,
             linear_num_key_heads=2, linear_num_value_heads=8, mlp_only_layers=[], intermediate_size=256,
             decoder_sparse_step=1, num_experts=16, num_experts_per_tok=4, norm_topk_prob=True,
             tie_word_embeddings=False, rope_theta=10000000.0),
)
# vocab_size comes from the tokenizer; intermediate_size above is unused (every layer is MoE) but config.json has it
CHAT_SIZES = dict(hidden_size=128, head_dim=32, linear_key_head_dim=16, linear_value_head_dim=16,
                  linear_conv_kernel_dim=4, moe_intermediate_size=8, shared_expert_intermediate_size=32,
                  max_position_embeddings=4096)
# hidden 128 instead of the other fixtures' 32: half the projection std keeps each layer's gain about the same
CHAT_STDS = dict(w_std=0.1, emb_std=0.5, conv_std=0.4)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def tokenizer_facts(tok_dir):
    """vocab size (vocab + added tokens not already in it), checked against `tokenizers` and transformers, and the
    eos / pad ids the tokenizer config names."""
    tj = json.load(open(os.path.join(tok_dir, "tokenizer.json")))
    tc = json.load(open(os.path.join(tok_dir, "tokenizer_config.json")))
    vocab = tj["model"]["vocab"]
    added = [a for a in tj.get("added_tokens", []) if a["content"] not in vocab]
    n = len(vocab) + len(added)
    facts = {"vocab_size": n, "vocab": len(vocab), "added_tokens_not_in_vocab": len(added)}
    from tokenizers import Tokenizer
    tk = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    facts["tokenizers_vocab_size_with_added"] = tk.get_vocab_size(with_added_tokens=True)
    assert facts["tokenizers_vocab_size_with_added"] == n, facts
    try:
        ht = transformers.AutoTokenizer.from_pretrained(tok_dir)
        facts["transformers_len_tokenizer"] = len(ht)
        facts["transformers_tokenizer_class"] = type(ht).__name__
        assert len(ht) == n, facts
    except AssertionError:
        raise
    except Exception as e:
        facts["transformers_len_tokenizer"] = f"n/a ({type(e).__name__}: {str(e)[:200]})"
    ids = {}
    for key in ("eos_token", "pad_token", "bos_token"):
        tok = tc.get(key)
        if isinstance(tok, dict):
            tok = tok.get("content")
        ids[key.replace("_token", "_token_id")] = tk.token_to_id(tok) if tok else None
        facts[key] = tok
    assert ids["eos_token_id"] is not None, "tokenizer_config names no eos_token"
    facts.update(ids)
    return facts


def make_chat_fixture(d, tok_dir, scale, ref_seed=20010):
    tf = tokenizer_facts(tok_dir)
    token_ids = {k: tf[k] for k in ("eos_token_id", "pad_token_id", "bos_token_id")}
    sizes = dict(CHAT_SIZES, vocab_size=tf["vocab_size"])
    model = build_model(CHAT_SPEC, scale, sizes, token_ids, CHAT_STDS)
    ref_model, lp = rounded_copy(model, torch.bfloat16)
    sd = save_hf(lp, d, keep_generation_config=True)
    gc_path = os.path.join(d, "generation_config.json")
    gc_source = "written by save_pretrained"
    if not os.path.exists(gc_path) or json.load(open(gc_path)).get("eos_token_id") != tf["eos_token_id"]:
        transformers.GenerationConfig(eos_token_id=tf["eos_token_id"], pad_token_id=tf["pad_token_id"],
                                      bos_token_id=tf["bos_token_id"]).save_pretrained(d)
        gc_source = "written by this script (GenerationConfig with the tokenizer's eos/pad)"
    for f in TOKENIZER_FILES:
        shutil.copy(os.path.join(tok_dir, f), d)
    cfgj = json.load(open(os.path.join(d, "config.json")))
    assert cfgj["vocab_size"] == tf["vocab_size"] and cfgj["eos_token_id"] == tf["eos_token_id"], cfgj
    dts = sorted(set(st_dtypes(os.path.join(d, "model.safetensors")).values()))
    assert dts == ["BF16"], dts
    layout = expert_layout(sd.keys())
    stop = [i for i in (tf["eos_token_id"], tf["pad_token_id"]) if i is not None]
    write_references(
        ref_model, d, cfgj["model_type"], layout,
        f"qwen3_next_chat fixture: qwen3_next random weights (seed {CHAT_SPEC['seed']}, weight scale {scale}), "
        f"saved as BF16; logits from an fp32 model holding the BF16 values, eager attention / eager experts / torch "
        f"GDN fallbacks. Greedy prompt chosen so the continuation holds no stop token ({stop}).",
        ref_seed, k=CHAT_SPEC["cfg"]["num_experts_per_tok"], vocab=tf["vocab_size"], avoid_ids=stop,
        extra={"weight_scale": scale})
    _, mcls = family_classes("qwen3_next")
    m2, _ = load_hf(mcls, d)
    rt = compare(m2, d)
    weights_bytes = os.path.getsize(os.path.join(d, "model.safetensors"))
    info = dict(kind="chat_fixture", family="qwen3_next", model_type=cfgj["model_type"],
                params=model_info(model)["params"], weight_scale=scale, expert_layout=layout, tensor_dtypes=dts,
                safetensors_bytes=weights_bytes, generation_config=gc_source, tokenizer=tf,
                hf_load_as_fp32_max_abs_diff=rt, check=f"hf_load={rt:.1e}",
                config_summary={k: cfgj.get(k) for k in (
                    "vocab_size", "hidden_size", "num_hidden_layers", "layer_types", "num_attention_heads",
                    "num_key_value_heads", "head_dim", "linear_num_key_heads", "linear_num_value_heads",
                    "linear_key_head_dim", "linear_value_head_dim", "num_experts", "num_experts_per_tok",
                    "moe_intermediate_size", "shared_expert_intermediate_size", "norm_topk_prob",
                    "tie_word_embeddings", "rope_parameters", "max_position_embeddings", "eos_token_id",
                    "pad_token_id", "dtype")})
    return info

