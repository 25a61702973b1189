// What the server's end-to-end tests share (e2e.mjs, chat_page.mjs, chat_screenshot.mjs): where the binary and the
// Node clients are, a small test model, and `plumb serve` started on an ephemeral loopback port and stopped.
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { createRequire } from "node:module";
import { promisify } from "node:util";
import fs from "node:fs";
import path from "node:path";

export const root = process.env.PLUMB_SOURCE_DIR ?? process.cwd();
export const binary = process.env.PLUMB_BINARY ?? path.join(root, "build/release/bin/plumb");
export const run = promisify(execFile);
const nodeModules = createRequire(path.join(root, ".cache/server-node/package.json"));
const openaiModule = nodeModules("openai");
export const OpenAI = openaiModule.OpenAI ?? openaiModule.default ?? openaiModule;
export const puppeteer = nodeModules("puppeteer-core");
export const Ajv2020 = nodeModules("ajv/dist/2020").default;

// A small random-weight model (make_test_model) in outDir/NAME with models/default's tokenizer and the tiny test chat
// template (tools/tiny_chat_template.jinja), which speaks Qwen3's format with tools, tool calls and <think> blocks;
// the default folder's own template ignores tools, and its larger weights are slow under the sanitizers.
export async function makeTestModel(name) {
  const model = path.join(process.env.PLUMB_TEST_OUT ?? fs.mkdtempSync("/tmp/plumb-e2e-"), name);
  fs.rmSync(model, { recursive: true, force: true });
  await run(process.env.PLUMB_MAKE_MODEL ?? path.join(path.dirname(binary), "make_test_model"), [model]);
  for (const f of ["generation_config.json", "tokenizer.json", "tokenizer_config.json"])
    fs.symlinkSync(path.join(root, "models/default", f), path.join(model, f));
  fs.copyFileSync(path.join(root, "tools/tiny_chat_template.jinja"), path.join(model, "chat_template.jinja"));
  return model;
}

// Starts `plumb serve` on an ephemeral loopback port; resolves once its one "listening" line is out. Without
// `--model` (modelArgs []) it serves the folder PLUMB_MODEL names in `env`.
export function startServer(modelArgs, extraArgs = [], env = process.env) {
  const proc = spawn(binary, ["serve", ...modelArgs, "--served-model-name", "default", "--host", "127.0.0.1",
    "--port", "0", ...extraArgs], {
    stdio: ["ignore", "pipe", "pipe"], env,
  });
  let log = "";
  proc.stderr.on("data", (d) => (log += d));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("server did not start:\n" + log)), 60_000);
    proc.on("exit", (code) => reject(new Error(`server exited with ${code}:\n${log}`)));
    let out = "";
    proc.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/127\.0\.0\.1:(\d+))/);
      if (!m) return;
      clearTimeout(timer);
      resolve({ proc, url: m[1], firstLine: out.split("\n")[0], log: () => log });
    });
  });
}

// Sends `signal` and resolves with the exit code; fails if the server takes more than 20 s to stop.
export function stopServer(server, signal = "SIGTERM") {
  return new Promise((resolve, reject) => {
    if (server.proc.exitCode !== null) return resolve(server.proc.exitCode);
    const timer = setTimeout(() => reject(new Error("server did not stop within 20 s")), 20_000);
    server.proc.removeAllListeners("exit");
    server.proc.on("exit", (code, sig) => {
      clearTimeout(timer);
      resolve(code ?? sig);
    });
    server.proc.kill(signal);
  });
}

export function launchBrowser() {
  return puppeteer.launch({ executablePath: "/usr/bin/chromium", headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
}

export async function metric(url, name) {
  const text = await (await fetch(url + "/metrics")).text();
  const m = text.match(new RegExp("^" + name.replace(/[{}"]/g, "\\$&") + " (\\S+)$", "m"));
  return m ? Number(m[1]) : undefined;
}

export async function until(what, predicate, ms = 10_000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await predicate()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  assert.fail("timed out waiting for " + what);
}
