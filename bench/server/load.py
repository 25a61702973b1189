#!/usr/bin/env python3
"""Load benchmark of `plumb serve` (not a test): at each concurrency level, that many clients send streamed, greedy
(or --sampling) /v1/completions requests back to back until the level's request count is reached, each with its own prompt of
--prompt-tokens random token ids and ignore_eos, so every request generates exactly --max-tokens tokens. Token-id
prompts need no tokenizer, so this drives the random-weight models of `plumb serve --synthetic` (the real shapes) as
well as a model folder. Per level it reports requests, requests/s, generated tokens/s, and p50/p99 of the time to
first token (TTFT) and of the inter-token latency (ITL, the gaps between a stream's tokens), as a Markdown table on
stdout and as JSON (--json FILE). Times are seen by the client: host, HTTP and queueing included.

  python3 bench/server/load.py --plumb build/release/bin/plumb --concurrency 1,16,64 --requests 8,64,128 \\
      --prompt-tokens 512 --max-tokens 64 --json load.json -- --device cuda --synthetic qwen3.5-35b-a3b --max-batch 64
  python3 bench/server/load.py --url http://127.0.0.1:8000 ...      (a server already running)
"""
import argparse
import datetime
import json
import random
import sys
import time

import serving


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", type=serving.int_list, default=[1, 16, 64], help="levels, comma-separated")
    p.add_argument("--requests", type=serving.int_list,
                   help="requests per level: one count for all, or one per level (default: 4 x the concurrency)")
    p.add_argument("--prompt-tokens", type=int, default=512, help="prompt length of every request")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens every request generates")
    p.add_argument("--vocab", type=int, default=512,
                   help="prompt ids are drawn below this (512: the smallest served vocabulary, --synthetic tiny's)")
    p.add_argument("--warmup", type=int, default=2, help="untimed requests before the first level")
    p.add_argument("--seed", type=int, default=1, help="seed of the prompts")
    p.add_argument("--sampling", default='{"temperature": 0}',
                   help='sampling fields of every request as a JSON object (default greedy), e.g. '
                        '\'{"temperature": 0.8, "top_p": 0.95}\'')
    p.add_argument("--json", help="write the figures here")
    serving.add_server_args(p)
    args = p.parse_args()
    levels = args.concurrency
    counts = args.requests or [4 * c for c in levels]
    if len(counts) == 1:
        counts = counts * len(levels)
    if len(counts) != len(levels):
        p.error(f"--requests gives {len(counts)} counts for {len(levels)} levels")
    if args.prompt_tokens < 1 or args.max_tokens < 1 or args.vocab < 1:
        p.error("--prompt-tokens, --max-tokens and --vocab must be at least 1")
    try:
        sampling = json.loads(args.sampling)
    except json.JSONDecodeError as e:
        p.error(f"--sampling: {e}")
    if not isinstance(sampling, dict):
        p.error("--sampling must be a JSON object")
    rng = random.Random(args.seed)

    def body():
        return {"prompt": [rng.randrange(args.vocab) for _ in range(args.prompt_tokens)], "max_tokens": args.max_tokens,
                **sampling, "ignore_eos": True, "stream": True}

    results = []
    with serving.Server(args) as url:
        for _ in range(args.warmup):
            serving.complete(url, body())
        for concurrency, total in zip(levels, counts):
            bodies = [(None, body()) for _ in range(total)]
            start = time.perf_counter()
            answers, errors = serving.run_clients(url, bodies, concurrency)
            answers = [a for _, a in answers]
            seconds = time.perf_counter() - start
            if errors:
                sys.exit(f"load: concurrency {concurrency}: {errors[0]}")
            short = [a["completion_tokens"] for a in answers if a["completion_tokens"] != args.max_tokens]
            if short:
                sys.exit(f"load: concurrency {concurrency}: {len(short)} requests generated {short[:4]} tokens, "
                         f"not {args.max_tokens}")
            ttfts = [a["ttft_s"] * 1e3 for a in answers]
            gaps = [g * 1e3 for a in answers for g in a["gaps_s"]]
            tokens = sum(a["completion_tokens"] for a in answers)
            results.append({"concurrency": concurrency, "requests": total, "seconds": seconds,
                            "requests_per_s": total / seconds, "tokens_per_s": tokens / seconds,
                            "ttft_ms_p50": serving.percentile(ttfts, 50), "ttft_ms_p99": serving.percentile(ttfts, 99),
                            "itl_ms_p50": serving.percentile(gaps, 50), "itl_ms_p99": serving.percentile(gaps, 99)})

    server = args.url or "plumb serve " + " ".join(a for a in args.serve_args if a != "--")
    drawn = "greedy" if sampling == {"temperature": 0} else json.dumps(sampling)
    print(f"{server}: prompts of {args.prompt_tokens} token ids, {args.max_tokens} generated per request ({drawn}, "
          f"ignore_eos, streamed); client on {serving.machine()}\n")
    print("| concurrency | requests | requests/s | tokens/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms |")
    print("|---|---|---|---|---|---|---|---|")
    f = lambda x: f"{x:.0f}" if x >= 100 else f"{x:.3g}"
    for r in results:
        print(f"| {r['concurrency']} | {r['requests']} | {f(r['requests_per_s'])} | {f(r['tokens_per_s'])} | "
              f"{f(r['ttft_ms_p50'])} | {f(r['ttft_ms_p99'])} | {f(r['itl_ms_p50'])} | {f(r['itl_ms_p99'])} |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"benchmark": "bench/server/load.py", "server": server, "prompt_tokens": args.prompt_tokens,
                       "max_tokens": args.max_tokens, "sampling": sampling, "client": serving.machine(),
                       "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                       "results": results}, out, indent=2)
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
