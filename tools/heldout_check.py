#!/usr/bin/env python3
"""Checks plumb against Hugging Face transformers on qwen3_next models that are not among the test fixtures.

Builds random-weight Qwen3NextForCausalLM models with sizes and layer patterns of their own (seeded), computes the
reference logits of one prefill and a greedy continuation in FP32 on the CPU, then runs the plumb binary on the saved
folder and compares: logits within max-abs 1e-4, greedy ids identical. Needs torch and transformers (the GPU machine
has them); prints one line per model and exits non-zero on any mismatch.

    python3 tools/heldout_check.py --plumb build/device/bin/plumb --work /tmp/heldout
"""
import argparse
import json
import pathlib
import subprocess
import sys

import numpy as np
import torch
from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

TOLERANCE = 1e-4  # the bound for the FP32 CPU path against FP32 transformers

# Sizes and patterns chosen to differ from every fixture (tools/make_fixtures.py).
MODELS = {
    "heldout_a": dict(vocab_size=173, hidden_size=48, num_hidden_layers=7,
                      layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention",
                                   "full_attention", "linear_attention", "full_attention"],
                      num_attention_heads=6, num_key_value_heads=3, head_dim=16, partial_rotary_factor=0.5,
                      rope_theta=500000.0, linear_num_key_heads=3, linear_num_value_heads=6, linear_key_head_dim=8,
                      linear_value_head_dim=12, linear_conv_kernel_dim=4, num_experts=6, num_experts_per_tok=3,
                      moe_intermediate_size=20, shared_expert_intermediate_size=28, intermediate_size=40,
                      mlp_only_layers=[3], norm_topk_prob=False, tie_word_embeddings=False),
    "heldout_b": dict(vocab_size=211, hidden_size=40, num_hidden_layers=6, full_attention_interval=3,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=24, partial_rotary_factor=0.25,
                      rope_theta=1e6, linear_num_key_heads=1, linear_num_value_heads=4, linear_key_head_dim=12,
                      linear_value_head_dim=10, linear_conv_kernel_dim=3, num_experts=5, num_experts_per_tok=2,
                      moe_intermediate_size=12, shared_expert_intermediate_size=16, intermediate_size=36,
                      decoder_sparse_step=2, norm_topk_prob=True, tie_word_embeddings=True),
}


def build(name, spec, seed):
    torch.manual_seed(seed)
    config = Qwen3NextConfig(hidden_act="silu", max_position_embeddings=1024, rms_norm_eps=1e-6,
                             initializer_range=0.08, **spec)
    config._attn_implementation = "eager"
    model = Qwen3NextForCausalLM(config).float().eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.08)
            elif pname.endswith("A_log"):
                p.uniform_(-3.0, 0.5)
            elif pname.endswith("dt_bias"):
                p.normal_(0.0, 0.5)
            elif pname.endswith("linear_attn.norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            else:  # zero-centred norms
                p.normal_(0.0, 0.3)
    return model


def run_plumb(plumb, args):
    done = subprocess.run([plumb] + args, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"plumb {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def check(name, spec, seed, plumb, work):
    model = build(name, spec, seed)
    folder = work / name
    model.save_pretrained(folder, safe_serialization=True)
    gen = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, spec["vocab_size"], (1, 150), generator=gen)
    with torch.no_grad():
        reference = model(ids).logits[0].float().numpy()
        prompt = ids[:, :11]
        greedy = model.generate(prompt, max_new_tokens=24, do_sample=False, use_cache=True, eos_token_id=None,
                                pad_token_id=0)[0, 11:].tolist()
    out = work / f"{name}.npy"
    run_plumb(plumb, ["logits", "--model", str(folder), "--ids", ",".join(map(str, ids[0].tolist())),
                      "--out", str(out)])
    err = float(np.max(np.abs(np.load(out) - reference)))
    plumb_ids = [int(x) for x in run_plumb(plumb, ["generate", "--model", str(folder), "--ids",
                                                   ",".join(map(str, prompt[0].tolist())), "--max-tokens", "24",
                                                   "--print-ids"]).split()]
    ok = err <= TOLERANCE and plumb_ids == greedy
    print(f"{name}: logits T=150 max|diff| {err:.2e} (bound {TOLERANCE:g}); greedy 24 ids "
          f"{'identical' if plumb_ids == greedy else f'DIFFER: plumb {plumb_ids} hf {greedy}'} -> "
          f"{'PASS' if ok else 'FAIL'}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plumb", required=True)
    parser.add_argument("--work", default="/tmp/heldout")
    parser.add_argument("--seed", type=int, default=20261129)
    args = parser.parse_args()
    torch.set_num_threads(1)
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    results = [check(name, spec, args.seed + i, args.plumb, work) for i, (name, spec) in enumerate(MODELS.items())]
    print(json.dumps({"passed": sum(results), "failed": len(results) - sum(results)}))
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
