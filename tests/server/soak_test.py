#!/usr/bin/env python3
"""A bounded loopback soak of `plumb serve --synthetic tiny` (issue 24): --streams concurrent streamed greedy
completions for --seconds, alongside --idle idle connections (re-opened as the server's idle timeout closes them),
--slow senders trickling a header a byte at a time, and --cancellers that drop streams part way. It fails unless:

- /health, probed from a separate process on a fresh connection every 20 ms, answers 200 within --health-ms each time;
- every stream that completed is whole and carries its own prompt's text: each asks for one of 8 prompts, greedily,
  and must equal that prompt's solo answer (the 8 answers differ, so a crossed stream shows);
- every slow sender is answered 408 at the request deadline;
- afterwards the state slots and KV pages in use (/metrics) and the server's open descriptors return to their
  starting values.

  soak_test.py PLUMB [--seconds 120] [--streams 64] [--idle 1000] [--slow 8] [--cancellers 8] [--health-ms 100]
"""
import argparse
import json
import os
import random
import re
import resource
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench", "server"))
import serving  # noqa: E402

MAX_TOKENS = 16
REQUEST_TIMEOUT_S = 3  # the server's --request-timeout, so slow senders meet it often


def address(url):
    parts = urllib.parse.urlsplit(url)
    return parts.hostname, parts.port


def health_probe(url, seconds):
    """The prober process: prints {"probes", "failures", "max_ms"} as JSON."""
    host, port = address(url)
    probes, failures, worst = 0, [], 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.perf_counter()
        try:
            with socket.create_connection((host, port), timeout=5) as s:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                raw = b""
                while chunk := s.recv(4096):
                    raw += chunk
            ok = raw.startswith(b"HTTP/1.1 200 ")
        except OSError as e:
            ok, raw = False, repr(e).encode()
        ms = (time.perf_counter() - start) * 1000
        probes += 1
        worst = max(worst, ms)
        if not ok:
            failures.append(raw[:80].decode(errors="replace"))
        time.sleep(0.02)
    print(json.dumps({"probes": probes, "failures": failures[:5], "failed": len(failures), "max_ms": worst}))


def metrics(url):
    host, port = address(url)
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    text = raw.decode()
    return {name: float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))
            for name in ("plumb_state_slots_used", "plumb_kv_pages_used", "plumb_queue_depth")}


def descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class Soak:
    def __init__(self, url, args, prompts, references):
        self.url, self.args, self.prompts, self.references = url, args, prompts, references
        self.end = time.monotonic() + args.seconds
        self.lock = threading.Lock()
        self.counts = {"streams": 0, "cancelled": 0, "slow_408": 0, "idle_reopened": 0}
        self.errors = []

    def running(self):
        return time.monotonic() < self.end

    def count(self, key):
        with self.lock:
            self.counts[key] += 1

    def error(self, what):
        with self.lock:
            self.errors.append(what)

    def body(self, i, stream=True):
        return {"prompt": self.prompts[i], "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True,
                "stream": stream}

    def streamer(self, k):
        for n in range(10 ** 9):
            if not self.running():
                return
            i = (k + n) % len(self.prompts)
            try:
                answer = serving.complete(self.url, self.body(i), timeout=120)
            except Exception as e:  # any failure of a completion the soak did not cancel is a failure
                self.error(f"stream {k}: {e!r}")
                return
            if answer["text"] != self.references[i] or answer["completion_tokens"] != MAX_TOKENS:
                self.error(f"stream {k}: prompt {i} gave {answer['text']!r} ({answer['completion_tokens']} tokens), "
                           f"alone {self.references[i]!r}")
                return
            self.count("streams")

    def canceller(self, k):
        host, port = address(self.url)
        rng = random.Random(k)
        while self.running():
            payload = json.dumps(self.body(rng.randrange(len(self.prompts)))).encode()
            request = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
            try:
                with socket.create_connection((host, port), timeout=30) as s:
                    s.sendall(request)
                    raw = b""
                    if rng.random() < 0.7:  # else dropped before any token: up to the first event
                        while b"data: " not in raw and (chunk := s.recv(4096)):
                            raw += chunk
                    if raw and not raw.startswith(b"HTTP/1.1 200 "):
                        self.error(f"canceller {k}: {raw[:60]!r}")
                        return
            except OSError as e:
                self.error(f"canceller {k}: {e!r}")
                return
            self.count("cancelled")
            time.sleep(0.05)

    def slow_sender(self, k):
        host, port = address(self.url)
        while self.running():
            raw = b""
            try:
                with socket.create_connection((host, port), timeout=REQUEST_TIMEOUT_S + 10) as s:
                    s.sendall(b"GET /health HTTP/1.1\r\nX-Slow: ")
                    s.setblocking(False)
                    started = time.monotonic()
                    while time.monotonic() - started < REQUEST_TIMEOUT_S + 5:
                        try:
                            s.send(b"a")
                        except OSError:
                            pass
                        time.sleep(0.25)
                        try:
                            chunk = s.recv(4096)
                        except BlockingIOError:
                            continue
                        raw += chunk
                        if not chunk:
                            break
            except OSError:
                pass  # a reset after the answer: what arrived is judged
            if raw.startswith(b"HTTP/1.1 408 "):
                self.count("slow_408")
            else:
                self.error(f"slow sender {k}: got {raw[:60]!r} instead of a 408")
                return

    def idle_storm(self):
        host, port = address(self.url)
        held = []
        try:
            while self.running():
                alive = []
                for s in held:  # the server closes idle connections after --idle-timeout: open them again
                    try:
                        gone = s.recv(1, socket.MSG_DONTWAIT) == b""
                    except BlockingIOError:
                        gone = False
                    except OSError:
                        gone = True
                    if gone:
                        s.close()
                        self.count("idle_reopened")
                    else:
                        alive.append(s)
                held = alive
                while len(held) < self.args.idle:
                    held.append(socket.create_connection((host, port), timeout=10))
                time.sleep(1)
        except OSError as e:
            self.error(f"idle storm: {e!r}")
        finally:
            for s in held:
                s.close()


