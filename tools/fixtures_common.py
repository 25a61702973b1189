"""Shared pieces of tools/make_fixtures.py: the torch set-up, sizes, configs, weight initialisation and checkpoint I/O.

Importing this module fixes the environment (no CUDA, offline, deterministic float32 torch on one thread) before torch
is imported, so import it before anything else that imports torch.
"""

import copy
import importlib
import json
import os
import re

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402,F401  (re-exported)
import torch  # noqa: E402

torch.set_default_dtype(torch.float32)
torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

import safetensors  # noqa: E402
import safetensors.torch  # noqa: E402
import transformers  # noqa: E402

# ----------------------------------------------------------------------------------------------------------------
# sizes shared by every fixture (small on purpose: the whole fixture tree must stay a few MB)
# ----------------------------------------------------------------------------------------------------------------
VOCAB = 200  # not a multiple of 32/64: exercises vocab tails
HIDDEN = 32
N_HEADS = 4
HEAD_DIM = 32  # partial_rotary_factor 0.25 -> 8 rotary dims
LIN_DK = 16
LIN_DV = 24  # dk != dv catches transposes
CONV_K = 4
N_EXPERTS = 8
MOE_I = 16
SHARED_I = 48  # 48 = 32 + 16: FP8 32x32 blocks have a partial edge block
MAX_POS = 512
EPS = 1e-6
PREFILL_LENS = [1, 7, 64, 65, 130]
PROMPT_LEN = 9
GEN_TOKENS = 24
MIN_GAP = 1e-3
FP8_BLOCK = 32
FP8_MAX = 448.0

# The fixture sizes as one dict; a model of other sizes (the default model) passes its own to make_config.
FIXTURE_SIZES = dict(vocab_size=VOCAB, hidden_size=HIDDEN, head_dim=HEAD_DIM, linear_key_head_dim=LIN_DK,
                     linear_value_head_dim=LIN_DV, linear_conv_kernel_dim=CONV_K, moe_intermediate_size=MOE_I,
                     shared_expert_intermediate_size=SHARED_I, max_position_embeddings=MAX_POS)

L, F = "linear_attention", "full_attention"

# gaussian std for 2-D weights; the embedding is larger so tied logits are not flat. A model's `scale` multiplies all
# three (see init_weights); 1-D parameters and the gated-delta-rule decay parameters are not scaled.
W_STD = 0.2
EMB_STD = 0.5
CONV_STD = 0.4


def log(*a):
    print(*a, flush=True)


def import_attr(name, modules):
    if hasattr(transformers, name):
        return getattr(transformers, name)
    for m in modules:
        try:
            mod = importlib.import_module(m)
            if hasattr(mod, name):
                return getattr(mod, name)
        except Exception:
            pass
    raise ImportError(name)


QN = ["transformers.models.qwen3_next.modeling_qwen3_next", "transformers.models.qwen3_next.configuration_qwen3_next"]
Q5 = ["transformers.models.qwen3_5.modeling_qwen3_5", "transformers.models.qwen3_5.configuration_qwen3_5"]
Q5M = ["transformers.models.qwen3_5_moe.modeling_qwen3_5_moe",
       "transformers.models.qwen3_5_moe.configuration_qwen3_5_moe"]


def family_classes(family):
    if family == "qwen3_next":
        return import_attr("Qwen3NextConfig", QN), import_attr("Qwen3NextForCausalLM", QN)
    if family == "qwen3_5_text":
        return import_attr("Qwen3_5TextConfig", Q5), import_attr("Qwen3_5ForCausalLM", Q5)
    if family == "qwen3_5_moe_text":
        return import_attr("Qwen3_5MoeTextConfig", Q5M), import_attr("Qwen3_5MoeForCausalLM", Q5M)
    raise ValueError(family)


