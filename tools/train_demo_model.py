#!/usr/bin/env python3
"""Trains plumb's embedded demo model: a small Qwen3-Next (transformers' Qwen3NextForCausalLM) on public-domain text.

Data: tools/demo_corpus.sh (the King James Bible and the fortune cookie files from Debian packages), split by record
into train and validation sets (every 20th record is validation). A byte-level BPE tokenizer (vocabulary 4096,
Qwen-style special tokens, a Qwen-style chat template) is trained on the training set with Hugging Face tokenizers.
Part of the records are wrapped as chat turns ("Tell me a fortune." -> a fortune, "Read me a verse." -> verses), so the
chat path of the engine has something sensible to say. Runs on the GPU machine:

    python3 tools/train_demo_model.py --corpus .cache/demo-corpus --out /tmp/demo

Writes the model folder (BF16 safetensors, tokenizer.json, tokenizer_config.json, generation_config.json) and
reference/ (logits of a few prefills and 64-token greedy continuations computed by transformers in FP32 from the
saved BF16 weights). Prints the final validation loss.
"""
import argparse
import json
import math
import pathlib
import random
import time

import numpy as np
import torch

from qwen_style_bpe import SPECIALS, train_qwen_style_bpe

FORTUNE_ASKS = ["Tell me a fortune.", "Say something wise.", "Give me a quote.", "Cheer me up.", "Any advice?"]
VERSE_ASKS = ["Read me a verse.", "Quote the scripture.", "What does the Bible say?"]
PROMPTS = ["In the beginning", "And the LORD said unto Moses,", "A fool and his money",
           "<|im_start|>user\nTell me a fortune.<|im_end|>\n<|im_start|>assistant\n",
           "<|im_start|>user\nRead me a verse.<|im_end|>\n<|im_start|>assistant\n"]


def model_config(vocab_size, eos_ids):
    from transformers import Qwen3NextConfig
    return Qwen3NextConfig(
        vocab_size=vocab_size, hidden_size=256, num_hidden_layers=8, full_attention_interval=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, partial_rotary_factor=0.25, rope_theta=10000.0,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64, linear_value_head_dim=64,
        linear_conv_kernel_dim=4, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=192,
        shared_expert_intermediate_size=192, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        intermediate_size=512, max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=True,
        output_router_logits=True, router_aux_loss_coef=0.01, hidden_act="silu", initializer_range=0.02,
        bos_token_id=None, eos_token_id=eos_ids, pad_token_id=eos_ids[-1])


def read_records(corpus):
    records = []
    for name in ("kjv.txt", "fortunes.txt"):
        text = (corpus / name).read_text(encoding="utf-8")
        for para in text.split("\n\n"):
            para = para.strip("\n")
            if para.strip():
                records.append((name, para))
    train = [r for i, r in enumerate(records) if i % 20 != 7]
    valid = [r for i, r in enumerate(records) if i % 20 == 7]
    return train, valid


def as_document(kind, text, rng):
    """A record as training text: plain, or (some of the time) as one chat exchange."""
    if rng.random() < 0.35:
        if kind == "fortunes.txt":
            ask = rng.choice(FORTUNE_ASKS)
        else:
            sentences = text.split(". ")
            start = rng.randrange(max(1, len(sentences) - 3))
            text = ". ".join(sentences[start:start + 3]).rstrip(".") + "."
            ask = rng.choice(VERSE_ASKS)
        return f"<|im_start|>user\n{ask}<|im_end|>\n<|im_start|>assistant\n{text}<|im_end|>\n"
    return text + "<|endoftext|>"


def train_tokenizer(train, out):
    tok = train_qwen_style_bpe((text for _, text in train), 4096)
    tok.save(str(out / "tokenizer.json"))
    template = (pathlib.Path(__file__).parent / "demo_chat_template.jinja").read_text()
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096, "bos_token": None,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None, "clean_up_tokenization_spaces": False,
        "add_prefix_space": False, "errors": "replace", "split_special_tokens": False, "chat_template": template,
        "added_tokens_decoder": {str(tok.token_to_id(s)): {"content": s, "lstrip": False, "rstrip": False,
                                                           "normalized": False, "single_word": False, "special": True}
                                 for s in SPECIALS}}, indent=2) + "\n")
    return tok


def token_stream(tok, records, seed):
    rng = random.Random(seed)
    docs = [as_document(kind, text, rng) for kind, text in records]
    rng.shuffle(docs)
    ids = []
    for enc in tok.encode_batch(docs):
        ids.extend(enc.ids)
    return torch.tensor(ids, dtype=torch.long)


def batches(stream, batch, length, gen):
    starts = torch.randint(0, stream.numel() - length - 1, (batch,), generator=gen)
    return torch.stack([stream[s:s + length] for s in starts.tolist()])


@torch.no_grad()
def validation_loss(model, stream, length, device):
    model.eval()
    total, count = 0.0, 0
    for s in range(0, stream.numel() - length - 1, length * 16):
        chunk = torch.stack([stream[t:t + length] for t in range(s, min(s + length * 16, stream.numel() - length - 1),
                                                                     length)]).to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=chunk, labels=chunk)
        total += float(out.loss - (model.config.router_aux_loss_coef * out.aux_loss if out.aux_loss is not None else 0)
                       ) * chunk.shape[0]
        count += chunk.shape[0]
    model.train()
    return total / max(count, 1)


