"""Reference logits for tools/make_fixtures.py: prefills, the greedy continuation, and the conditioning measurement.

Conditioning: why every reference must pass fp32_vs_fp64_max_abs_diff <= CONDITIONING_LIMIT
--------------------------------------------------------------------------------------------
plumb's CPU path computes in FP32 and must match every reference logit within 1e-4 (tests/model/fixture_test.cpp).
Two correct FP32 implementations differ by their rounding, and how far that rounding moves the logits depends on the
model: a random model can amplify it (large logits, large gains through the layers, near-ties in the routers). When
the reference's own FP32 noise is close to the tolerance, the test no longer separates a correct implementation from a
wrong one; it fails correct code that merely rounds in another order (qwen3_next_tied once sat at 5.5e-5 cached vs
uncached in transformers itself, and plumb at 1.5e-4). So each reference is also run in float64 and the largest
|logit difference| between transformers in float32 and in float64 (same model, same inputs) is recorded and must stay
within a quarter of the tolerance; a model that exceeds it is made better conditioned (its `scale`, which shrinks the
weights, is lowered) rather than the tolerance raised.

transformers casts to float32 in places (RMSNorm, the gated norm, the torch gated-delta-rule fallbacks, softmax in
eager attention and the router, rotary). A plain `model.double()` run therefore still rounds those parts in float32;
its difference is recorded as `plain_double_max_abs_diff`. The main number comes from a run under fp64_everywhere(),
which turns every cast to float32 into a cast to float64 while it runs, so the whole forward pass is float64 (modules
that still returned a float32 tensor are listed under `float32_leaks`; empty means none). The limit applies to the
larger of the two.
"""

import contextlib
import copy
import json
import os

from fixtures_common import GEN_TOKENS, MIN_GAP, PREFILL_LENS, PROMPT_LEN, VOCAB, log, np, torch, transformers

REFERENCE_TOLERANCE = 1e-4  # what plumb's fixture test allows
CONDITIONING_LIMIT = REFERENCE_TOLERANCE / 4  # 2.5e-5


class ConditioningError(RuntimeError):
    pass


def prefill_ids(vocab=VOCAB):
    out = []
    for T in PREFILL_LENS:
        rng = np.random.default_rng(5000 + T)
        out.append(rng.integers(0, vocab, size=T).tolist())
    return out


class RouterMargin:
    """Forward hooks on the routers: smallest gap between the k-th and (k+1)-th softmax probability."""

    def __init__(self, model, k):
        self.k = k
        self.min_margin = None
        self.handles = []
        for name, mod in model.named_modules():
            if name.endswith("mlp.gate") and not name.endswith("shared_expert_gate"):
                self.handles.append(mod.register_forward_hook(self.hook))

    def hook(self, mod, inp, out):
        logits = out[0] if isinstance(out, (tuple, list)) else out
        logits = logits.reshape(-1, logits.shape[-1]).float()
        p = torch.softmax(logits, dim=-1).sort(dim=-1, descending=True).values
        if p.shape[-1] > self.k:
            m = float((p[:, self.k - 1] - p[:, self.k]).min())
            self.min_margin = m if self.min_margin is None else min(self.min_margin, m)

    def close(self):
        for h in self.handles:
            h.remove()


@torch.no_grad()
def forward_logits(model, ids):
    x = torch.tensor([ids], dtype=torch.long)
    return model(input_ids=x, use_cache=False).logits[0].float()


def greedy_config():
    from transformers import GenerationConfig
    return GenerationConfig(max_new_tokens=GEN_TOKENS, do_sample=False, use_cache=True, eos_token_id=None,
                            pad_token_id=None, bos_token_id=None, num_beams=1, output_logits=True,
                            return_dict_in_generate=True)


