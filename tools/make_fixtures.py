#!/usr/bin/env python3
"""Build tiny random-weight Qwen3-Next / Qwen3.5 reference models with Hugging Face transformers.

Writes, under --out (default tests/fixtures/models):
  manifest.json                  versions, expert layout transformers wrote, one line per fixture
  <fixture>/config.json          (+ model.safetensors, or shards + model.safetensors.index.json)
  <fixture>/reference/           reference.json + prefill_<T>.npy + greedy_logits.npy; derived fixtures whose logits
                                 are exactly their source's (sharded, other_layout, wrapped) hold only reference.json,
                                 whose `logits` entries are paths relative to the reference folder, e.g.
                                 "../../qwen3_5_moe/reference/prefill_7.npy"
  qwen3_next_chat/               a random-weight qwen3_next in the real 3:1 layout, BF16, 16 experts top 4, with the
                                 tiny tokenizer and its chat template (+ tokenizer.json, tokenizer_config.json,
                                 generation_config.json), for tests that need text in and out (tools/fixtures_chat.py)
models/default, the trained model, is not made here but by tools/train_demo_model.py.

Everything runs with CPU torch in float32 (no CUDA, no TF32), fixed seeds, deterministic algorithms, and the
transformers torch fallbacks for the gated delta rule and causal conv1d (FLA / causal-conv1d are not used on CPU).

Every reference must also be well conditioned: transformers in float32 and in float64 must agree within 2.5e-5, a
quarter of plumb's 1e-4 tolerance, or the reference's own rounding noise would decide the test rather than the
implementation under test (see tools/fixtures_reference.py). A model that fails gets a lower `scale` (smaller weights);
--search-scale finds the first scale on SCALE_LADDER that passes and says which to write into SOURCES (or CHAT_SPEC).

The greedy references are then conditioned for BF16 arithmetic (argmax gaps the GPU's BF16 operands cannot flip) by
tools/fixtures_bf16_greedy.py --plumb <plumb binary> --write, which re-chooses the prompt of any fixture that fails.

Needs torch, transformers (>= 5, written against 5.17), safetensors, numpy, tokenizers. Run on the GPU box (CPU only):
    python3 tools/make_fixtures.py --out DIR [--dump-hf-source DIR2]

Sizes are deliberately tiny (hidden 32, vocab 200, 8 experts of 16, 5 layers) so that the ten small fixture folders
(each with 5 prefill references of up to 130 tokens) stay around 7 MB in total; qwen3_next_chat (hidden 128, 8 layers,
the tokenizer's 384-token vocabulary) adds about 2.7 MB. Every fixture is checked against transformers itself: the
source folders, the derived ones (shards, other expert layout, multimodal wrapper, bf16, fp16) and qwen3_next_chat are
re-loaded with from_pretrained and must reproduce the stored logits.

Modules: fixtures_common (sizes, configs, weights, checkpoint I/O), fixtures_reference (logits, greedy, conditioning),
fixtures_variants (derived fixtures), fixtures_chat (qwen3_next_chat).
"""

import argparse
import importlib
import importlib.util
import json
import os
import shutil
import sys
import traceback