def make_config(family, c, sizes=None, token_ids=None):
    """c: the per-model architecture choices (a SOURCES cfg); sizes: FIXTURE_SIZES or another model's sizes;
    token_ids: {bos,eos,pad}_token_id (None for the fixtures)."""
    s = dict(FIXTURE_SIZES, **(sizes or {}))
    cfg_cls, _ = family_classes(family)
    rope = {"rope_type": "default", "rope_theta": float(c["rope_theta"]), "partial_rotary_factor": 0.25}
    if family != "qwen3_next":
        # M-RoPE sections over the 4 rotary frequency slots; for text all three position rows are equal
        rope.update({"mrope_section": [2, 1, 1], "mrope_interleaved": True})
    ids = dict(pad_token_id=None, bos_token_id=None, eos_token_id=None)
    ids.update(token_ids or {})
    kw = dict(
        vocab_size=s["vocab_size"], hidden_size=s["hidden_size"], num_hidden_layers=c["num_hidden_layers"],
        num_attention_heads=c["num_attention_heads"], num_key_value_heads=c["num_key_value_heads"],
        head_dim=s["head_dim"], hidden_act="silu", max_position_embeddings=s["max_position_embeddings"],
        initializer_range=W_STD, rms_norm_eps=EPS, use_cache=True, tie_word_embeddings=c["tie_word_embeddings"],
        rope_parameters=rope, attention_bias=False, attention_dropout=0.0,
        linear_conv_kernel_dim=s["linear_conv_kernel_dim"], linear_key_head_dim=s["linear_key_head_dim"],
        linear_value_head_dim=s["linear_value_head_dim"], linear_num_key_heads=c["linear_num_key_heads"],
        linear_num_value_heads=c["linear_num_value_heads"], layer_types=list(c["layer_types"]), **ids,
    )
    if family in ("qwen3_next", "qwen3_5_text"):
        kw["intermediate_size"] = c["intermediate_size"]
    if family in ("qwen3_next", "qwen3_5_moe_text"):
        kw.update(num_experts=c["num_experts"], num_experts_per_tok=c["num_experts_per_tok"],
                  moe_intermediate_size=s["moe_intermediate_size"],
                  shared_expert_intermediate_size=s["shared_expert_intermediate_size"])
    if family == "qwen3_next":
        kw.update(decoder_sparse_step=c["decoder_sparse_step"], mlp_only_layers=list(c["mlp_only_layers"]),
                  norm_topk_prob=c["norm_topk_prob"])
    cfg = cfg_cls(**kw)
    try:
        cfg.dtype = torch.float32
    except Exception:
        pass
    # the torch fallback paths, eager attention and eager (python loop) experts
    for attr, val in (("_attn_implementation", "eager"), ("_experts_implementation", "eager")):
        try:
            setattr(cfg, attr, val)
        except Exception as e:
            log(f"  note: could not set {attr}: {e}")
    return cfg


def force_eager(model):
    for fn, val in (("set_attn_implementation", "eager"), ("set_experts_implementation", "eager")):
        if hasattr(model, fn):
            try:
                getattr(model, fn)(val)
            except Exception as e:
                log(f"  note: {fn} failed: {e}")
    for mod in model.modules():
        c = getattr(mod, "config", None)
        if c is not None:
            for attr in ("_attn_implementation", "_experts_implementation"):
                try:
                    setattr(c, attr, "eager")
                except Exception:
                    pass
    return model


# ----------------------------------------------------------------------------------------------------------------
# weights
# ----------------------------------------------------------------------------------------------------------------
def init_weights(model, seed, scale=1.0, w_std=W_STD, emb_std=EMB_STD, conv_std=CONV_STD):
    """Deterministic re-initialisation of every parameter (2-D/3-D weights scaled up, 1-D params perturbed).

    `scale` multiplies the std of every 2-D/3-D weight (projections, experts, routers, conv, embedding, lm_head); the
    random draws themselves do not depend on it, so a model at scale s is exactly s times the one at scale 1 in those
    tensors and identical elsewhere."""
    g = torch.Generator().manual_seed(seed)
    seen = set()
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied params appear once
            if id(p) in seen:
                continue
            seen.add(id(p))
            shape = p.shape
            if name.endswith("linear_attn.A_log"):
                v = torch.rand(shape, generator=g) * 5.0 - 4.0  # U(-4, 1): A in [0.018, 2.7]
                v[0] = -4.0 + 0.5 * torch.rand((), generator=g)  # head 0: slow decay, memory spans chunks
            elif name.endswith("linear_attn.dt_bias"):
                v = torch.randn(shape, generator=g) * 0.5
            elif name.endswith("linear_attn.norm.weight"):
                v = 1.0 + 0.3 * torch.randn(shape, generator=g)  # plain (non-offset) gated norm weight
            elif p.ndim == 1:
                if not (name.endswith("norm.weight") or name.endswith("layernorm.weight")):
                    raise RuntimeError(f"unexpected 1-D parameter {name}")
                v = 0.3 * torch.randn(shape, generator=g)  # zero-centred: effective multiplier 1 + w
            elif "conv1d" in name:
                v = (scale * conv_std) * torch.randn(shape, generator=g)
            elif "embed_tokens" in name:
                v = (scale * emb_std) * torch.randn(shape, generator=g)
            else:
                v = (scale * w_std) * torch.randn(shape, generator=g)
            p.copy_(v.to(p.dtype))


def model_info(model):
    return dict(params=int(sum(p.numel() for p in set(model.parameters()))))


def build_model(spec, scale=1.0, sizes=None, token_ids=None, stds=None):
    """A random model of spec (family, seed, cfg); `scale` as in init_weights; stds overrides w_std/emb_std/conv_std."""
    s = dict(FIXTURE_SIZES, **(sizes or {}))
    cfg_cls, model_cls = family_classes(spec["family"])
    cfg = make_config(spec["family"], spec["cfg"], sizes, token_ids)
    torch.manual_seed(spec["seed"])
    model = model_cls(cfg)
    model = force_eager(model).float().eval()
    init_weights(model, spec["seed"], scale, **(stds or {}))
    if cfg.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "lm_head not tied"
    else:
        assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    inv = model.model.rotary_emb.inv_freq
    assert inv.numel() * 2 == int(s["head_dim"] * 0.25), f"rotary dims {inv.numel() * 2}"
    return model