@torch.no_grad()
def greedy(model, seed0, vocab=VOCAB, avoid_ids=(), accept=None, attempts=64):
    """A prompt (seed0, seed0+1, ...) whose 24-token greedy continuation has clear argmax margins everywhere and
    contains none of avoid_ids (the default model's stop tokens). accept(prompt, generated, min_gap), when given, may
    refuse a candidate by returning the reason (tools/fixtures_bf16_greedy.py's further conditions)."""
    for attempt in range(attempts):
        seed = seed0 + attempt
        prompt = np.random.default_rng(seed).integers(0, vocab, size=PROMPT_LEN).tolist()
        out = model.generate(torch.tensor([prompt]), generation_config=greedy_config())
        seq = out.sequences[0].tolist()
        gen = seq[PROMPT_LEN:]
        if len(gen) != GEN_TOKENS or set(gen) & set(avoid_ids):
            log(f"  greedy seed {seed}: {len(gen)} tokens, stop ids {sorted(set(gen) & set(avoid_ids))}; next seed")
            continue
        step_logits = torch.cat([l.float() for l in out.logits], 0)  # [24, V], cached decode path
        full = forward_logits(model, seq)  # no-cache prefill of prompt + generated
        rows = full[PROMPT_LEN - 1: PROMPT_LEN - 1 + GEN_TOKENS]
        top2 = rows.topk(2, dim=-1).values
        gaps = top2[:, 0] - top2[:, 1]
        argmax_ok = rows.argmax(-1).tolist() == gen
        min_gap = float(gaps.min())
        cache_diff = float((step_logits - rows).abs().max())
        refusal = accept(prompt, gen, min_gap) if accept and argmax_ok and min_gap > MIN_GAP else None
        if argmax_ok and min_gap > MIN_GAP and refusal is None:
            return dict(prompt=prompt, generated=gen, min_gap=min_gap, prompt_seed=seed,
                        cache_vs_nocache_max_abs_diff=cache_diff), rows
        if refusal is not None:
            log(f"  greedy seed {seed}: {refusal}; trying next seed")
            continue
        log(f"  greedy seed {seed}: argmax_ok={argmax_ok} min_gap={min_gap:.3g}; trying next seed")
    raise RuntimeError("no prompt with a clear greedy margin")


# ----------------------------------------------------------------------------------------------------------------
# conditioning: float32 against float64 (see the module docstring)
# ----------------------------------------------------------------------------------------------------------------
def _to64(dt):
    return torch.float64 if dt is torch.float32 else dt


@contextlib.contextmanager
def fp64_everywhere():
    """While active, Tensor.to(float32), Tensor.float() and softmax(dtype=float32) give float64, and new tensors
    default to float64. Only for the conditioning run; everything is restored on exit."""
    T = torch.Tensor
    orig_to, orig_float, orig_softmax = T.to, T.float, torch.nn.functional.softmax
    orig_default = torch.get_default_dtype()

    def to(self, *a, **k):
        a = tuple(_to64(x) if isinstance(x, torch.dtype) else x for x in a)
        if isinstance(k.get("dtype"), torch.dtype):
            k["dtype"] = _to64(k["dtype"])
        return orig_to(self, *a, **k)

    def flt(self, *a, **k):
        return orig_to(self, torch.float64, *a, **k)

    def softmax(input, dim=None, _stacklevel=3, dtype=None):
        return orig_softmax(input, dim=dim, _stacklevel=_stacklevel, dtype=None if dtype is None else _to64(dtype))

    T.to, T.float, torch.nn.functional.softmax = to, flt, softmax
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        T.to, T.float, torch.nn.functional.softmax = orig_to, orig_float, orig_softmax
        torch.set_default_dtype(orig_default)


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (tuple, list)):
        for y in x:
            yield from _tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors(y)


@torch.no_grad()
def _logits64(model, ids):
    return model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False).logits[0].to(torch.float64)