import fixtures_common as fc  # first: sets up torch
from fixtures_common import F, L, N_HEADS, N_EXPERTS, Q5, Q5M, QN, family_classes, log, np, torch, transformers
from fixtures_chat import CHAT_SPEC, make_chat_fixture
from fixtures_reference import ConditioningError, compare, write_references
from fixtures_variants import make_fp8, make_lowp, make_nvfp4, make_other_layout, make_sharded, make_wrapped

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# ----------------------------------------------------------------------------------------------------------------
# source fixtures. `scale` multiplies the weight std (fixtures_common.init_weights). At scale 1 every source failed the
# conditioning criterion (fp32 vs fp64 max |logit diff|: qwen3_next_moe 1.8e-4, qwen3_next_tied 1.7e-4, qwen3_5_dense
# 7.2e-5, qwen3_5_moe 3.7e-5), so each runs at the largest scale of SCALE_LADDER at which it and every fixture derived
# from it pass (found with --search-scale; qwen3_next_moe's fp16 and fp8 variants needed 0.5). The architecture and
# what each fixture covers are unchanged; only the weights are smaller.
# ----------------------------------------------------------------------------------------------------------------
SOURCES = {
    "qwen3_next_moe": dict(
        family="qwen3_next", seed=1001, scale=0.5,
        cfg=dict(num_hidden_layers=5, layer_types=[L, L, F, L, F], num_attention_heads=N_HEADS, num_key_value_heads=2,
                 linear_num_key_heads=2, linear_num_value_heads=4, mlp_only_layers=[1], intermediate_size=96,
                 decoder_sparse_step=1, num_experts=N_EXPERTS, num_experts_per_tok=2, norm_topk_prob=True,
                 tie_word_embeddings=False, rope_theta=10000.0),
    ),
    "qwen3_next_tied": dict(
        family="qwen3_next", seed=1002, scale=0.42,
        cfg=dict(num_hidden_layers=5, layer_types=[F, L, L, F, L], num_attention_heads=N_HEADS, num_key_value_heads=1,
                 linear_num_key_heads=2, linear_num_value_heads=6, mlp_only_layers=[], intermediate_size=64,
                 decoder_sparse_step=2, num_experts=N_EXPERTS, num_experts_per_tok=3, norm_topk_prob=False,
                 tie_word_embeddings=True, rope_theta=1000000.0),
    ),
    "qwen3_5_dense": dict(
        family="qwen3_5_text", seed=1003, scale=0.35,
        cfg=dict(num_hidden_layers=5, layer_types=[L, F, L, L, F], num_attention_heads=N_HEADS, num_key_value_heads=2,
                 linear_num_key_heads=2, linear_num_value_heads=6, intermediate_size=96,
                 tie_word_embeddings=True, rope_theta=10000.0),
    ),
    "qwen3_5_moe": dict(
        family="qwen3_5_moe_text", seed=1004, scale=0.7,
        cfg=dict(num_hidden_layers=5, layer_types=[L, L, F, L, F], num_attention_heads=N_HEADS, num_key_value_heads=2,
                 linear_num_key_heads=2, linear_num_value_heads=4, num_experts=N_EXPERTS, num_experts_per_tok=3,
                 tie_word_embeddings=False, rope_theta=1000000.0),
    ),
}

# derived fixtures: name -> (source, maker)
NEXT_MOE_REF_SEED = SOURCES["qwen3_next_moe"]["seed"] * 10
DERIVED = {
    "qwen3_next_moe_sharded": ("qwen3_next_moe", make_sharded),
    "qwen3_5_moe_other_layout": ("qwen3_5_moe", make_other_layout),
    "qwen3_5_moe_wrapped": ("qwen3_5_moe", make_wrapped),
    "qwen3_next_bf16": ("qwen3_next_moe", make_lowp(torch.bfloat16, "bf16", NEXT_MOE_REF_SEED)),
    "qwen3_next_fp16": ("qwen3_next_moe", make_lowp(torch.float16, "fp16", NEXT_MOE_REF_SEED)),
    "qwen3_next_fp8": ("qwen3_next_moe", make_fp8(NEXT_MOE_REF_SEED)),
    "qwen3_next_nvfp4": ("qwen3_next_moe", make_nvfp4(NEXT_MOE_REF_SEED)),
}

# the fixture with the tiny tokenizer and the real layout (tools/fixtures_chat.py); built after the others
CHAT = "qwen3_next_chat"

# --search-scale tries the model's own scale, then each smaller one here, until the conditioning criterion passes
SCALE_LADDER = [1.0, 0.85, 0.7, 0.6, 0.5, 0.42, 0.35, 0.3, 0.25, 0.2]

