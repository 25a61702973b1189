#!/usr/bin/env python3
"""Trains the demo model's multi-token-prediction head (mtp.*), the main model frozen, on the demo model's corpus.

The head (qwen3-next-spec.md section 7; plumb's Qwen3NextModel::draft): from the main model's final hidden state h_t
(after its norm) and the next token x_{t+1}, m = fc([ZC-RMSNorm(embed(x_{t+1})) | ZC-RMSNorm(h_t)]), one
full-attention decoder layer (gated attention with partial RoPE at position t, the MoE MLP), a ZC-RMSNorm and the
shared lm_head give the logits of x_{t+2}. The loss is that prediction's cross-entropy, the MTP loss of DeepSeek-V3
and of Qwen3-Next's recipe, here on its own: the main model is trained already and stays as it is, so its tokens,
its references and every test of it are unchanged. The decoder layer starts from the main model's last
full-attention layer, fc from [0 | I] (the hidden state through), the norms from zero (a scale of one).

Two steps. On the GPU machine (torch and transformers), with the corpus of tools/demo_corpus.sh:

    python3 tools/train_demo_mtp.py train --model models/default --corpus .cache/demo-corpus --out /tmp/mtp

writes /tmp/mtp/mtp.safetensors (the head's tensors, BF16) and mtp_training.json (validation loss and top-1
accuracy: how often the head's greedy draft is the next-next token, given the true next token). Then, anywhere
(standard library only):

    python3 tools/train_demo_mtp.py merge --model models/default --head /tmp/mtp

adds the head's tensors to the folder's model.safetensors, sets config.json's mtp_num_hidden_layers to 1 and copies
mtp_training.json beside them.
"""
import argparse
import json
import math
import os
import pathlib
import struct
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).parent))


def read_safetensors(path):
    """The header (name -> dtype, shape, data_offsets) and the data bytes of a safetensors file; exits naming the
    file and what is wrong with it where it is missing, truncated or its header lies."""
    try:
        raw = pathlib.Path(path).read_bytes()
    except OSError as e:
        sys.exit(f"merge: cannot read {path}: {e.strerror}")
    if len(raw) < 8:
        sys.exit(f"merge: {path} is {len(raw)} bytes, too short for a safetensors header")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        sys.exit(f"merge: {path}: its header claims {n} bytes, past the file's end ({len(raw)} bytes)")
    try:
        header = json.loads(raw[8:8 + n])
    except ValueError as e:
        sys.exit(f"merge: {path}: its header is not JSON ({e})")
    data = raw[8 + n:]
    if not isinstance(header, dict):
        sys.exit(f"merge: {path}: its header is not a JSON object")
    for name, t in header.items():
        if name == "__metadata__":
            continue
        offsets = t.get("data_offsets") if isinstance(t, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
                and 0 <= offsets[0] <= offsets[1] <= len(data)):
            sys.exit(f"merge: {path}: tensor {name} has data_offsets {offsets}, not within the file's "
                     f"{len(data)} data bytes")
        if not (isinstance(t.get("dtype"), str) and isinstance(t.get("shape"), list)):
            sys.exit(f"merge: {path}: tensor {name} has no dtype or shape")
    return header, data


def write_safetensors(f, encoded_header, tensors):
    f.write(struct.pack("<Q", len(encoded_header)))
    f.write(encoded_header)
    for _, _, _, blob in tensors:
        f.write(blob)


