#!/usr/bin/env python3
"""bench/server's load, multi-turn and determinism scripts, and `plumb serve --synthetic`, on the CPU in seconds.

  serve_bench_test.py CASE PLUMB
  load       load.py against `plumb serve --synthetic tiny` at concurrency 1 and 4: every level reported, in the
             table and the JSON, with positive rates and latencies
  tokenless  a --synthetic server has no tokenizer: chat and text prompts get a 400 saying so, token ids an answer
             whose text is one " ID" per token
  multiturn  multiturn.py against `plumb serve --synthetic tiny` in its three modes: every turn after the first
             reports as cached the last 64-token boundary of the turn before's answer (re-run while the server was
             idle), or of its prompt with --no-prefix-cache-answers, and none with --no-prefix-cache
  planted    determinism.py against a stand-in server whose greedy answers drift (every third request): exit 1, more
             than one distinct text; the same stand-in answering steadily: exit 0
"""
import http.server
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SERVER_DIR = os.path.join(ROOT, "bench", "server")
sys.path.insert(0, SERVER_DIR)
import serving  # noqa: E402
from checklist import check, verdict  # noqa: E402 (tests/bench/checklist.py)



def script(name, *args):
    proc = subprocess.run([sys.executable, os.path.join(SERVER_DIR, name), *args], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=240)
    print(proc.stdout)
    return proc


def load(plumb, work):
    out = os.path.join(work, "load.json")
    proc = script("load.py", "--plumb", plumb, "--concurrency", "1,4", "--requests", "2,8", "--prompt-tokens", "16",
                  "--max-tokens", "4", "--json", out, "--", "--synthetic", "tiny")
    check(proc.returncode == 0, f"load.py exits 0 (got {proc.returncode})")
    check(re.search(r"^\| 4 \| 8 \| ", proc.stdout, re.M) is not None, "the table has the concurrency-4 row")
    if not os.path.exists(out):
        return check(False, "load.py wrote its JSON")
    results = json.load(open(out))["results"]
    check([(r["concurrency"], r["requests"]) for r in results] == [(1, 2), (4, 8)], "the JSON has both levels")
    keys = ["requests_per_s", "tokens_per_s", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p99"]
    check(all(math.isfinite(r[k]) and r[k] > 0 for r in results for k in keys), "every figure is finite and > 0")


def multiturn(plumb, work):
    out = os.path.join(work, "multiturn.json")
    # Prompts of 170, 280 and 390 tokens (130 + 40, then the answer of 70 and 40 more a turn). With prompt states
    # alone a turn resumes at the last boundary of the turn before's prompt: 128, then 256. With the answers re-run in
    # the 300 ms between turns, at the last boundary of the turn before's answer: 192 (170 + 70 = 240), then 320; at
    # two sessions one session's re-run may yield to the other's next turn, so a turn resumes between the two.
    proc = script("multiturn.py", "--plumb", plumb, "--concurrency", "1,2", "--turns", "3", "--system-tokens", "130",
                  "--new-tokens", "40", "--max-tokens", "70", "--think-ms", "300", "--modes",
                  "cache,prompt-cache,no-cache", "--json", out, "--", "--synthetic", "tiny")
    check(proc.returncode == 0, f"multiturn.py exits 0 (got {proc.returncode})")
    if not os.path.exists(out):
        return check(False, "multiturn.py wrote its JSON")
    results = json.load(open(out))["results"]
    check([(r["mode"], r["concurrency"]) for r in results] ==
          [(m, c) for m in ("cache", "prompt-cache", "no-cache") for c in (1, 2)], "the JSON has each mode at both levels")
    prompt_ends, answer_ends = [0, 128, 256], [0, 192, 320]
    for r in results:
        prompts = [t["prompt_tokens"] for t in r["turns"]]
        cached = [t["cached_tokens_median"] for t in r["turns"]]
        check(prompts == [170, 280, 390], f"{r['mode']} x{r['concurrency']}: prompt lengths {prompts}")
        what = f"{r['mode']} x{r['concurrency']}: cached tokens {cached}"
        if r["mode"] == "cache" and r["concurrency"] == 2:
            check(all(lo <= c <= hi for lo, c, hi in zip(prompt_ends, cached, answer_ends)),
                  f"{what}, want each between {prompt_ends} and {answer_ends}")
        else:
            want = {"cache": answer_ends, "prompt-cache": prompt_ends, "no-cache": [0, 0, 0]}[r["mode"]]
            check(cached == want, f"{what}, want {want}")
        check(all(math.isfinite(t["ttft_ms_p50"]) and t["ttft_ms_p50"] > 0 for t in r["turns"]), "TTFTs > 0")


def post(url, path, body):
    request = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def tokenless(plumb, work):
    class Args:
        url, server_log, start_timeout, serve_args = None, None, 120, ["--synthetic", "tiny"]
    Args.plumb = plumb
    with serving.Server(Args) as url:
        status, body = post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
        message = body.get("error", {}).get("message", "")
        check(status == 400 and "no tokenizer" in message and "token ids" in message, f"chat: 400 ({status}: {message})")
        status, body = post(url, "/v1/completions", {"prompt": "hello", "max_tokens": 2})
        check(status == 400 and "no tokenizer" in body.get("error", {}).get("message", ""), f"text prompt: 400 ({status})")
        status, body = post(url, "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 5, "temperature": 0})
        text = body["choices"][0]["text"] if status == 200 else ""
        check(re.fullmatch(r"( \d+){5}", text) is not None, f"token ids: 200 with five ' ID' pieces ({status}: {text!r})")


def planted(plumb, work):
    for mode, want in [("drift", 1), ("steady", 0)]:
        count = {"n": 0}
        lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    count["n"] += 1
                    drift = mode == "drift" and count["n"] % 3 == 0
                text = f" {len(body['prompt'])}" + (" x" if drift else "")
                n = body["max_tokens"]
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for piece in [text[:2], text[2:]]:
                        self.wfile.write(b"data: " + json.dumps({"choices": [{"text": piece}]}).encode() + b"\n\n")
                    usage = {"choices": [], "usage": {"completion_tokens": n}}
                    self.wfile.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
                    return
                answer = json.dumps({"choices": [{"text": text}], "usage": {"completion_tokens": n}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 64  # the default 5 resets connections of 16 clients at once

        server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        proc = script("determinism.py", "--url", f"http://127.0.0.1:{server.server_address[1]}", "-n", "50")
        server.shutdown()
        distinct = re.search(r"(\d+) distinct text", proc.stdout)
        check(proc.returncode == want, f"{mode}: exit {want} (got {proc.returncode})")
        check(distinct is not None and (int(distinct.group(1)) > 1) == (mode == "drift"),
              f"{mode}: the distinct texts counted ({distinct.group(1) if distinct else 'none'})")


def main():
    case, plumb = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as work:
        {"load": load, "multiturn": multiturn, "tokenless": tokenless, "planted": planted}[case](plumb, work)
    sys.exit(verdict(f"serve_bench_test {case}"))


if __name__ == "__main__":
    main()
