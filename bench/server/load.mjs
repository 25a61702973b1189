// Load benchmark of `plumb serve` (not a test): starts a server on loopback, sends a fixed mix of streamed chat
// requests at concurrency 1, 8 and 32, and reports requests/s, time to first token and inter-token latency
// (p50/p99), as a Markdown table on stdout and JSON in --json FILE. Every request is greedy with ignore_eos, so each
// one generates exactly --max-tokens tokens and runs are comparable.
//
//   node bench/server/load.mjs --plumb build/release/bin/plumb --model models/default [--device cpu]
//        [--max-tokens 32] [--requests-per-level 1:8,8:32,32:64] [--json out.json]
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import { parseArgs } from "node:util";

const { values: args } = parseArgs({
  options: {
    plumb: { type: "string", default: "build/release/bin/plumb" },
    model: { type: "string", default: "models/default" },
    device: { type: "string", default: "cpu" },
    "max-tokens": { type: "string", default: "32" },
    "requests-per-level": { type: "string", default: "1:8,8:32,32:64" },
    json: { type: "string" },
  },
});
const maxTokens = Number(args["max-tokens"]);
const levels = args["requests-per-level"].split(",").map((l) => l.split(":").map(Number));

// The fixed prompt mix: short questions, a paragraph, and a long context (about 20 to 400 prompt tokens).
const filler = "The river bends twice before it reaches the old mill, and the path follows it. ";
const prompts = [
  "What is the capital of France?",
  "Write a haiku about autumn.",
  "Explain how a bicycle stays upright while moving, in plain words for a curious child.",
  "Summarize the following notes in two sentences: " + filler.repeat(6),
  "List five uses for a paperclip.",
  "Translate to German: The weather is nice today and we will go for a walk.",
  "Continue the story: " + filler.repeat(24),
  "Give three tips for writing clear documentation.",
];

function startServer() {
  const proc = spawn(args.plumb, ["serve", "--model", args.model, "--served-model-name", "bench",
    "--device", args.device, "--port", "0", "--max-batch", "32"], { stdio: ["ignore", "pipe", "inherit"] });
  return new Promise((resolve, reject) => {
    let out = "";
    proc.on("exit", (code) => reject(new Error("plumb serve exited with " + code)));
    proc.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[\d.]+:\d+)/);
      if (m) resolve({ proc, url: m[1] });
    });
  });
}

// One streamed request; returns its time to first token and the gaps between later tokens (ms).
async function one(url, prompt) {
  const start = performance.now();
  const r = await fetch(url + "/v1/chat/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ model: "bench", messages: [{ role: "user", content: prompt }], stream: true,
      temperature: 0, max_tokens: maxTokens, ignore_eos: true }),
  });
  if (!r.ok) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  const decoder = new TextDecoder();
  let buffer = "", last = null, ttft = null;
  const gaps = [];
  for await (const bytes of r.body) {
    buffer += decoder.decode(bytes, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      if (event === "data: [DONE]") continue;
      const delta = JSON.parse(event.slice(6)).choices[0]?.delta ?? {};
      if (!delta.content && !delta.reasoning_content) continue;
      const now = performance.now();
      if (ttft === null) ttft = now - start;
      else gaps.push(now - last);
      last = now;
    }
  }
  return { ttft, gaps };
}

const percentile = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};

const server = await startServer();
const results = [];
try {
  await one(server.url, "warm up");
  for (const [concurrency, total] of levels) {
    let next = 0;
    const ttfts = [], gaps = [];
    const start = performance.now();
    await Promise.all(Array.from({ length: concurrency }, async () => {
      while (next < total) {
        const r = await one(server.url, prompts[next++ % prompts.length]);
        ttfts.push(r.ttft);
        gaps.push(...r.gaps);
      }
    }));
    const seconds = (performance.now() - start) / 1000;
    results.push({ concurrency, requests: total, requests_per_s: total / seconds,
      tokens_per_s: (total * maxTokens) / seconds, ttft_ms_p50: percentile(ttfts, 50),
      ttft_ms_p99: percentile(ttfts, 99), itl_ms_p50: percentile(gaps, 50), itl_ms_p99: percentile(gaps, 99) });
  }
} finally {
  server.proc.removeAllListeners("exit");
  server.proc.kill("SIGTERM");
}

const f = (x) => (x >= 100 ? x.toFixed(0) : x.toPrecision(3));
console.log(`plumb serve, ${args.model}, --device ${args.device}, ${maxTokens} tokens per request, ` +
  `${os.cpus().length} CPUs (${os.cpus()[0].model})\n`);
console.log("| concurrency | requests | requests/s | tokens/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms |");
console.log("|---|---|---|---|---|---|---|---|");
for (const r of results)
  console.log(`| ${r.concurrency} | ${r.requests} | ${f(r.requests_per_s)} | ${f(r.tokens_per_s)} | ` +
    `${f(r.ttft_ms_p50)} | ${f(r.ttft_ms_p99)} | ${f(r.itl_ms_p50)} | ${f(r.itl_ms_p99)} |`);
if (args.json) fs.writeFileSync(args.json, JSON.stringify({ model: args.model, device: args.device,
  max_tokens: maxTokens, results }, null, 2));