# ----------------------------------------------------------------------------------------------------------------
# checkpoint-level helpers (operate on the tensors as saved on disk)
# ----------------------------------------------------------------------------------------------------------------
RE_PER_EXPERT = re.compile(r"\.experts\.\d+\.(gate|up|down)_proj\.weight$")
RE_FUSED = re.compile(r"\.experts\.(gate_up_proj|down_proj)$")


def natural_key(s):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def sorted_sd(sd):
    return dict(sorted(sd.items(), key=lambda kv: natural_key(kv[0])))


def expert_layout(keys):
    pe = any(RE_PER_EXPERT.search(k) for k in keys)
    fu = any(RE_FUSED.search(k) for k in keys)
    if pe and fu:
        return "mixed"
    return "per_expert" if pe else ("fused" if fu else None)


def fused_to_per_expert(sd):
    out = {}
    for k, v in sd.items():
        m = re.match(r"^(.*\.experts)\.gate_up_proj$", k)
        if m:
            E, I2, H = v.shape
            I = I2 // 2
            for e in range(E):
                out[f"{m.group(1)}.{e}.gate_proj.weight"] = v[e, :I, :].clone().contiguous()
                out[f"{m.group(1)}.{e}.up_proj.weight"] = v[e, I:, :].clone().contiguous()
            continue
        m = re.match(r"^(.*\.experts)\.down_proj$", k)
        if m:
            for e in range(v.shape[0]):
                out[f"{m.group(1)}.{e}.down_proj.weight"] = v[e].clone().contiguous()
            continue
        out[k] = v
    return sorted_sd(out)


def per_expert_to_fused(sd):
    groups = {}
    out = {}
    for k, v in sd.items():
        m = re.match(r"^(.*\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$", k)
        if m:
            groups.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = v
            continue
        out[k] = v
    for pre, ex in groups.items():
        E = max(ex) + 1
        assert sorted(ex) == list(range(E))
        out[f"{pre}.gate_up_proj"] = torch.stack([torch.cat([ex[e]["gate"], ex[e]["up"]], 0) for e in range(E)])
        out[f"{pre}.down_proj"] = torch.stack([ex[e]["down"] for e in range(E)])
    return sorted_sd(out)


def load_dir_tensors(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    sd = {}
    for f in files:
        sd.update(safetensors.torch.load_file(os.path.join(d, f)))
    return sd


def st_dtypes(path):
    with safetensors.safe_open(path, framework="pt") as f:
        return {k: str(f.get_slice(k).get_dtype()) for k in f.keys()}


def save_st(sd, path):
    safetensors.torch.save_file({k: v.contiguous() for k, v in sd.items()}, path, metadata={"format": "pt"})


def save_hf(model, d, keep_generation_config=False):
    """save_pretrained (safetensors) and the tensors as written. The fixtures drop generation_config.json."""
    os.makedirs(d, exist_ok=True)
    try:
        model.save_pretrained(d, safe_serialization=True)
    except TypeError:
        model.save_pretrained(d)
    gc = os.path.join(d, "generation_config.json")
    if os.path.exists(gc) and not keep_generation_config:
        os.remove(gc)
    return load_dir_tensors(d)


def load_hf(model_cls, d, allow_missing=(), **kw):
    """from_pretrained in fp32; fails if any tensor was missing/unexpected/mismatched (except allowed prefixes)."""
    kw = dict(kw, output_loading_info=True)
    try:
        m, info = model_cls.from_pretrained(d, dtype=torch.float32, **kw)
    except TypeError:
        m, info = model_cls.from_pretrained(d, torch_dtype=torch.float32, **kw)
    if not isinstance(info, dict):
        info = {k: getattr(info, k) for k in dir(info) if k.endswith("_keys") or k == "error_msgs"}
    if getattr(m.config, "tie_word_embeddings", False) or getattr(m.config.get_text_config(), "tie_word_embeddings",
                                                                  False):
        allow_missing = tuple(allow_missing) + ("lm_head.weight",)
    bad = {}
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        vals = [v if isinstance(v, str) else str(v) for v in (info.get(key) or [])]
        vals = [v for v in vals if not any(v.startswith(a) or ("'" + a) in v for a in allow_missing)]
        if vals:
            bad[key] = vals[:8]
    if bad:
        raise RuntimeError(f"loading {d}: {bad}")
    return force_eager(m).float().eval(), info


def rounded_copy(model, dtype):
    """An fp32 copy of model whose parameters hold the values rounded to dtype (the reference for low-precision
    checkpoints), and a dtype copy of it to save."""
    ref_model = copy.deepcopy(model)
    with torch.no_grad():
        for p in ref_model.parameters():
            p.copy_(p.to(dtype).float())
    lp = copy.deepcopy(ref_model).to(dtype)
    try:
        lp.config.dtype = dtype
    except Exception:
        pass
    return ref_model, lp

