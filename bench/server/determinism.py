#!/usr/bin/env python3
"""Determinism of `plumb serve` under load (a check: exits 1 on failure): N greedy completions of ONE prompt, sent
among other requests at the same time (other prompts of other lengths, sampled and greedy, streamed and not, with
other token limits), must all give the same text. The N greedy requests themselves alternate streamed and whole
answers, so a stream reassembled must equal the answer sent at once. Prints how many distinct texts the N answers
have; anything but 1 fails, listing them. Prompts are token ids (/v1/completions), so it runs on any served model,
a --synthetic one included.

  python3 bench/server/determinism.py --plumb build/release/bin/plumb -n 1000 --concurrency 32 -- --model models/default
  python3 bench/server/determinism.py --url http://127.0.0.1:8000 -n 50       (a server already running)
"""
import argparse
import collections
import json
import random
import sys

import serving


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, default=50, help="greedy completions of the one prompt")
    p.add_argument("--others", type=int, default=1, help="other requests sent per greedy one")
    p.add_argument("--concurrency", type=int, default=16, help="requests in flight at once")
    p.add_argument("--prompt-tokens", type=int, default=40, help="length of the one prompt; the others vary around it")
    p.add_argument("--max-tokens", type=int, default=24, help="tokens each greedy answer generates (ignore_eos)")
    p.add_argument("--vocab", type=int, default=512, help="prompt ids are drawn below this")
    p.add_argument("--seed", type=int, default=1, help="seed of the prompts, the order and the sampled requests")
    p.add_argument("--json", help="write the outcome here")
    serving.add_server_args(p)
    args = p.parse_args()
    if min(args.n, args.concurrency, args.prompt_tokens, args.max_tokens, args.vocab) < 1 or args.others < 0:
        p.error("-n, --concurrency, --prompt-tokens, --max-tokens and --vocab must be at least 1, --others at least 0")
    rng = random.Random(args.seed)
    prompt = [rng.randrange(args.vocab) for _ in range(args.prompt_tokens)]
    jobs = [("greedy", {"prompt": prompt, "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True,
                        "stream": i % 2 == 1}) for i in range(args.n)]
    for i in range(args.n * args.others):
        other = {"prompt": [rng.randrange(args.vocab) for _ in range(rng.randint(1, 3 * args.prompt_tokens))],
                 "max_tokens": rng.randint(1, 2 * args.max_tokens), "ignore_eos": True, "stream": rng.random() < 0.5}
        if i % 2:
            other["temperature"] = 0
        else:
            other.update(temperature=0.9, top_p=0.95, top_k=40, seed=rng.randrange(1 << 31))
        jobs.append(("other", other))
    rng.shuffle(jobs)

    with serving.Server(args) as url:
        answers, errors = serving.run_clients(url, jobs, args.concurrency)
    texts = [answer["text"] for kind, answer in answers if kind == "greedy"]
    if errors:
        sys.exit(f"determinism: a request failed: {errors[0]}")
    distinct = collections.Counter(texts)
    print(f"determinism: {len(texts)} greedy completions of one {args.prompt_tokens}-token prompt among "
          f"{args.n * args.others} other requests, {args.concurrency} in flight: {len(distinct)} distinct text(s)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"n": len(texts), "others": args.n * args.others, "concurrency": args.concurrency,
                       "prompt_tokens": args.prompt_tokens, "max_tokens": args.max_tokens,
                       "distinct_texts": len(distinct), "texts": dict(distinct.most_common(10))}, out, indent=2)
    if len(distinct) != 1:
        for text, count in distinct.most_common(10):
            print(f"  {count:5d} x {text[:100]!r}")
        sys.exit(1)


if __name__ == "__main__":
    main()