CONFIG_SUMMARY_KEYS = ("layer_types", "mlp_only_layers", "decoder_sparse_step", "norm_topk_prob", "tie_word_embeddings",
                       "num_experts", "num_experts_per_tok", "linear_num_key_heads", "linear_num_value_heads",
                       "num_key_value_heads", "rope_parameters", "intermediate_size")


def make_source(name, d, scale, built):
    spec = SOURCES[name]
    model = fc.build_model(spec, scale)
    if name in ("qwen3_next_moe", "qwen3_5_moe"):
        log("  gdn impls:", json.dumps(gdn_impls(model)))
    sd = fc.save_hf(model, d)
    layout = fc.expert_layout(sd.keys())
    cfgj = json.load(open(os.path.join(d, "config.json")))
    k = spec["cfg"].get("num_experts_per_tok") if spec["family"] != "qwen3_5_text" else None
    notes = (f"{spec['family']} random weights (seed {spec['seed']}, weight scale {scale}); 1-D params perturbed; "
             f"fp32 CPU reference with eager attention / eager experts / torch GDN fallbacks.")
    write_references(model, d, cfgj.get("model_type"), layout, notes, spec["seed"] * 10, k=k,
                     extra={"weight_scale": scale})
    # round-trip: what transformers reads back from the folder must give the same logits
    _, mcls = family_classes(spec["family"])
    m2, _ = fc.load_hf(mcls, d)
    rt = compare(m2, d)
    dts = sorted(set(fc.st_dtypes(os.path.join(d, "model.safetensors")).values()))
    built[name] = (model, sd, d)
    return dict(kind="source", family=spec["family"], model_type=cfgj.get("model_type"), weight_scale=scale,
                params=fc.model_info(model)["params"], expert_layout=layout,
                tensor_dtypes=dts, has_lm_head_tensor=("lm_head.weight" in sd),
                n_tensors=len(sd), roundtrip_max_abs_diff=rt, check=f"rt={rt:.1e}",
                config_summary={k2: cfgj.get(k2) for k2 in CONFIG_SUMMARY_KEYS})


# ----------------------------------------------------------------------------------------------------------------
# fallback-path check and source dump
# ----------------------------------------------------------------------------------------------------------------
def fallback_report():
    rep = {}
    for mod in ("fla", "causal_conv1d", "kernels", "mamba_ssm"):
        rep[f"module_{mod}_installed"] = importlib.util.find_spec(mod) is not None
    try:
        from transformers.utils import is_flash_linear_attention_available
        rep["is_flash_linear_attention_available"] = bool(is_flash_linear_attention_available())
    except Exception as e:
        rep["is_flash_linear_attention_available"] = f"n/a ({type(e).__name__})"
    try:
        from transformers.utils import is_causal_conv1d_available
        rep["is_causal_conv1d_available"] = bool(is_causal_conv1d_available())
    except Exception as e:
        rep["is_causal_conv1d_available"] = f"n/a ({type(e).__name__})"
    rep["cuda_visible"] = torch.cuda.is_available()
    return rep


def gdn_impls(model):
    out = {}
    for name, mod in model.named_modules():
        if name.endswith("linear_attn"):
            for a in ("causal_conv1d_fn", "causal_conv1d_update", "chunk_gated_delta_rule",
                      "recurrent_gated_delta_rule"):
                f = getattr(mod, a, None)
                if f is not None:
                    out[a] = f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', repr(f))}"
            break
    for m in (QN[0], Q5[0], Q5M[0]):
        try:
            mm = importlib.import_module(m)
        except Exception:
            continue
        for fn in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule", "causal_conv1d_fn",
                   "causal_conv1d_update", "chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"):
            f = getattr(mm, fn, None)
            if f is not None:
                out[f"{m.split('.')[-1]}.{fn}"] = repr(f)[:160]
    return out