def merge(model_dir, head_dir):
    model_dir, head_dir = pathlib.Path(model_dir), pathlib.Path(head_dir)
    config_path = model_dir / "config.json"
    try:  # everything read before anything is written, so a bad input leaves the folder as it was
        config = json.loads(config_path.read_text())
        training = (head_dir / "mtp_training.json").read_text()
    except (OSError, ValueError) as e:
        sys.exit(f"merge: {e}")
    header, data = read_safetensors(model_dir / "model.safetensors")
    head_header, head_data = read_safetensors(head_dir / "mtp.safetensors")
    metadata = header.pop("__metadata__", None)
    head_header.pop("__metadata__", None)
    if any(name.startswith("mtp.") for name in header):
        sys.exit(f"merge: {model_dir}/model.safetensors already holds mtp.* tensors")
    tensors = []  # (name, dtype, shape, bytes) in file order, then the head's by name
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = t["data_offsets"]
        tensors.append((name, t["dtype"], t["shape"], data[begin:end]))
    for name in sorted(head_header):
        t = head_header[name]
        if not name.startswith("mtp."):
            sys.exit(f"merge: {head_dir}/mtp.safetensors holds {name}, not an mtp.* tensor")
        begin, end = t["data_offsets"]
        tensors.append((name, t["dtype"], t["shape"], head_data[begin:end]))
    out_header, offset = {}, 0
    if metadata is not None:
        out_header["__metadata__"] = metadata
    for name, dtype, shape, blob in tensors:
        out_header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
    encoded = json.dumps(out_header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
    # Every file is written beside its old self first (a failed write removes them all and leaves the folder as it
    # was), then renamed over it, the model first: its mtp.* tensors are inert until config.json names the layer.
    config["mtp_num_hidden_layers"] = 1
    staged = []
    try:
        for name, write in (("model.safetensors", lambda f: write_safetensors(f, encoded, tensors)),
                            ("config.json", lambda f: f.write((json.dumps(config, indent=2) + "\n").encode())),
                            ("mtp_training.json", lambda f: f.write(training.encode()))):
            target = model_dir / name
            staged.append((target.with_name(name + ".merging"), target))
            with open(staged[-1][0], "wb") as f:
                write(f)
    except OSError as e:
        for written, _ in staged:
            written.unlink(missing_ok=True)
        sys.exit(f"merge: cannot write {e.filename}: {e.strerror}")
    for written, target in staged:
        os.replace(written, target)
    print(f"merge: {len(head_header)} mtp.* tensors added to {model_dir}/model.safetensors")


def train(args):
    import copy

    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer
    from transformers import Qwen3NextForCausalLM
    from transformers.models.qwen3_next import modeling_qwen3_next as qn

    from train_demo_model import batches, read_records, token_stream

    torch.manual_seed(args.seed)
    device = "cuda"
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = Qwen3NextForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).to(device).eval()
    model.config.output_router_logits = False
    for p in model.parameters():
        p.requires_grad_(False)
    config = model.config
    H = config.hidden_size
    full_layers = [i for i, kind in enumerate(config.layer_types) if kind == "full_attention"]

    # The head's decoder layer: a full-attention layer of the same shapes, as layer 0 of a one-layer config.
    layer_config = copy.deepcopy(config)
    layer_config.num_hidden_layers = 1
    layer_config.layer_types = ["full_attention"]
    head = torch.nn.ModuleDict({
        "pre_fc_norm_embedding": qn.Qwen3NextRMSNorm(H, eps=config.rms_norm_eps),
        "pre_fc_norm_hidden": qn.Qwen3NextRMSNorm(H, eps=config.rms_norm_eps),
        "fc": torch.nn.Linear(2 * H, H, bias=False),
        "layer": qn.Qwen3NextDecoderLayer(layer_config, 0),
        "norm": qn.Qwen3NextRMSNorm(H, eps=config.rms_norm_eps),
    }).to(device)
    head["layer"].load_state_dict(model.model.layers[full_layers[-1]].state_dict())
    with torch.no_grad():
        head["fc"].weight.zero_()
        head["fc"].weight[:, H:] = torch.eye(H)
    embed, lm_head, rotary = model.model.embed_tokens, model.lm_head, model.model.rotary_emb

    def head_logits(x):
        """x [B, L + 1] tokens -> the head's logits [B, L - 1, V] for x_2..x_L, and those targets."""
        with torch.no_grad():
            hidden = model.model(input_ids=x[:, :-1], use_cache=False).last_hidden_state  # [B, L, H], normed
            e = embed(x[:, 1:-1])                                        # x_1 .. x_{L-1}
        h = hidden[:, :-1]                                               # h_0 .. h_{L-2}
        m = head["fc"](torch.cat([head["pre_fc_norm_embedding"](e), head["pre_fc_norm_hidden"](h)], dim=-1))
        length = m.shape[1]
        positions = torch.arange(length, device=device).unsqueeze(0).expand(m.shape[0], -1)
        cos_sin = rotary(m, positions)
        causal = torch.full((length, length), float("-inf"), device=device).triu(1)[None, None].to(m.dtype)
        out = head["layer"](m, position_embeddings=cos_sin, attention_mask=causal, position_ids=positions)
        m = out[0] if isinstance(out, tuple) else out
        return lm_head(head["norm"](m)), x[:, 2:]

    train_records, valid_records = read_records(pathlib.Path(args.corpus))
    tok = Tokenizer.from_file(str(pathlib.Path(args.model) / "tokenizer.json"))
    train_stream = token_stream(tok, train_records, args.seed)
    valid_stream = token_stream(tok, valid_records, args.seed + 1)

    @torch.no_grad()
    def validate():
        head.eval()
        loss, right, count = 0.0, 0, 0
        length = args.length + 1
        for s in range(0, valid_stream.numel() - length, length * 16):
            chunk = torch.stack([valid_stream[t:t + length]
                                 for t in range(s, min(s + length * 16, valid_stream.numel() - length), length)])
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits, target = head_logits(chunk.to(device))
            loss += float(torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), target.flatten(),
                                                            reduction="sum"))
            right += int((logits.argmax(-1) == target).sum())
            count += target.numel()
        head.train()
        return loss / count, right / count

    params = [p for p in head.parameters()]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(args.seed)
    start, step = time.time(), 0
    before = validate()
    print(f"before training: validation loss {before[0]:.3f}, top-1 {before[1]:.3f}", flush=True)
    best = (float("inf"), 0.0)
    best_state, best_step = None, 0
    for step in range(args.steps):
        progress = min(1.0, max(step / args.steps, (time.time() - start) / (args.max_minutes * 60)))
        for group in opt.param_groups:
            group["lr"] = args.lr * min(1.0, (step + 1) / 50) * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))
        x = batches(train_stream, args.batch, args.length + 1, gen).to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits, target = head_logits(x)
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), target.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        last = time.time() - start > args.max_minutes * 60 or step == args.steps - 1
        if step % 100 == 99 or last:
            val = validate()
            if val[0] < best[0]:
                best, best_step = val, step + 1
                best_state = {k: v.detach().clone() for k, v in head.state_dict().items()}
            print(f"step {step + 1} loss {loss.item():.3f} validation {val[0]:.3f} top-1 {val[1]:.3f} "
                  f"{time.time() - start:.0f}s", flush=True)
        if last:
            break
    head.load_state_dict(best_state)
    minutes = (time.time() - start) / 60

    # The decoder layer's tensors under the names a checkpoint gives its layers: those transformers saves for a
    # one-layer model holding it as its layer 0, renamed from model.layers.0. to mtp.layers.0.
    holder = Qwen3NextForCausalLM(layer_config).to(device)
    holder.model.layers[0].load_state_dict(head["layer"].state_dict())
    holder.to(torch.bfloat16).save_pretrained(out / "holder", safe_serialization=True)
    from safetensors.torch import load_file
    tensors = {name.replace("model.layers.0.", "mtp.layers.0.", 1): t.contiguous()
               for name, t in load_file(str(out / "holder" / "model.safetensors")).items()
               if name.startswith("model.layers.0.")}
    for name in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        tensors[f"mtp.{name}.weight"] = head[name].weight.detach().to(torch.bfloat16).cpu().contiguous()
    tensors["mtp.fc.weight"] = head["fc"].weight.detach().to(torch.bfloat16).cpu().contiguous()
    save_file({k: v.cpu() for k, v in tensors.items()}, str(out / "mtp.safetensors"), metadata={"format": "pt"})
    (out / "mtp_training.json").write_text(json.dumps({
        "objective": "cross-entropy of x_{t+2} from h_t and x_{t+1}, main model frozen",
        "init": f"decoder layer from main layer {full_layers[-1]}, fc = [0 | I], norms 0",
        "steps": step + 1, "best_step": best_step, "minutes": round(minutes, 2), "seed": args.seed,
        "batch": args.batch, "length": args.length, "lr": args.lr,
        "validation_loss_before": round(before[0], 4), "validation_top1_before": round(before[1], 4),
        "validation_loss": round(best[0], 4), "validation_top1": round(best[1], 4)}, indent=1) + "\n")
    print(f"head: validation loss {best[0]:.4f}, top-1 {best[1]:.4f} (step {best_step} of {step + 1}, "
          f"{minutes:.1f} minutes); {len(tensors)} tensors in {out / 'mtp.safetensors'}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train the head on the GPU machine")
    t.add_argument("--model", default="models/default")
    t.add_argument("--corpus", default=".cache/demo-corpus")
    t.add_argument("--out", default="/tmp/mtp")
    t.add_argument("--steps", type=int, default=1500)
    t.add_argument("--max-minutes", type=float, default=3.0, help="stop training past this wall time")
    t.add_argument("--batch", type=int, default=32)
    t.add_argument("--length", type=int, default=512)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--seed", type=int, default=1129)
    m = sub.add_parser("merge", help="add a trained head to the model folder (no torch needed)")
    m.add_argument("--model", default="models/default")
    m.add_argument("--head", default="/tmp/mtp")
    args = parser.parse_args()
    if args.command == "train":
        train(args)
    else:
        merge(args.model, args.head)


if __name__ == "__main__":
    main()