def write_reference(folder, tok, valid_stream):
    """Reference logits and greedy continuations from the saved BF16 weights, computed in FP32 on the CPU."""
    from transformers import Qwen3NextForCausalLM
    model = Qwen3NextForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    model.config.output_router_logits = False
    ref_dir = folder / "reference"
    ref_dir.mkdir(exist_ok=True)
    prefills, greedy = [], []
    with torch.no_grad():
        cases = [tok.encode(p).ids for p in PROMPTS] + [valid_stream[:130].tolist()]
        for i, ids in enumerate(cases):
            logits = model(torch.tensor([ids])).logits[0].float().numpy()
            name = f"prefill_{i}_{len(ids)}.npy"
            np.save(ref_dir / name, logits.astype(np.float32))
            prefills.append({"ids": ids, "logits": name})
        for p in PROMPTS:
            ids = tok.encode(p).ids
            out = model.generate(torch.tensor([ids]), max_new_tokens=64, do_sample=False, use_cache=True,
                                 eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist()
            full = model(torch.tensor([ids + out])).logits[0, len(ids) - 1:-1]
            top2 = torch.topk(full, 2, dim=-1).values
            greedy.append({"prompt": ids, "generated": out, "text": tok.decode(out),
                           "min_gap": float((top2[:, 0] - top2[:, 1]).min())})
    (ref_dir / "reference.json").write_text(json.dumps({
        "model_type": "qwen3_next", "source": "transformers, FP32 on CPU from the saved BF16 weights",
        "prefills": prefills, "greedy": greedy}, indent=1) + "\n")
    return greedy


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=".cache/demo-corpus")
    parser.add_argument("--out", default="/tmp/demo")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--max-minutes", type=float, default=9.0, help="stop training early past this wall time")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--seed", type=int, default=1129)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    from transformers import Qwen3NextForCausalLM
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train, valid = read_records(pathlib.Path(args.corpus))
    tok = train_tokenizer(train, out)
    train_stream, valid_stream = token_stream(tok, train, args.seed), token_stream(tok, valid, args.seed + 1)
    chars = sum(len(t) for _, t in train) + sum(len(t) for _, t in valid)
    print(f"data: {len(train)} train / {len(valid)} validation records, {chars / 1e6:.2f} M characters; "
          f"{train_stream.numel() / 1e6:.2f} M / {valid_stream.numel() / 1e6:.2f} M tokens; vocab {tok.get_vocab_size()}",
          flush=True)

    eos_ids = [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")]
    device = "cuda"
    model = Qwen3NextForCausalLM(model_config(tok.get_vocab_size(), eos_ids)).to(device)
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=2e-3, betas=(0.9, 0.95))
    warmup, peak_lr = 100, 2e-3
    gen = torch.Generator().manual_seed(args.seed)
    start = time.time()
    step, best_val, best_step, best_state = 0, float("inf"), 0, None
    for step in range(args.steps):
        # Cosine decay to a tenth over whichever runs out first, the steps or the wall-time cap, so a capped run
        # still ends at a low learning rate.
        progress = min(1.0, max(step / args.steps, (time.time() - start) / (args.max_minutes * 60)))
        for group in opt.param_groups:
            group["lr"] = peak_lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))
        x = batches(train_stream, args.batch, args.length, gen).to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 100 == 99 or step == args.steps - 1:
            # Early stopping: the corpus is small (about 2 M tokens), so later steps can overfit; keep the weights
            # with the lowest validation loss.
            val = validation_loss(model, valid_stream, args.length, device)
            if val < best_val:
                best_val, best_step = val, step + 1
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            print(f"step {step + 1} loss {loss.item():.3f} validation {val:.3f} lr {opt.param_groups[0]['lr']:.2e} "
                  f"{time.time() - start:.0f}s", flush=True)
        if time.time() - start > args.max_minutes * 60:
            print(f"stopping at step {step}: wall-time cap of {args.max_minutes} minutes", flush=True)
            break
    train_seconds = time.time() - start
    model.load_state_dict(best_state)
    val = validation_loss(model, valid_stream, args.length, device)
    print(f"final validation loss {val:.4f} (perplexity {math.exp(val):.2f}): the weights of step {best_step} of "
          f"{step + 1}, {train_seconds / 60:.1f} minutes of training", flush=True)

    model.config.output_router_logits = False
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    for p in (out / "generation_config.json",):
        cfg = json.loads(p.read_text()) if p.exists() else {}
        cfg.update({"eos_token_id": eos_ids, "pad_token_id": eos_ids[-1], "do_sample": False})
        p.write_text(json.dumps(cfg, indent=2) + "\n")
    greedy = write_reference(out, tok, valid_stream)
    (out / "training.json").write_text(json.dumps({
        "steps": step + 1, "best_step": best_step, "minutes": round(train_seconds / 60, 2), "validation_loss": round(val, 4),
        "train_tokens": train_stream.numel(), "valid_tokens": valid_stream.numel(), "characters": chars,
        "seed": args.seed, "batch": args.batch, "length": args.length,
        "samples": [{"prompt": PROMPTS[i], "text": g["text"], "min_gap": g["min_gap"]} for i, g in enumerate(greedy)]},
        indent=1) + "\n")
    for i, g in enumerate(greedy):
        print(f"--- {PROMPTS[i]!r} (min gap {g['min_gap']:.3f})\n{g['text']}", flush=True)


if __name__ == "__main__":
    main()
