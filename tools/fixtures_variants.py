"""Derived fixtures for tools/make_fixtures.py: the same weights saved another way (shards, the other expert layout, the
multimodal wrapper), rounded to bf16/fp16, or quantised to fine-grained FP8 or to NVIDIA ModelOpt's NVFP4.

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


# ---------------- quantized fixtures: references from the dequantized weights ----------------
def write_dequantized_references(d, sdir, deq_sd, layout, notes, ref_seed, k):
    """Writes d's references from an fp32 model holding deq_sd (per-expert names) under the source's config, loaded
    by transformers from a scratch checkpoint; returns how many of d's stored tensors have each dtype."""
    with tempfile.TemporaryDirectory() as td:
        shutil.copy(os.path.join(sdir, "config.json"), td)
        save_st(per_expert_to_fused(deq_sd) if layout == "fused" else deq_sd, os.path.join(td, "model.safetensors"))
        _, mcls = family_classes("qwen3_next")
        ref_model, _ = load_hf(mcls, td)
    model_type = json.load(open(os.path.join(d, "config.json"))).get("model_type")
    write_references(ref_model, d, model_type, "per_expert", notes, ref_seed, k=k)
    counts = {}
    for t in st_dtypes(os.path.join(d, "model.safetensors")).values():
        counts[t] = counts.get(t, 0) + 1
    return counts


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
        n_q = len(qnames)
        dts = write_dequantized_references(
            d, sdir, deq_sd, lay, f"{source_name} with fine-grained FP8 (e4m3, {FP8_BLOCK}x{FP8_BLOCK} blocks, s = "
            f"amax/448 rounded to bf16 and used for quantisation, weight_scale_inv = s as BF16); {n_q} weights "
            f"quantized; everything else float32. Experts stored per expert. Logits from an fp32 model whose weights "
            f"are float(q) * float(bf16 scale).", ref_seed, k)
        return dict(kind="derived", source=source_name, params=model_info(model)["params"],
                    expert_layout="per_expert", quantized=qnames, edge_block_tensors=edge,
                    tensor_dtype_counts=dts, check=f"{n_q} fp8")
    return fn


# ---------------- NVFP4 (ModelOpt: E2M1 pairs, E4M3 scale per 16 along K, F32 weight scale) ----------------
# The projections ModelOpt's NVFP4 recipe quantizes in these models; the router and the shared expert's gate stay
# unquantized, and so does every module exclude_modules names (NVFP4_EXCLUDE below).
NVFP4_PATTERNS = [
    r"\.self_attn\.(q|k|v|o)_proj\.weight$",
    r"\.linear_attn\.(in_proj_qkvz|in_proj_ba|in_proj_qkv|in_proj_z|in_proj_b|in_proj_a|out_proj)\.weight$",
    r"\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight$",
    r"\.mlp\.shared_expert\.(gate|up|down)_proj\.weight$",
]
# As NVIDIA's builds write them: names and globs ('*' any run of characters). One GDN layer is left in the source's
# precision by a glob, as some published builds keep the linear-attention layers.
NVFP4_EXCLUDE = ["lm_head", "model.layers.*.mlp.gate", "model.layers.*.mlp.shared_expert_gate",
                 "model.layers.0.linear_attn*"]
NVFP4_GROUP = 16
E2M1_MAGNITUDES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]  # codes 0-7; bit 3 is the sign


def glob_match(pattern, text):
    return re.fullmatch(".*".join(re.escape(part) for part in pattern.split("*")), text) is not None


def quant_nvfp4(w):
    """w [N, K] -> (packed uint8 [N, K/2], E4M3 group scales [N, K/16], F32 weight scale, dequantized [N, K]).
    ModelOpt's recipe: weight scale = amax / (6 · 448); a group's scale = its amax / 6 / weight scale, rounded to
    E4M3; each value rounded to the nearest E2M1 of value / (group scale · weight scale)."""
    w = w.float()
    n, k = w.shape
    amax = w.abs().max()
    scale_2 = (amax / (6.0 * FP8_MAX)) if amax > 0 else torch.tensor(1.0)
    scale_2 = scale_2.float().reshape(())
    groups = w.view(n, k // NVFP4_GROUP, NVFP4_GROUP)
    gs = (groups.abs().amax(dim=2) / 6.0 / scale_2).clamp(max=FP8_MAX).to(torch.float8_e4m3fn)
    gsf = gs.float()
    denom = (gsf * scale_2)[:, :, None]
    x = torch.where(denom > 0, groups / torch.where(denom > 0, denom, torch.ones_like(denom)), torch.zeros_like(groups))
    table = torch.tensor(E2M1_MAGNITUDES)
    idx = (x.abs()[..., None] - table).abs().argmin(dim=-1)
    codes = (idx | torch.where((x < 0) & (idx > 0), 8, 0)).to(torch.uint8).view(n, k)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).contiguous()
    return packed, gs.contiguous(), scale_2, dequantize_nvfp4(packed, gs, scale_2)


