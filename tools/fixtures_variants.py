"""Derived fixtures for tools/make_fixtures.py: the same weights saved another way (shards, the other expert layout, the
multimodal wrapper), rounded to bf16/fp16, or quantised to fine-grained FP8.

Each maker takes (name, d, src) with src = (model, saved tensors, folder) of its source fixture and returns the
manifest entry. Variants whose logits are exactly the source's point their reference.json at the source's .npy files
(link_references) instead of copying them.
"""

import json
import math
import os
import re
import shutil
import tempfile

from fixtures_common import (FP8_BLOCK, FP8_MAX, HIDDEN, Q5M, expert_layout, family_classes, fused_to_per_expert,
                             import_attr, load_hf, model_info, natural_key, per_expert_to_fused, rounded_copy, save_hf,
                             save_st, sorted_sd, st_dtypes, torch)
from fixtures_reference import compare, link_references, write_references


# ---------------- sharded ----------------
def make_sharded(name, d, src, source_name="qwen3_next_moe"):
    model, sd, sdir = src
    shutil.copy(os.path.join(sdir, "config.json"), d)
    keys = list(sd.keys())
    total = sum(v.numel() * v.element_size() for v in sd.values())
    shards, cur, acc = [[] for _ in range(3)], 0, 0
    for k in keys:
        if acc >= total * (cur + 1) / 3 and cur < 2:
            cur += 1
        shards[cur].append(k)
        acc += sd[k].numel() * sd[k].element_size()
    wm = {}
    for i, ks in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-00003.safetensors"
        save_st({k: sd[k] for k in ks}, os.path.join(d, fn))
        for k in ks:
            wm[k] = fn
    json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(wm.items()))},
              open(os.path.join(d, "model.safetensors.index.json"), "w"), indent=2)
    link_references(sdir, d, f"Same tensors as {source_name}, split into 3 shards (same logits).")
    _, mcls = family_classes("qwen3_next")
    m2, _ = load_hf(mcls, d)
    rt = compare(m2, d)
    return dict(kind="derived", source=source_name, params=model_info(model)["params"],
                expert_layout=expert_layout(sd.keys()), shard_sizes=[len(s) for s in shards],
                hf_load_max_abs_diff=rt, check=f"hf_load={rt:.1e}")


# ---------------- other expert layout ----------------
def make_other_layout(name, d, src, source_name="qwen3_5_moe"):
    model, sd, sdir = src
    lay = expert_layout(sd.keys())
    if lay == "fused":
        nsd, new = fused_to_per_expert(sd), "per_expert"
    elif lay == "per_expert":
        nsd, new = per_expert_to_fused(sd), "fused"
    else:
        raise RuntimeError(f"layout {lay}")
    # self-check: converting back gives the identical tensors
    back = per_expert_to_fused(nsd) if new == "per_expert" else fused_to_per_expert(nsd)
    assert set(back) == set(sd) and all(torch.equal(back[k], sd[k]) for k in sd)
    shutil.copy(os.path.join(sdir, "config.json"), d)
    save_st(nsd, os.path.join(d, "model.safetensors"))
    link_references(sdir, d, f"Same weights as {source_name}, experts re-saved in the {new} layout "
                             f"(gate_up rows 0..I-1 = gate, I..2I-1 = up).", {"expert_layout": new})
    _, mcls = family_classes("qwen3_5_moe_text")
    try:
        m2, _ = load_hf(mcls, d)
        rt = compare(m2, d)
        chk = f"hf_load={rt:.1e}"
    except Exception as e:
        rt, chk = f"transformers could not load it: {type(e).__name__}: {str(e)[:200]}", "hf_load=n/a"
    return dict(kind="derived", source=source_name, params=model_info(model)["params"], expert_layout=new,
                hf_load_max_abs_diff=rt, check=chk)