def wait_for(predicate, seconds=20):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("plumb")
    p.add_argument("--seconds", type=float, default=float(os.environ.get("PLUMB_SOAK_SECONDS", 120)))
    p.add_argument("--streams", type=int, default=64)
    p.add_argument("--idle", type=int, default=1000)
    p.add_argument("--slow", type=int, default=8)
    p.add_argument("--cancellers", type=int, default=8)
    p.add_argument("--health-ms", type=float, default=100)
    p.add_argument("--probe", help=argparse.SUPPRESS)  # the prober process: its URL
    args = p.parse_args()
    if args.probe:
        return health_probe(args.probe, args.seconds)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.idle + 1024)), hard))

    class ServeArgs:
        url, server_log, start_timeout = None, None, 120
        serve_args = ["--synthetic", "tiny", "--max-batch", str(args.streams), "--log-format", "none",
                      "--request-timeout", str(REQUEST_TIMEOUT_S), "--idle-timeout", "20"]
    ServeArgs.plumb = args.plumb
    server = serving.Server(ServeArgs)
    failures = []

    def check(ok, what):
        print(("ok    " if ok else "FAIL  ") + what, flush=True)
        if not ok:
            failures.append(what)

    with server as url:
        pid = server.proc.pid
        rng = random.Random(24)
        prompts = [[rng.randrange(512) for _ in range(8 + 3 * i)] for i in range(8)]
        before = metrics(url)
        references = [serving.complete(url, {"prompt": q, "max_tokens": MAX_TOKENS, "temperature": 0,
                                             "ignore_eos": True, "stream": True})["text"] for q in prompts]
        check(len(set(references)) == len(references), f"the {len(prompts)} solo answers differ, so crossing shows")
        fds_before = descriptors(pid)
        probe = subprocess.Popen([sys.executable, __file__, args.plumb, "--probe", url, "--seconds", str(args.seconds)],
                                 stdout=subprocess.PIPE, text=True)
        soak = Soak(url, args, prompts, references)
        threads = [threading.Thread(target=soak.idle_storm)]
        threads += [threading.Thread(target=soak.streamer, args=(k,)) for k in range(args.streams)]
        threads += [threading.Thread(target=soak.slow_sender, args=(k,)) for k in range(args.slow)]
        threads += [threading.Thread(target=soak.canceller, args=(k,)) for k in range(args.cancellers)]
        print(f"soak: {args.seconds:.0f} s, {args.streams} streams, {args.idle} idle connections, {args.slow} slow "
              f"senders, {args.cancellers} cancellers", flush=True)
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        health = json.loads(probe.communicate(timeout=60)[0])
        print("soak:", json.dumps(soak.counts), "health:", json.dumps(health), flush=True)
        for e in soak.errors[:10]:
            print("  ", e)
        check(not soak.errors, f"no stream lost, cut or crossed, every slow sender answered 408 ({len(soak.errors)} "
                               "errors)")
        check(soak.counts["streams"] >= args.streams, f"{soak.counts['streams']} streams completed whole")
        check(soak.counts["slow_408"] > 0 and soak.counts["cancelled"] > 0, "slow senders and cancellations ran")
        check(health["failed"] == 0 and health["probes"] > 0, f"/health answered 200 {health['probes']} times")
        check(health["max_ms"] <= args.health_ms,
              f"/health answered within {args.health_ms:.0f} ms throughout (slowest {health['max_ms']:.1f} ms)")
        settled = wait_for(lambda: metrics(url) == before)
        check(settled, f"slots, pages and queue return to {before} (now {metrics(url)})")
        check(wait_for(lambda: descriptors(pid) <= fds_before),
              f"the server's open descriptors return to {fds_before} (now {descriptors(pid)})")
    print("soak: PASSED" if not failures else f"soak: FAILED: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