def dequantize_nvfp4(packed, gs, scale_2):
    """The float32 values a stored NVFP4 weight stands for: (e2m1 · float(e4m3 group scale)) · weight scale, the
    order plumb's reference and kernels use. packed [N, K/2] uint8, low nibble first; gs [N, K/16]."""
    n = packed.shape[0]
    codes = torch.stack([packed & 0xF, packed >> 4], dim=2).view(n, -1).long()
    table = torch.tensor(E2M1_MAGNITUDES)
    values = table[codes & 7] * torch.where(codes >= 8, -1.0, 1.0)
    scales = gs.float().repeat_interleave(NVFP4_GROUP, dim=1)
    return (values * scales) * scale_2.float()


def make_nvfp4(ref_seed, source_name="qwen3_next_moe", k=2):
    def fn(name, d, src):
        model, sd, sdir = src
        lay = expert_layout(sd.keys())
        pe = fused_to_per_expert(sd) if lay == "fused" else dict(sd)
        out_sd, deq_sd, qnames, kept = {}, {}, [], []
        for key, v in pe.items():
            module = key[: -len(".weight")] if key.endswith(".weight") else key
            target = any(re.search(p, key) for p in NVFP4_PATTERNS) and v.ndim == 2
            if target and not any(glob_match(p, module) for p in NVFP4_EXCLUDE) and v.shape[1] % NVFP4_GROUP == 0:
                packed, gs, scale_2, deq = quant_nvfp4(v)
                out_sd[key] = packed
                out_sd[module + ".weight_scale"] = gs
                out_sd[module + ".weight_scale_2"] = scale_2
                out_sd[module + ".input_scale"] = torch.tensor(1.0 / (6.0 * FP8_MAX))  # activations: unused here
                deq_sd[key] = deq
                qnames.append(key)
            else:
                if target:
                    kept.append(module)
                out_sd[key] = v.float()
                deq_sd[key] = v.float()
            if key.endswith(".self_attn.k_proj.weight"):  # the FP8 KV cache scales NVIDIA's builds carry
                attn = key[: -len(".k_proj.weight")]
                out_sd[attn + ".k_proj.k_scale"] = torch.tensor(0.0312)
                out_sd[attn + ".v_proj.v_scale"] = torch.tensor(0.0273)
        assert qnames and kept, "an NVFP4 fixture needs quantized and excluded projections"
        save_st(sorted_sd(out_sd), os.path.join(d, "model.safetensors"))
        shutil.copy(os.path.join(sdir, "config.json"), d)
        exclude = NVFP4_EXCLUDE + sorted({m for m in kept if not any(glob_match(p, m) for p in NVFP4_EXCLUDE)},
                                         key=natural_key)
        json.dump({"producer": {"name": "modelopt", "version": "0.37.0"},
                   "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": NVFP4_GROUP,
                                    "exclude_modules": exclude}},
                  open(os.path.join(d, "hf_quant_config.json"), "w"), indent=2)
        dts = write_dequantized_references(
            d, sdir, deq_sd, lay, f"{source_name} with ModelOpt NVFP4 (E2M1 pairs, low nibble first; E4M3 scale per "
            f"16 along K; F32 weight_scale_2 = amax/(6*448)); {len(qnames)} weights quantized, the modules of "
            f"hf_quant_config.json's exclude_modules kept in float32; FP8 KV-cache scales present (the cache stays "
            f"unquantized). Logits from an fp32 model whose weights are (e2m1 * float(e4m3)) * weight_scale_2.",
            ref_seed, k)
        return dict(kind="derived", source=source_name, params=model_info(model)["params"],
                    expert_layout="per_expert", quantized=qnames, excluded=exclude, tensor_dtype_counts=dts,
                    check=f"{len(qnames)} nvfp4")
    return fn