def dump_hf_source(d):
    os.makedirs(d, exist_ok=True)
    root = os.path.dirname(transformers.__file__)
    rels = []
    for sub in ("models/qwen3_next", "models/qwen3_5", "models/qwen3_5_moe", "models/qwen3_vl_moe"):
        p = os.path.join(root, sub)
        if os.path.isdir(p):
            for f in sorted(os.listdir(p)):
                if f.endswith(".py"):
                    rels.append(os.path.join(sub, f))
    for f in ("conversion_mapping.py", "integrations/moe.py", "integrations/hub_kernels.py", "core_model_loading.py",
              "modeling_rope_utils.py", "masking_utils.py"):
        if os.path.exists(os.path.join(root, f)):
            rels.append(f)
    for r in rels:
        dst = os.path.join(d, r)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy(os.path.join(root, r), dst)
    log(f"dumped {len(rels)} transformers source files from {root}")


# ----------------------------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------------------------
def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "models"))
    ap.add_argument("--tokenizer-dir", default=os.path.join(REPO, "tests", "fixtures", "tokenizer", "tiny"),
                    help="tokenizer files of the qwen3_next_chat fixture")
    ap.add_argument("--dump-hf-source", default=None, help="copy the relevant transformers sources here")
    ap.add_argument("--only", default=None, help="comma list of fixtures, e.g. qwen3_next_moe,qwen3_next_chat (debug)")
    ap.add_argument("--search-scale", action="store_true",
                    help="a source or qwen3_next_chat failing the conditioning criterion is rebuilt at the next "
                         "smaller scale of SCALE_LADDER until it passes (then write that scale into its spec)")
    ap.add_argument("--scale", action="append", default=[], metavar="NAME=X",
                    help="build source NAME (or qwen3_next_chat) at weight scale X instead of its spec's (debug)")
    return ap.parse_args()


