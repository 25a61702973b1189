"""What the serving benchmarks (load.py, determinism.py) share: a `plumb serve` they start or one already running,
and one /v1/completions request with token-id prompts, timed token by token when streamed. Standard library only, so
the scripts run wherever python3 does (the GPU machine has no Node.js)."""
import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse


def add_server_args(parser):
    """--url, or --plumb and the `plumb serve` arguments after `--`."""
    parser.add_argument("--url", help="a running server, e.g. http://127.0.0.1:8000 (else one is started)")
    parser.add_argument("--plumb", default="build/release/bin/plumb", help="plumb binary to start `serve` with")
    parser.add_argument("--server-log", help="write the started server's stderr (access and throughput lines) here")
    parser.add_argument("--start-timeout", type=float, default=600, help="seconds the started server may take to load")
    parser.add_argument("serve_args", nargs=argparse.REMAINDER,
                        help="after --: arguments of `plumb serve` (e.g. -- --synthetic tiny)")


class Server:
    """The server the arguments name: `with Server(args) as url:` starts `plumb serve --port 0 ARGS` on loopback (unless
    --url is given), waits for its "listening" line, and stops it with SIGTERM on leaving."""

    def __init__(self, args):
        self.args = args
        self.proc = None
        self.log = None

    def __enter__(self):
        if self.args.url:
            return self.args.url.rstrip("/")
        serve_args = [a for a in self.args.serve_args if a != "--"]
        # A SIGTERM (from `timeout`, say) leaves through __exit__, so the server does not outlive the script holding
        # the GPU.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))
        self.log = open(self.args.server_log, "w") if self.args.server_log else None
        self.proc = subprocess.Popen([self.args.plumb, "serve", "--host", "127.0.0.1", "--port", "0", *serve_args],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        found = {}
        listening, memory_line = threading.Event(), threading.Event()

        def read_listening_line():
            for line in self.proc.stdout:
                m = re.search(r"listening on (http://[\d.]+:\d+)", line)
                if m:
                    found["url"] = m.group(1)
                    listening.set()
                    break
            # The line after it, from builds that print one, says what the server reserved (slots, KV pages, step
            # memory); stdout is drained to its end either way. A server that exits first ends the wait too.
            listening.set()
            for line in self.proc.stdout:
                if "memory" not in found:
                    found["memory"] = line.strip()
                    memory_line.set()

        reader = threading.Thread(target=read_listening_line, daemon=True)
        reader.start()
        listening.wait(self.args.start_timeout)
        if "url" not in found:
            code = None
            if not reader.is_alive():  # its stdout closed: it is exiting
                try:
                    code = self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            self.__exit__(None, None, None)
            why = f"exited with {code}" if code is not None else f"did not start within {self.args.start_timeout:.0f} s"
            sys.exit(f"plumb serve {' '.join(serve_args)} {why}" +
                     (f" (its log: {self.args.server_log})" if self.log else ""))
        if memory_line.wait(2):
            print(found["memory"], file=sys.stderr)
        return found["url"]

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log:
            self.log.close()
        return False


class RequestFailed(Exception):
    pass


def complete(url, body, timeout=600):
    """POSTs `body` to /v1/completions. Returns {"text", "completion_tokens", "cached_tokens", "ttft_s", "gaps_s"}: the
    whole text, the tokens usage counts (generated, and prompt tokens the prefix cache held), and (streamed) the time
    to the first text chunk and the gaps between later ones."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    stream = bool(body.get("stream"))
    if stream:
        body = {**body, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    try:
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            raise RequestFailed(f"HTTP {r.status}: {r.read().decode(errors='replace')}")
        if not stream:
            answer = json.loads(r.read())
            return {"text": answer["choices"][0]["text"], "completion_tokens": answer["usage"]["completion_tokens"],
                    "cached_tokens": cached_tokens(answer["usage"]), "ttft_s": None, "gaps_s": []}
        text, tokens, cached, ttft, last, gaps = [], None, None, None, None, []
        for raw in r:
            line = raw.decode().rstrip("\r\n")
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                raise RequestFailed(f"stream error: {event['error']}")
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
                cached = cached_tokens(event["usage"])
            for choice in event.get("choices", []):
                if not choice.get("text"):
                    continue
                now = time.perf_counter()
                if ttft is None:
                    ttft = now - start
                else:
                    gaps.append(now - last)
                last = now
                text.append(choice["text"])
        return {"text": "".join(text), "completion_tokens": tokens, "cached_tokens": cached, "ttft_s": ttft,
                "gaps_s": gaps}
    finally:
        conn.close()


def cached_tokens(usage):
    """usage.prompt_tokens_details.cached_tokens, 0 where a server leaves it out."""
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)


def run_clients(url, bodies, concurrency):
    """Sends every body of `bodies` ((tag, body) pairs, taken from the end) through `concurrency` clients at once.

    Returns ([(tag, answer)] in completion order, [error]); the first failed request stops every client, since the
    figures of a run with a failure would mislead."""
    answers, errors = [], []
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                if not bodies or errors:
                    return
                tag, body = bodies.pop()
            try:
                answer = complete(url, body)
            except Exception as e:
                with lock:
                    errors.append(repr(e))
                return
            with lock:
                answers.append((tag, answer))

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers, errors


def percentile(xs, p):
    """Nearest rank: the smallest value with at least p% of the values at or below it."""
    s = sorted(xs)
    if not s:
        return float("nan")
    return s[min(len(s) - 1, max(0, -(-len(s) * p // 100) - 1))]


def int_list(text):
    values = [int(v) for v in text.split(",")]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a list of positive integers")
    return values


def machine():
    """This host in a few words, for the report."""
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({cpu})"
