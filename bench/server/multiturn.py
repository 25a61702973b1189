#!/usr/bin/env python3
"""Multi-turn chat benchmark of `plumb serve` and its prefix cache (not a test). At each concurrency level, that many
chat sessions run at once, each of --turns turns one after another: turn 1 sends the session's system prompt of
--system-tokens ids and a message of --new-tokens; turn k sends turn k-1's prompt, its answer (--max-tokens ids,
greedy, ignore_eos) and a new message, --think-ms after the answer ended (a user reading it). Every session has a
system prompt of its own, so what a turn finds in the cache is its own session's earlier turns. The server runs once
per mode (--modes): `cache` as started (its prefix cache keeps prompts' states, and re-runs finished answers while
idle so that it keeps theirs too), `prompt-cache` with --no-prefix-cache-answers, `no-cache` with --no-prefix-cache.
Per turn the report gives the prompt length, the cached tokens the server reported (usage.prompt_tokens_details), and
the time to first token (TTFT) seen by the client, as a Markdown table on stdout and as JSON (--json FILE).

The answer goes into the next prompt as the ids of the text the server streamed where it has no tokenizer (the
--synthetic models and token-id-only folders stream " 17 4 99"); with a tokenizer its ids are not in the stream, and
the same number of stand-in ids take their place, which the cache cannot have kept. With prompt-cache a turn resumes
at the last 64-token boundary of the turn before's prompt; with cache, at the last boundary of its answer where the
server was idle long enough to re-run it (docs/server.md).

  python3 bench/server/multiturn.py --plumb build/release/bin/plumb --concurrency 1,16 --turns 10 \\
      --system-tokens 2048 --new-tokens 200 --max-tokens 200 --json multiturn.json -- --device cuda --synthetic \\
      qwen3.5-35b-a3b --max-batch 16
"""
import argparse
import datetime
import json
import random
import statistics
import sys
import threading
import time

import serving


def answer_ids(text, count, rng, vocab):
    """The ids of a token-id model's streamed text, or `count` stand-ins where the text is words."""
    words = text.split()
    if len(words) == count and all(w.isdigit() for w in words):
        return [int(w) for w in words]
    return [rng.randrange(vocab) for _ in range(count)]