def main():
    args = parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    log(f"transformers {transformers.__version__} ({transformers.__file__}), torch {torch.__version__}, "
        f"safetensors {fc.safetensors.__version__}, numpy {np.__version__}")
    if args.dump_hf_source:
        try:
            dump_hf_source(args.dump_hf_source)
        except Exception:
            traceback.print_exc()

    fb = fallback_report()
    log("fallback check:", json.dumps(fb))
    try:
        Q5Cfg, _ = family_classes("qwen3_5_text")
        log("Qwen3_5TextConfig() default tie_word_embeddings =", Q5Cfg().tie_word_embeddings)
    except Exception as e:
        log("could not build default Qwen3_5TextConfig:", e)

    manifest = {
        "generator": "tools/make_fixtures.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "safetensors": fc.safetensors.__version__,
        "fallback_check": fb,
        "conditioning_criterion": "fp32_vs_fp64_max_abs_diff <= 2.5e-5 (a quarter of plumb's 1e-4 logit tolerance) "
                                  "for every fixture; see tools/fixtures_reference.py",
        "fixtures": {},
        "errors": {},
    }
    summary = []
    built = {}  # name -> (model, saved_sd, dir)
    only = set(args.only.split(",")) if args.only else None
    overrides = {k: float(v) for k, v in (s.split("=", 1) for s in args.scale)}
    chosen_scales = {}

    def want(n):
        return only is None or n in only

    def fresh(d):
        if os.path.exists(d):
            shutil.rmtree(d)
        os.makedirs(d)

    def build_one(name, d, fn):
        """fn(d) -> manifest entry, plus the reference's numbers; a ConditioningError goes to the caller, any other
        error is recorded and gives None."""
        log(f"== {name}")
        fresh(d)
        try:
            info = fn(d)
        except ConditioningError:
            raise
        except Exception:
            tb = traceback.format_exc()
            log(tb)
            manifest["errors"][name] = tb[-2000:]
            return None
        r = json.load(open(os.path.join(d, "reference", "reference.json")))
        info["fp32_vs_fp64_max_abs_diff"] = r["fp32_vs_fp64_max_abs_diff"]
        info["fp32_vs_fp64_plain_double_max_abs_diff"] = r["fp32_vs_fp64"]["plain_double_max_abs_diff"]
        info["cache_vs_nocache_max_abs_diff"] = r["greedy"]["cache_vs_nocache_max_abs_diff"]
        info["min_greedy_gap"] = r["greedy"]["min_gap"]
        info["_row"] = (name, info.get("params"), r["max_abs_logit"], r["greedy"]["min_gap"],
                        r["fp32_vs_fp64_max_abs_diff"], r["greedy"]["cache_vs_nocache_max_abs_diff"],
                        info.get("expert_layout"), info.get("check", ""))
        return info

    def build_group(name, spec_scale, members):
        """members: [(fixture, folder, fn(d, scale))], the first one the model whose scale it is, the others derived
        from it. The scale must make every member pass the conditioning criterion; with --search-scale a failure
        rebuilds the whole group at the next smaller scale of SCALE_LADDER."""
        start = overrides.get(name, spec_scale)
        rungs = [start] + ([s for s in SCALE_LADDER if s < start] if args.search_scale else [])
        for i, scale in enumerate(rungs):
            done = {}
            try:
                for m, d, fn in members:
                    done[m] = build_one(m, d, lambda d, fn=fn: fn(d, scale))
                    if m == name and done[m] is None:
                        break  # the model itself failed: nothing to derive
                break
            except ConditioningError as e:
                log(f"  {e}")
                if i + 1 == len(rungs):
                    manifest["errors"][m] = f"{type(e).__name__}: {e}"
                    break
                log(f"  -> {name} and what derives from it again at weight scale {rungs[i + 1]}")
        chosen_scales[name] = scale
        if scale != spec_scale:
            log(f"  NOTE: {name} passes at weight scale {scale}; its spec says {spec_scale}")
        for m, _, _ in members:
            if m not in done and m not in manifest["errors"]:
                manifest["errors"][m] = f"not built: {name} failed"
        return {m: info for m, info in done.items() if info is not None}

    results = {}
    for n, spec in SOURCES.items():
        members = [(n, os.path.join(out, n), lambda d, s, n=n: make_source(n, d, s, built))]
        members += [(m, os.path.join(out, m), lambda d, s, m=m, mk=mk, n=n: mk(m, d, built[n]))
                    for m, (src, mk) in DERIVED.items() if src == n and want(m)]
        if want(n) or len(members) > 1:
            results.update(build_group(n, spec["scale"], members))
    if want(CHAT):
        results.update(build_group(CHAT, CHAT_SPEC["scale"],
                                   [(CHAT, os.path.join(out, CHAT),
                                     lambda d, s: make_chat_fixture(d, args.tokenizer_dir, s))]))
    for n in list(SOURCES) + list(DERIVED) + [CHAT]:
        if n in results:
            summary.append(results[n].pop("_row"))
            manifest["fixtures"][n] = results[n]

    manifest["expert_layout_written_by_transformers"] = {
        n: f["expert_layout"] for n, f in manifest["fixtures"].items() if f.get("kind") == "source"}
    manifest["weight_scales"] = chosen_scales
    manifest["summary_columns"] = ["fixture", "params", "max_abs_logit", "min_greedy_gap", "fp32_vs_fp64_max_abs_diff",
                                   "cache_vs_nocache_max_abs_diff", "expert_layout", "check"]
    manifest["summary"] = summary
    json.dump(manifest, open(os.path.join(out, "manifest.json"), "w"), indent=1)

    log("")
    log(f"{'fixture':26s} {'params':>8s} {'max|logit|':>10s} {'min gap':>8s} {'fp32-fp64':>9s} {'cache':>9s}  "
        f"layout      check")
    for n, p, mx, gp, c64, cc, lay, chk in summary:
        log(f"{n:26s} {p!s:>8s} {mx:10.3f} {gp:8.4f} {c64:9.2e} {cc:9.2e}  {lay!s:11s} {chk}")
    log("weight scales:", json.dumps(chosen_scales))
    if manifest["errors"]:
        log("ERRORS in:", ", ".join(manifest["errors"]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