@torch.no_grad()
def conditioning(model, inputs):
    """inputs: [(label, ids)]. Max |logit| difference between model (float32) and a float64 copy of it."""
    m64 = copy.deepcopy(model).double().eval()
    ref32 = {lab: forward_logits(model, ids).double() for lab, ids in inputs}
    out = {"limit": CONDITIONING_LIMIT, "per_input": {}}
    # plain model.double(): transformers' own float32 casts still round those parts in float32
    try:
        plain = {lab: float((_logits64(m64, ids) - ref32[lab]).abs().max()) for lab, ids in inputs}
        out["plain_double_max_abs_diff"] = max(plain.values())
    except Exception as e:
        out["plain_double_max_abs_diff"] = None
        out["plain_double_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    # the whole forward pass in float64
    leaks = set()

    def hook(mod, inp, o):
        if any(t.is_floating_point() and t.dtype != torch.float64 for t in _tensors(o)):
            leaks.add(type(mod).__name__)

    handles = [m.register_forward_hook(hook) for m in m64.modules()]
    try:
        with fp64_everywhere():
            full = {lab: float((_logits64(m64, ids) - ref32[lab]).abs().max()) for lab, ids in inputs}
        out["per_input"] = full
        out["full_fp64_max_abs_diff"] = max(full.values())
    except Exception as e:
        out["full_fp64_max_abs_diff"] = None
        out["full_fp64_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        for h in handles:
            h.remove()
    out["float32_leaks"] = sorted(leaks)
    vals = [v for v in (out["full_fp64_max_abs_diff"], out["plain_double_max_abs_diff"]) if v is not None]
    if not vals:
        raise RuntimeError(f"conditioning: no float64 run worked: {out}")
    out["max_abs_diff"] = max(vals)
    return out


# ----------------------------------------------------------------------------------------------------------------
# reference folders
# ----------------------------------------------------------------------------------------------------------------
def write_references(model, d, model_type, layout, notes, seed, k=None, extra=None, vocab=VOCAB, avoid_ids=()):
    """Writes d/reference/{reference.json, prefill_<T>.npy, greedy_logits.npy}; raises ConditioningError (after
    writing) if the model's fp32-vs-fp64 difference exceeds CONDITIONING_LIMIT."""
    rd = os.path.join(d, "reference")
    os.makedirs(rd, exist_ok=True)
    rm = RouterMargin(model, k) if k else None
    prefills = []
    max_abs = 0.0
    for ids in prefill_ids(vocab):
        lg = forward_logits(model, ids)
        assert torch.isfinite(lg).all()
        fn = f"prefill_{len(ids)}.npy"
        np.save(os.path.join(rd, fn), lg.numpy().astype(np.float32))
        prefills.append({"T": len(ids), "ids": ids, "logits": fn})
        max_abs = max(max_abs, float(lg.abs().max()))
    if rm:
        rm.close()
    g, rows = greedy(model, seed, vocab, avoid_ids)
    np.save(os.path.join(rd, "greedy_logits.npy"), rows.numpy().astype(np.float32))
    g["logits"] = "greedy_logits.npy"
    g["logits_note"] = ("row i = no-cache logits at position PROMPT_LEN-1+i of prompt+generated, "
                        "i.e. the logits that pick generated[i]")
    cond = conditioning(model, [(f"prefill_{len(p['ids'])}", p["ids"]) for p in prefills]
                        + [("greedy_sequence", g["prompt"] + g["generated"])])
    ref = {
        "model_type": model_type,
        "source": f"transformers {transformers.__version__}, torch {torch.__version__}",
        "dtype_of_computation": "float32 (CPU)",
        "prefills": prefills,
        "greedy": g,
        "expert_layout": layout,
        "max_abs_logit": max_abs,
        "min_router_topk_margin": (rm.min_margin if rm else None),
        "fp32_vs_fp64_max_abs_diff": cond["max_abs_diff"],
        "fp32_vs_fp64": cond,
        "notes": notes,
    }
    if extra:
        ref.update(extra)
    with open(os.path.join(rd, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    log(f"  conditioning: fp32 vs fp64 {cond['max_abs_diff']:.2e} (full {cond['full_fp64_max_abs_diff']}, plain "
        f"double {cond['plain_double_max_abs_diff']}, leaks {cond['float32_leaks']}); cache vs no-cache "
        f"{g['cache_vs_nocache_max_abs_diff']:.2e}; max|logit| {max_abs:.3f}, min greedy gap {g['min_gap']:.4f}")
    if not cond["max_abs_diff"] <= CONDITIONING_LIMIT:
        raise ConditioningError(f"{d}: fp32 vs fp64 max |logit diff| {cond['max_abs_diff']:.3e} > "
                                f"{CONDITIONING_LIMIT:.1e}: the reference is too ill-conditioned to judge at 1e-4")
    return ref


def link_references(src, dst, notes_add, extra=None):
    """dst/reference/reference.json pointing at src's .npy files (paths relative to dst/reference), for derived
    checkpoints whose logits are exactly the source's."""
    src_rd, rd = os.path.join(src, "reference"), os.path.join(dst, "reference")
    os.makedirs(rd, exist_ok=True)
    rel = os.path.relpath(src_rd, rd).replace(os.sep, "/")
    ref = json.load(open(os.path.join(src_rd, "reference.json")))
    for pf in ref["prefills"]:
        pf["logits"] = f"{rel}/{pf['logits']}"
    ref["greedy"]["logits"] = f"{rel}/{ref['greedy']['logits']}"
    ref["logits_shared_with"] = os.path.basename(os.path.normpath(src))
    ref["notes"] = notes_add + " Logit files are the source's (paths relative to this folder). " + ref.get("notes", "")
    if extra:
        ref.update(extra)
    json.dump(ref, open(os.path.join(rd, "reference.json"), "w"), indent=1)
    for pf in ref["prefills"]:
        assert os.path.exists(os.path.join(rd, pf["logits"])), pf["logits"]
    return ref


def compare(model, ref_dir):
    """max |logit diff| of model against the stored prefill references."""
    ref = json.load(open(os.path.join(ref_dir, "reference", "reference.json")))
    m = 0.0
    for pf in ref["prefills"]:
        want = torch.from_numpy(np.load(os.path.join(ref_dir, "reference", pf["logits"])))
        got = forward_logits(model, pf["ids"])
        m = max(m, float((got - want).abs().max()))
    return m