# ---------------- multimodal wrapper ----------------
def make_wrapped(name, d, src, source_name="qwen3_5_moe"):
    model, sd, sdir = src
    WCfg = import_attr("Qwen3_5MoeConfig", Q5M)
    tcfg = json.load(open(os.path.join(sdir, "config.json")))
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, in_channels=3, patch_size=4,
                  spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=HIDDEN, num_position_embeddings=16)
    tdict = {k: v for k, v in tcfg.items() if k not in ("architectures", "transformers_version")}
    wcfg = WCfg(text_config=tdict, vision_config=vision, tie_word_embeddings=False)
    wcfg.architectures = ["Qwen3_5MoeForConditionalGeneration"]
    wcfg.save_pretrained(d)
    cj = json.load(open(os.path.join(d, "config.json")))
    assert cj["model_type"] == "qwen3_5_moe" and cj["text_config"]["model_type"] == "qwen3_5_moe_text", cj
    nsd = {}
    for k, v in sd.items():
        nsd[("model.language_model." + k[len("model."):]) if k.startswith("model.") else k] = v
    g = torch.Generator().manual_seed(77)
    nsd["model.visual.patch_embed.proj.weight"] = 0.02 * torch.randn(16, 3, 2, 4, 4, generator=g)
    nsd["model.visual.merger.linear_fc2.bias"] = 0.02 * torch.randn(HIDDEN, generator=g)
    save_st(sorted_sd(nsd), os.path.join(d, "model.safetensors"))
    link_references(sdir, d, f"Multimodal wrapper of {source_name} (text under text_config, tensors under "
                             "model.language_model.*, lm_head.weight unchanged, 2 dummy model.visual.* tensors); "
                             f"same logits as {source_name}.", {"model_type": "qwen3_5_moe"})
    try:
        Wm = import_attr("Qwen3_5MoeForConditionalGeneration", Q5M)
        m2, _ = load_hf(Wm, d, allow_missing=("model.visual",))
        rt = compare(m2, d)
        chk = f"hf_load={rt:.1e}"
    except Exception as e:
        rt, chk = f"transformers could not run it: {type(e).__name__}: {str(e)[:300]}", "hf_load=n/a"
    return dict(kind="derived", source=source_name, params=model_info(model)["params"],
                expert_layout=expert_layout(nsd.keys()), hf_load_max_abs_diff=rt, check=chk)


# ---------------- bf16 / fp16 ----------------
def make_lowp(dtype, dname, ref_seed, source_name="qwen3_next_moe", k=2):
    def fn(name, d, src):
        model, sd, sdir = src
        ref_model, lp = rounded_copy(model, dtype)
        nsd = save_hf(lp, d)
        dts = sorted(set(st_dtypes(os.path.join(d, "model.safetensors")).values()))
        cfgj = json.load(open(os.path.join(d, "config.json")))
        write_references(ref_model, d, cfgj.get("model_type"), expert_layout(nsd.keys()),
                         f"{source_name} weights rounded to {dname} and saved as {dname} (every tensor, 1-D "
                         f"params too); logits from an fp32 model holding the rounded values.", ref_seed, k=k)
        _, mcls = family_classes("qwen3_next")
        m2, _ = load_hf(mcls, d)
        rt = compare(m2, d)
        return dict(kind="derived", source=source_name, params=model_info(model)["params"],
                    expert_layout=expert_layout(nsd.keys()), tensor_dtypes=dts,
                    config_dtype=cfgj.get("dtype", cfgj.get("torch_dtype")),
                    hf_load_as_fp32_max_abs_diff=rt, check=f"hf_load={rt:.1e}")
    return fn


# ---------------- FP8 (fine-grained, block-wise e4m3 with bf16 scale_inv) ----------------
FP8_PATTERNS = [
    r"\.self_attn\.(q|k|v|o)_proj\.weight$",
    r"\.linear_attn\.(in_proj_qkvz|in_proj_qkv|in_proj_z|out_proj)\.weight$",
    r"\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight$",
    r"\.mlp\.shared_expert\.(gate|up|down)_proj\.weight$",
]


def is_fp8_target(k):
    return any(re.search(p, k) for p in FP8_PATTERNS)