def run_sessions(url, args, concurrency, seed):
    """`concurrency` sessions at once; returns ([session][turn] answer dicts with "prompt_tokens", seconds)."""
    results, errors = [None] * concurrency, []

    def session(index):
        rng = random.Random(seed * 1000003 + index)
        prompt = [rng.randrange(args.vocab) for _ in range(args.system_tokens)]
        turns = []
        try:
            for _ in range(args.turns):
                prompt = prompt + [rng.randrange(args.vocab) for _ in range(args.new_tokens)]
                answer = serving.complete(url, {"prompt": prompt, "max_tokens": args.max_tokens, "temperature": 0,
                                                "ignore_eos": True, "stream": True})
                if answer["completion_tokens"] != args.max_tokens:
                    raise serving.RequestFailed(f"{answer['completion_tokens']} tokens, not {args.max_tokens}")
                answer["prompt_tokens"] = len(prompt)
                turns.append(answer)
                prompt = prompt + answer_ids(answer["text"], args.max_tokens, rng, args.vocab)
                time.sleep(args.think_ms / 1e3)
        except Exception as e:
            errors.append(repr(e))
        results[index] = turns

    start = time.perf_counter()
    threads = [threading.Thread(target=session, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        sys.exit(f"multiturn: concurrency {concurrency}: {errors[0]}")
    return results, time.perf_counter() - start


def level_figures(sessions, seconds, args):
    turns = []
    for k in range(args.turns):
        answers = [s[k] for s in sessions]
        ttfts = [a["ttft_s"] * 1e3 for a in answers]
        turns.append({"turn": k + 1, "prompt_tokens": answers[0]["prompt_tokens"],
                      "cached_tokens_median": statistics.median(a["cached_tokens"] or 0 for a in answers),
                      "ttft_ms_p50": serving.percentile(ttfts, 50), "ttft_ms_max": max(ttfts)})
    tokens = sum(a["completion_tokens"] for s in sessions for a in s)
    return {"seconds": seconds, "tokens_per_s": tokens / seconds,
            "last_over_first_ttft": turns[-1]["ttft_ms_p50"] / turns[0]["ttft_ms_p50"], "turns": turns}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", type=serving.int_list, default=[1, 16], help="sessions at once, per level")
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--system-tokens", type=int, default=2048, help="each session's system prompt")
    p.add_argument("--new-tokens", type=int, default=200, help="each turn's new message")
    p.add_argument("--max-tokens", type=int, default=200, help="each turn's answer")
    p.add_argument("--think-ms", type=float, default=0.0, help="between an answer's end and the next turn")
    p.add_argument("--vocab", type=int, default=512,
                   help="prompt ids are drawn below this (512: the smallest served vocabulary, --synthetic tiny's)")
    p.add_argument("--modes", default="cache,no-cache",
                   help="server runs, comma-separated: cache (as started), prompt-cache (with "
                        "--no-prefix-cache-answers), no-cache (with --no-prefix-cache)")
    p.add_argument("--json", help="write the figures here")
    serving.add_server_args(p)
    args = p.parse_args()
    if min(args.turns, args.system_tokens, args.new_tokens, args.max_tokens, args.vocab) < 1 or args.think_ms < 0:
        p.error("--turns, --system-tokens, --new-tokens, --max-tokens and --vocab must be at least 1, --think-ms 0")
    flags = {"cache": [], "prompt-cache": ["--no-prefix-cache-answers"], "no-cache": ["--no-prefix-cache"]}
    modes = args.modes.split(",")
    if not modes or any(m not in flags for m in modes) or (args.url and len(modes) > 1):
        p.error("--modes: cache, prompt-cache and/or no-cache (one mode with --url)")

    server = args.url or "plumb serve " + " ".join(a for a in args.serve_args if a != "--")
    print(f"{server}: {args.turns} turns a session, a system prompt of {args.system_tokens} ids, "
          f"{args.new_tokens} new ids a turn, answers of {args.max_tokens} (greedy, ignore_eos, streamed), "
          f"{args.think_ms:g} ms between an answer and the next turn; client on {serving.machine()}", flush=True)
    f = lambda x: f"{x:.0f}" if x >= 100 else f"{x:.3g}"
    results = []
    for mode in modes:
        run_args = argparse.Namespace(**vars(args))
        run_args.serve_args = [*args.serve_args, *flags[mode]]
        if args.server_log:
            run_args.server_log = f"{args.server_log}.{mode}"
        with serving.Server(run_args) as url:
            # Untimed: the server's first requests (graph capture, allocations) are not a turn's.
            run_sessions(url, argparse.Namespace(**{**vars(args), "turns": 2}), 1, seed=0)
            for level, concurrency in enumerate(args.concurrency):
                sessions, seconds = run_sessions(url, args, concurrency, seed=level + 1)
                results.append({"mode": mode, "concurrency": concurrency,
                                **level_figures(sessions, seconds, args)})
        # Each mode's table as soon as it is done, and the JSON so far: a run cut short keeps what it measured.
        print("\n| cache | sessions | turn | prompt tokens | cached (median) | TTFT p50 ms | TTFT max ms |")
        print("|---|---|---|---|---|---|---|")
        for r in results:
            if r["mode"] != mode:
                continue
            for t in r["turns"]:
                print(f"| {r['mode']} | {r['concurrency']} | {t['turn']} | {t['prompt_tokens']} | "
                      f"{t['cached_tokens_median']:.0f} | {f(t['ttft_ms_p50'])} | {f(t['ttft_ms_max'])} |", flush=True)
        if args.json:
            with open(args.json, "w") as out:
                json.dump({"benchmark": "bench/server/multiturn.py", "server": server, "turns": args.turns,
                           "system_tokens": args.system_tokens, "new_tokens": args.new_tokens,
                           "max_tokens": args.max_tokens, "think_ms": args.think_ms, "client": serving.machine(),
                           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                           "results": results}, out, indent=2)

    print("\n| cache | sessions | generated tokens/s | last turn's TTFT / first turn's |")
    print("|---|---|---|---|")
    for r in results:
        print(f"| {r['mode']} | {r['concurrency']} | {f(r['tokens_per_s'])} | {r['last_over_first_ttft']:.2f} |")
    if args.json:
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