def quant_fp8(w, bs=FP8_BLOCK):
    w = w.float()
    N, K = w.shape
    nb_n, nb_k = math.ceil(N / bs), math.ceil(K / bs)
    pad = torch.zeros(nb_n * bs, nb_k * bs)
    pad[:N, :K] = w
    blocks = pad.view(nb_n, bs, nb_k, bs)
    amax = blocks.abs().amax(dim=(1, 3))
    s = amax / FP8_MAX
    s = torch.where(amax > 0, s, torch.ones_like(s))  # all-zero block: scale 1, q = 0
    s_bf16 = s.to(torch.bfloat16)
    sf = s_bf16.float()
    q = (blocks / sf[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    q = q.view(nb_n * bs, nb_k * bs)[:N, :K].contiguous()
    S = sf.repeat_interleave(bs, 0)[:N].repeat_interleave(bs, 1)[:, :K]
    deq = q.float() * S
    return q, s_bf16.contiguous(), deq


def make_fp8(ref_seed, source_name="qwen3_next_moe", k=2):
    def fn(name, d, src):
        model, sd, sdir = src
        lay = expert_layout(sd.keys())
        pe = fused_to_per_expert(sd) if lay == "fused" else dict(sd)
        out_sd, deq_sd, qnames, edge = {}, {}, [], []
        for key, v in pe.items():
            if is_fp8_target(key) and v.ndim == 2:
                q, s, deq = quant_fp8(v)
                out_sd[key] = q
                out_sd[key[: -len(".weight")] + ".weight_scale_inv"] = s
                deq_sd[key] = deq
                qnames.append(key)
                if v.shape[0] % FP8_BLOCK or v.shape[1] % FP8_BLOCK:
                    edge.append(f"{key} {list(v.shape)} -> scale {list(s.shape)}")
            else:
                out_sd[key] = v.float()
                deq_sd[key] = v.float()
        assert edge, "no tensor with a partial FP8 block"
        save_st(sorted_sd(out_sd), os.path.join(d, "model.safetensors"))
        cfgj = json.load(open(os.path.join(sdir, "config.json")))
        not_conv = sorted({key[: -len(".weight")] for key, v in pe.items()
                           if key.endswith(".weight") and v.ndim == 2 and key not in qnames
                           and "embed_tokens" not in key}, key=natural_key)
        cfgj["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                       "weight_block_size": [FP8_BLOCK, FP8_BLOCK],
                                       "modules_to_not_convert": not_conv}
        json.dump(cfgj, open(os.path.join(d, "config.json"), "w"), indent=2)
        # reference model: fp32 with dequantized weights, loaded by transformers from a scratch checkpoint
        with tempfile.TemporaryDirectory() as td:
            shutil.copy(os.path.join(sdir, "config.json"), td)
            tsd = per_expert_to_fused(deq_sd) if lay == "fused" else deq_sd
            save_st(tsd, os.path.join(td, "model.safetensors"))
            _, mcls = family_classes("qwen3_next")
            ref_model, _ = load_hf(mcls, td)
        n_q = len(qnames)
        write_references(ref_model, d, cfgj.get("model_type"), "per_expert",
                         f"{source_name} with fine-grained FP8 (e4m3, {FP8_BLOCK}x{FP8_BLOCK} blocks, s = amax/448 "
                         f"rounded to bf16 and used for quantisation, weight_scale_inv = s as BF16); {n_q} weights "
                         f"quantized; everything else float32. Experts stored per expert. Logits from an fp32 model "
                         f"whose weights are float(q) * float(bf16 scale).", ref_seed, k=k)
        dts = {}
        for _, t in st_dtypes(os.path.join(d, "model.safetensors")).items():
            dts[t] = dts.get(t, 0) + 1
        return dict(kind="derived", source=source_name, params=model_info(model)["params"],
                    expert_layout="per_expert", quantized=qnames, edge_block_tensors=edge,
                    tensor_dtype_counts=dts, check=f"{n_q} fp8")
    return fn
