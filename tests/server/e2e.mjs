// End-to-end tests of `plumb serve` on loopback with real clients: curl, the official openai npm package, and a
// page of another origin in headless Chromium (through puppeteer-core); the chat page has its own, chat_page.mjs.
// Run by ctest as `node --test e2e.mjs` with PLUMB_BINARY, PLUMB_MAKE_MODEL, PLUMB_SOURCE_DIR and PLUMB_TEST_OUT
// set. The model has random weights, so the checks are about structure, determinism and batch invariance, not about
// what the text says.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { Ajv2020, binary, launchBrowser, makeTestModel, metric, OpenAI, root, run, startServer as startAnyServer,
  stopServer, until } from "./support.mjs";

const model = await makeTestModel("model");

function startServer(extraArgs = [], { modelArgs = ["--model", model], env = process.env } = {}) {
  return startAnyServer(modelArgs, extraArgs, env);
}

async function curl(...args) {
  const { stdout } = await run("curl", ["-sS", "--max-time", "60", ...args], { maxBuffer: 64 << 20 });
  return stdout;
}

async function postJson(url, body, headers = {}) {
  const r = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: r.status, body: await r.json() };
}

function assertError(reply, status, code) {
  assert.equal(reply.status, status, JSON.stringify(reply.body));
  assert.equal(typeof reply.body.error.message, "string");
  assert.ok(reply.body.error.message.length > 0);
  assert.ok("type" in reply.body.error && "param" in reply.body.error && "code" in reply.body.error);
  if (code !== undefined) assert.equal(reply.body.error.code, code);
}

// Few tokens per request: the suite runs against a sanitizer build on two shared cores.
const greedy = { temperature: 0, max_tokens: 8 };
const user = (content) => [{ role: "user", content }];

describe("plumb serve", { timeout: 240_000 }, () => {
  let server, client, modelId;
  before(async () => {
    server = await startServer(["--max-batch", "32", "--log-interval", "0.2"]);
    client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "unused", maxRetries: 0, timeout: 60_000 });
    modelId = "default";
  });
  after(async () => {
    if (server) await stopServer(server);
  });

  test("logs one line saying where it listens", () => {
    assert.match(server.firstLine, /^plumb serve: listening on http:\/\/127\.0\.0\.1:\d+ /);
  });

  test("curl: health, models and Prometheus metrics", async () => {
    assert.deepEqual(JSON.parse(await curl(server.url + "/health")), { status: "ok" });
    const models = JSON.parse(await curl(server.url + "/v1/models"));
    assert.equal(models.object, "list");
    assert.equal(models.data[0].id, modelId);
    assert.equal(models.data[0].object, "model");
    const metrics = await curl(server.url + "/metrics");
    for (const name of ["plumb_requests_total", "plumb_prompt_tokens_total", "plumb_generation_tokens_total",
      "plumb_time_to_first_token_seconds", "plumb_inter_token_latency_seconds", "plumb_queue_depth",
      "plumb_running_batch_size", "plumb_kv_pages_used", "plumb_state_slots_used"])
      assert.match(metrics, new RegExp("# TYPE " + name + " "));
  });

  test("curl: a streamed chat completion is data: chunks then data: [DONE]", async () => {
    const body = JSON.stringify({ model: modelId, messages: user("Hi"), stream: true, ...greedy });
    const out = await curl("-N", "-H", "Content-Type: application/json", "-d", body,
      server.url + "/v1/chat/completions");
    const events = out.split("\n\n").filter((e) => e.length > 0);
    assert.equal(events.at(-1), "data: [DONE]");
    const chunks = events.slice(0, -1).map((e) => {
      assert.ok(e.startsWith("data: "), e);
      return JSON.parse(e.slice(6));
    });
    assert.equal(chunks[0].choices[0].delta.role, "assistant");
    for (const c of chunks) assert.equal(c.object, "chat.completion.chunk");
    assert.ok(["stop", "length"].includes(chunks.at(-1).choices[0].finish_reason));
    const whole = JSON.parse(await curl("-H", "Content-Type: application/json", "-d",
      JSON.stringify({ model: modelId, messages: user("Hi"), ...greedy }), server.url + "/v1/chat/completions"));
    const streamed = chunks.map((c) => c.choices[0].delta.content ?? "").join("");
    assert.equal(streamed, whole.choices[0].message.content ?? "");
  });

  test("openai: chat completion with usage", async () => {
    const r = await client.chat.completions.create({ model: modelId, messages: user("Hello there"), ...greedy });
    assert.equal(r.object, "chat.completion");
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].message.role, "assistant");
    assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
    assert.ok(r.usage.prompt_tokens > 0);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    if (r.choices[0].finish_reason === "length") assert.equal(r.usage.completion_tokens, greedy.max_tokens);
  });

  test("openai: streamed chat with include_usage matches the unstreamed answer", async () => {
    const request = { model: modelId, messages: user("Count to three"), ...greedy };
    const whole = await client.chat.completions.create(request);
    const stream = await client.chat.completions.create({ ...request, stream: true,
      stream_options: { include_usage: true } });
    let text = "", usage = null, finish = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      if (chunk.choices.length === 0) continue;
      text += chunk.choices[0].delta.content ?? "";
      finish = chunk.choices[0].finish_reason ?? finish;
    }
    assert.equal(text, whole.choices[0].message.content ?? "");
    assert.equal(finish, whole.choices[0].finish_reason);
    assert.deepEqual(usage, whole.usage);
  });

  test("openai: completions, streamed and not, with logprobs", async () => {
    const r = await client.completions.create({ model: modelId, prompt: "Once upon a time", logprobs: 2, ...greedy });
    assert.equal(r.object, "text_completion");
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, r.choices[0].finish_reason === "length" ? greedy.max_tokens : lp.tokens.length);
    for (let i = 0; i < lp.tokens.length; ++i) {
      assert.ok(lp.token_logprobs[i] <= 0);
      assert.ok(Object.keys(lp.top_logprobs[i]).length >= 1);
      // Each token starts where the previous ones' text ends (in characters of the completion).
      const before = lp.tokens.slice(0, i).join("");
      assert.equal(lp.text_offset[i], [...before].length);
    }
    const stream = await client.completions.create({ model: modelId, prompt: "Once upon a time", stream: true,
      ...greedy });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
    assert.equal(text, r.choices[0].text);
    const chat = await client.chat.completions.create({ model: modelId, messages: user("x"), logprobs: true,
      top_logprobs: 3, ...greedy });
    for (const t of chat.choices[0].logprobs.content) {
      assert.equal(t.top_logprobs.length, 3);
      assert.ok(t.logprob <= 0 && Array.isArray(t.bytes));
    }
  });

  test("openai: a seed reproduces a sampled answer; penalties and filters are accepted", async () => {
    const request = { model: modelId, messages: user("Tell a story"), temperature: 1.0, top_p: 0.9, top_k: 50,
      min_p: 0.01, seed: 1234, max_tokens: 4, presence_penalty: 0.5, frequency_penalty: 0.3,
      repetition_penalty: 1.1 };
    const a = await client.chat.completions.create(request);
    const b = await client.chat.completions.create(request);
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  });

  test("stop strings and stop token ids end the answer with finish_reason stop", async () => {
    // ignore_eos keeps all six tokens, so the free text is long enough to cut: the check below always runs.
    const free = { model: modelId, prompt: "abc", ...greedy, max_tokens: 6, ignore_eos: true };
    const text = (await client.completions.create(free)).choices[0].text;
    assert.ok(text.length >= 4, `the stop-string check needs 4 characters of free text, got ${JSON.stringify(text)}`);
    const stop = text.slice(2, 4);
    const cut = await client.completions.create({ ...free, stop });
    assert.equal(cut.choices[0].text, text.slice(0, text.indexOf(stop)));
    assert.equal(cut.choices[0].finish_reason, "stop");
    const all = Array.from({ length: 4096 }, (_, i) => i);
    const ids = await postJson(server.url + "/v1/completions",
      { model: modelId, prompt: "abc", ...greedy, stop_token_ids: all });
    assert.equal(ids.status, 200);
    assert.equal(ids.body.choices[0].text, "");
    assert.equal(ids.body.choices[0].finish_reason, "stop");
    assert.equal(ids.body.usage.completion_tokens, 1);
  });

  test("tools and tool_choice reach the chat template", async () => {
    const tools = [{ type: "function", function: { name: "get_weather", description: "Weather of a city",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
    const plain = await client.chat.completions.create({ model: modelId, messages: user("Weather?"), ...greedy });
    const withTools = await client.chat.completions.create({ model: modelId, messages: user("Weather?"), tools,
      tool_choice: "auto", ...greedy });
    const none = await client.chat.completions.create({ model: modelId, messages: user("Weather?"), tools,
      tool_choice: "none", ...greedy });
    assert.ok(withTools.usage.prompt_tokens > plain.usage.prompt_tokens);
    assert.equal(none.usage.prompt_tokens, plain.usage.prompt_tokens);
    assert.ok(["stop", "length", "tool_calls"].includes(withTools.choices[0].finish_reason));
    // A conversation carrying an assistant tool call and the tool's answer renders too.
    const followUp = await client.chat.completions.create({ model: modelId, tools, ...greedy, messages: [
      ...user("Weather?"),
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function",
        function: { name: "get_weather", arguments: "{\"city\": \"Paris\"}" } }] },
      { role: "tool", tool_call_id: "call_1", content: "sunny" }] });
    assert.ok(followUp.usage.prompt_tokens > withTools.usage.prompt_tokens);
  });

  test("32 concurrent streams: no loss, no cross-talk, each greedy answer as when it ran alone", async () => {
    // Each answer is fingerprinted by its text and its tokens' logprobs (bit-identical alone and batched), so no two
    // are alike and a stream handed another one's answer shows even where two texts agree.
    const prompts = Array.from({ length: 32 }, (_, i) => `Item ${i}: say something ${"new ".repeat(i % 9)}`);
    const request = (p) => ({ model: modelId, messages: user(p), ...greedy, max_tokens: 16, logprobs: true });
    const fingerprint = (text, logprobs) => JSON.stringify({ text, tokens: logprobs.map((t) => [t.token, t.logprob]) });
    const alone = [];
    for (const p of prompts) {
      const r = await client.chat.completions.create(request(p));
      alone.push(fingerprint(r.choices[0].message.content ?? "", r.choices[0].logprobs?.content ?? []));
    }
    assert.equal(new Set(alone).size, prompts.length, "two prompts gave the same answer and logprobs");
    const streams = prompts.map(async (p) => {
      const stream = await client.chat.completions.create({ ...request(p), stream: true });
      let text = "", id = null, finish = null;
      const logprobs = [];
      for await (const chunk of stream) {
        id ??= chunk.id;
        assert.equal(chunk.id, id, "a chunk of another stream arrived");
        text += chunk.choices[0]?.delta?.content ?? "";
        logprobs.push(...(chunk.choices[0]?.logprobs?.content ?? []));
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      assert.ok(finish, "the stream ended without a finish_reason");
      return fingerprint(text, logprobs);
    });
    let widest = 0, sampling = true;
    const sampler = (async () => {
      while (sampling) {
        widest = Math.max(widest, (await metric(server.url, "plumb_running_batch_size")) ?? 0);
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    const together = await Promise.all(streams);
    sampling = false;
    await sampler;
    for (let i = 0; i < prompts.length; ++i) assert.equal(together[i], alone[i], `stream ${i} (${prompts[i]})`);
    assert.ok(widest >= 16, `the streams should have shared the batch; at most ${widest} ran at once`);
  });

  test("a client that disconnects mid-stream is cancelled and its slot freed", async () => {
    const controller = new AbortController();
    const stream = await client.chat.completions.create({ model: modelId, messages: user("Go on forever"),
      stream: true, temperature: 0, max_tokens: 3000, ignore_eos: true }, { signal: controller.signal });
    let chunks = 0;
    for await (const chunk of stream) {
      void chunk;
      if (++chunks === 3) break;
    }
    controller.abort();
    await until("the slot to be freed", async () => (await metric(server.url, "plumb_state_slots_used")) === 0 &&
      (await metric(server.url, "plumb_running_batch_size")) === 0);
    await until("the 499 to be counted", async () =>
      (await metric(server.url, 'plumb_requests_total{endpoint="/v1/chat/completions",status="499"}')) >= 1);

    // A client waiting for a whole (unstreamed) answer is noticed too.
    const whole = new AbortController();
    const pending = client.chat.completions.create({ model: modelId, messages: user("Go on"), temperature: 0,
      max_tokens: 3000, ignore_eos: true }, { signal: whole.signal });
    await until("it to run", async () => (await metric(server.url, "plumb_running_batch_size")) === 1);
    whole.abort();
    await assert.rejects(pending);
    await until("its slot to be freed", async () => (await metric(server.url, "plumb_state_slots_used")) === 0);
    await until("the second 499", async () =>
      (await metric(server.url, 'plumb_requests_total{endpoint="/v1/chat/completions",status="499"}')) >= 2);
  });

  test("errors come back as OpenAI gives them and the server keeps serving", async () => {
    const chat = server.url + "/v1/chat/completions";
    const ok = { model: modelId, messages: user("hi"), ...greedy };
    assertError(await postJson(chat, "{not json"), 400);
    assertError(await postJson(chat, { ...ok, model: "gpt-4" }), 404, "model_not_found");
    assertError(await postJson(chat, { ...ok, temperature: "hot" }), 400);
    assertError(await postJson(chat, { ...ok, top_p: 5 }), 400);
    assertError(await postJson(chat, { ...ok, n: 2 }), 400);
    assertError(await postJson(chat, { ...ok, messages: "hi" }), 400);
    assertError(await postJson(chat, { ...ok, max_tokens: 100000 }), 400, "context_length_exceeded");
    const longPrompt = Array.from({ length: 5000 }, () => 7);
    assertError(await postJson(server.url + "/v1/completions", { model: modelId, prompt: longPrompt }), 400,
      "context_length_exceeded");
    assertError(await postJson(server.url + "/v1/completions", { model: modelId, prompt: [100000] }), 400);
    assertError(await postJson(server.url + "/v1/nothing", ok), 404, "unknown_url");
    const get = await fetch(chat);
    assert.equal(get.status, 405);
    const huge = await postJson(chat, JSON.stringify({ ...ok, pad: "x".repeat(9 << 20) }));
    assertError(huge, 413);
    await assert.rejects(client.chat.completions.create({ ...ok, model: "nope" }), (e) => e.status === 404);
    await assert.rejects(client.chat.completions.create({ ...ok, top_k: "x" }), (e) => e.status === 400);
    const after = await client.chat.completions.create(ok);
    assert.equal(after.choices.length, 1);
  });

  test("model may be left out; every response object carries the seed it was sampled with", async () => {
    const chat = await postJson(server.url + "/v1/chat/completions", { messages: user("hi"), ...greedy });
    assert.equal(chat.status, 200, JSON.stringify(chat.body));
    assert.equal(chat.body.model, "default");
    assert.ok(Number.isSafeInteger(chat.body.seed) && chat.body.seed >= 0, JSON.stringify(chat.body));
    const seeded = await postJson(server.url + "/v1/completions", { prompt: "abc", ...greedy, seed: -7 });
    assert.equal(seeded.body.seed, -7);
    const stream = await client.chat.completions.create({ messages: user("hi"), ...greedy, stream: true, seed: 99 });
    for await (const chunk of stream) assert.equal(chunk.seed, 99);
  });

  test("unseeded sampled requests differ; the seed one reports reproduces it; a given seed repeats", async () => {
    const request = { model: modelId, messages: user("Tell a story"), temperature: 1.0, max_tokens: 12,
      ignore_eos: true };
    const answers = [];
    for (let i = 0; i < 3; ++i) answers.push(await client.chat.completions.create(request));
    const texts = answers.map((a) => a.choices[0].message.content);
    assert.equal(new Set(answers.map((a) => a.seed)).size, 3, "fresh seeds repeated");
    assert.ok(new Set(texts).size > 1, `three unseeded sampled answers were all ${JSON.stringify(texts[0])}`);
    for (const a of answers) {
      const again = await client.chat.completions.create({ ...request, seed: a.seed });
      assert.equal(again.choices[0].message.content, a.choices[0].message.content);
      assert.equal(again.seed, a.seed);
    }
  });

  test("stderr: an access line per request and throughput lines while busy, key=value", async () => {
    const start = server.log().length;
    const since = () => server.log().slice(start);
    await client.completions.create({ model: modelId, prompt: "Once", temperature: 0, max_tokens: 40,
      ignore_eos: true, seed: 31 });
    // The access line is written once the answer is out, so it may follow the client's read by a moment.
    const access = new RegExp("^time=\\S+Z level=info event=request method=POST path=/v1/completions status=200 " +
      "latency_ms=[\\d.]+ prompt_tokens=\\d+ completion_tokens=40 seed=31$", "m");
    await until("the access line", async () => access.test(since()));
    const throughput = new RegExp("^time=\\S+Z level=info event=throughput prompt_tokens_per_s=[\\d.]+ " +
      "generation_tokens_per_s=(?!0\\.00 )[\\d.]+ running=\\d+ waiting=\\d+ kv_pages_used=\\d+ " +
      "kv_pages_total=\\d+$", "m");
    await until("a throughput line with generated tokens", async () => throughput.test(since()));
    await curl(server.url + "/health");
    await until("the health check's line", async () =>
      /^time=\S+Z level=info event=request method=GET path=\/health status=200 latency_ms=[\d.]+$/m.test(since()));
  });
});

describe("plumb serve --api-key --max-batch 1 --max-queue 1", { timeout: 120_000 }, () => {
  let server;
  before(async () => {
    server = await startServer(["--api-key", "sekret", "--max-batch", "1", "--max-queue", "1"]);
  });
  after(async () => {
    if (server) assert.equal(await stopServer(server, "SIGINT"), 0);
  });

  test("a missing or wrong API key gets 401; the right one is served", async () => {
    const chat = server.url + "/v1/chat/completions";
    const body = { model: "default", messages: user("hi"), ...greedy };
    assertError(await postJson(chat, body), 401, "invalid_api_key");
    assertError(await postJson(chat, body, { Authorization: "Bearer wrong" }), 401, "invalid_api_key");
    const wrong = new OpenAI({ baseURL: server.url + "/v1", apiKey: "wrong", maxRetries: 0 });
    await assert.rejects(wrong.models.list(), (e) => e.status === 401);
    assert.equal((await postJson(chat, body, { Authorization: "Bearer sekret" })).status, 200);
  });

  test("more requests than the queue holds get 429", async () => {
    const client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "sekret", maxRetries: 0 });
    const long = { model: "default", messages: user("long"), temperature: 0, max_tokens: 3000, ignore_eos: true,
      stream: true };
    const controllers = [new AbortController(), new AbortController()];
    const running = await client.chat.completions.create(long, { signal: controllers[0].signal });
    const runningIterator = running[Symbol.asyncIterator]();
    await runningIterator.next();
    // The role chunk comes as soon as a request is queued, before the engine admits it: wait until the first request
    // runs, or the second could find it still waiting and be refused instead of queued.
    await until("the first request to hold the only slot", async () =>
      (await metric(server.url, "plumb_running_batch_size")) === 1 &&
      (await metric(server.url, "plumb_queue_depth")) === 0);
    const waitingPromise = client.chat.completions.create(long, { signal: controllers[1].signal });
    await until("the second request to queue", async () => {
      const r = await fetch(server.url + "/metrics");
      return /^plumb_queue_depth 1$/m.test(await r.text());
    });
    await assert.rejects(client.chat.completions.create({ ...long, stream: false, max_tokens: 2 }),
      (e) => e.status === 429 && e.error?.code === "rate_limit_exceeded");
    controllers.forEach((c) => c.abort());
    await waitingPromise.catch(() => {});
    await until("both to be cancelled", async () => {
      const text = await (await fetch(server.url + "/metrics")).text();
      return /^plumb_queue_depth 0$/m.test(text) && /^plumb_running_batch_size 0$/m.test(text);
    });
    const ok = await client.chat.completions.create({ model: "default", messages: user("hi"), ...greedy });
    assert.equal(ok.choices.length, 1);
  });
});

describe("plumb serve --kv-cache-gib", { timeout: 60_000 }, () => {
  test("reserves its KV pages at start and serves within them", async () => {
    const server = await startServer(["--kv-cache-gib", "0.01"]);
    const r = await postJson(server.url + "/v1/chat/completions",
      { model: "default", messages: user("hi"), ...greedy });
    assert.equal(r.status, 200);
    assert.equal(await stopServer(server), 0);
  });

  test("a negative budget is refused, naming the flag", async () => {
    await assert.rejects(run(binary, ["serve", "--model", model, "--port", "0", "--kv-cache-gib", "-1"]),
      (e) => e.code === 1 && /--kv-cache-gib must be a finite number >= 0, got -1/.test(e.stderr));
  });
});

describe("plumb serve --log-format json, its model from PLUMB_MODEL", { timeout: 60_000 }, () => {
  test("says which model it serves, and logs JSON lines", async () => {
    const server = await startServer(["--log-format", "json"], { modelArgs: [],
      env: { ...process.env, PLUMB_MODEL: model } });
    const r = await postJson(server.url + "/v1/chat/completions", { messages: user("hi"), ...greedy });
    assert.equal(r.status, 200);
    await until("the access line", async () => server.log().includes('"event":"request"'));
    assert.equal(await stopServer(server), 0);
    const lines = server.log().trim().split("\n");
    assert.equal(lines[0], `plumb: no --model given; using ${model} (from PLUMB_MODEL)`);
    const entries = lines.slice(1).map((l) => JSON.parse(l));
    const access = entries.find((e) => e.event === "request");
    assert.equal(access.path, "/v1/chat/completions");
    assert.equal(access.status, 200);
    assert.equal(access.seed, r.body.seed);
    assert.equal(access.completion_tokens, r.body.usage.completion_tokens);
    assert.ok(typeof access.latency_ms === "number" && typeof access.time === "string");
  });
});

// A page served from another origin (a second loopback port) calls the server from headless Chromium: the origin
// --allowed-origins names gets through CORS, another origin's fetch is blocked by the browser, and its no-cors
// text/plain POST (which needs no preflight) is refused 415 by the server.
describe("browser safety", { timeout: 120_000 }, () => {
  const pages = [];
  let server;
  before(async () => {
    for (let i = 0; i < 2; ++i) {
      const page = http.createServer((req, res) => res.end("<!doctype html><title>other origin</title>"));
      await new Promise((resolve) => page.listen(0, "127.0.0.1", resolve));
      pages.push({ page, origin: `http://127.0.0.1:${page.address().port}` });
    }
    server = await startServer(["--allowed-origins", pages[0].origin]);
  });
  after(async () => {
    pages.forEach((p) => p.page.close());
    if (server) assert.equal(await stopServer(server), 0);
  });

  test("a foreign Host is refused 403, a text/plain POST 415", async () => {
    const port = new URL(server.url).port;
    assert.equal(await curl("-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: evil.example", server.url + "/health"),
      "403");
    assert.equal(await curl("-o", "/dev/null", "-w", "%{http_code}", "-H", `Host: localhost:${port}`,
      server.url + "/health"), "200");
    const body = JSON.stringify({ model: "default", messages: user("hi"), ...greedy });
    assert.equal(await curl("-o", "/dev/null", "-w", "%{http_code}", "-H", "Content-Type: text/plain", "-d", body,
      server.url + "/v1/chat/completions"), "415");
  });

  test("only the allowed origin can call the API from a browser", async () => {
    const browser = await launchBrowser();
    try {
      const call = async (origin, mode, contentType) => {
        const page = await browser.newPage();
        await page.goto(origin + "/", { waitUntil: "load" });
        return page.evaluate(async (url, mode, contentType) => {
          const body = JSON.stringify({ model: "default", messages: [{ role: "user", content: "hi" }],
            temperature: 0, max_tokens: 2 });
          try {
            const r = await fetch(url, { method: "POST", mode, headers: { "Content-Type": contentType }, body });
            return r.type === "opaque" ? "opaque" : String(r.status);
          } catch (e) {
            return "blocked";
          }
        }, server.url + "/v1/chat/completions", mode, contentType);
      };
      assert.equal(await call(pages[0].origin, "cors", "application/json"), "200");  // after a 204 preflight
      assert.equal(await call(pages[1].origin, "cors", "application/json"), "blocked");
      const refused = (await metric(server.url, 'plumb_requests_total{endpoint="/v1/chat/completions",status="415"}'))
        ?? 0;
      assert.equal(await call(pages[1].origin, "no-cors", "text/plain"), "opaque");
      await until("the text/plain POST to be refused", async () =>
        (await metric(server.url, 'plumb_requests_total{endpoint="/v1/chat/completions",status="415"}')) ===
          refused + 1);
    } finally {
      await browser.close();
    }
  });

  test("--metrics-need-key puts /metrics behind the key", async () => {
    const guarded = await startServer(["--api-key", "sekret", "--metrics-need-key"]);
    try {
      assert.equal((await fetch(guarded.url + "/metrics")).status, 401);
      assert.equal((await fetch(guarded.url + "/metrics", { headers: { Authorization: "Bearer sekret" } })).status,
        200);
    } finally {
      assert.equal(await stopServer(guarded), 0);
    }
  });

  test("a request nested 20,000 levels deep is answered 400 and the server stays up", async () => {
    const deep = "[".repeat(20000) + "]".repeat(20000);
    const body = `{"model": "default", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": ` +
      `"function", "function": {"name": "f", "parameters": ${deep}}}]}`;
    const r = await postJson(server.url + "/v1/chat/completions", body);
    assertError(r, 400);
    assert.match(r.body.error.message, /nests deeper than 256 levels/);
    assert.equal((await fetch(server.url + "/health")).status, 200);
  });
});

// Structured output: the random-weight model writes whatever the grammar lets it, so every answer must parse and
// validate. The schemas bound every string and array, so a walk ends well within max_tokens.
describe("the prefix cache on models/default", { timeout: 180_000 }, () => {
  // The demo model's answer, re-rendered by its chat template in the next turn, tokenizes back to the ids it drew, so
  // the next turn's prompt starts with the first turn's prompt, answer and end-of-turn id.
  test("a chat's next turn resumes after the answer before it (re-run while idle), or after its prompt without", async () => {
    for (const [flags, reruns] of [[[], true], [["--no-prefix-cache-answers"], false]]) {
      const server = await startServer(flags, { modelArgs: ["--model", root + "/models/default"] });
      const client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "unused", maxRetries: 0, timeout: 60_000 });
      const messages = [{ role: "system", content: "You are a helpful assistant. ".repeat(20) },
        { role: "user", content: "Tell me a long story about a cat." }];
      const first = await client.chat.completions.create({ model: "default", messages, temperature: 0,
        max_tokens: 150 });
      await until("the answer's re-run", async () =>
        (await metric(server.url, "plumb_prefix_cache_answers_pending")) === 0);
      messages.push({ role: "assistant", content: first.choices[0].message.content },
        { role: "user", content: "And then?" });
      const second = await client.chat.completions.create({ model: "default", messages, temperature: 0,
        max_tokens: 4 });
      const prompt = first.usage.prompt_tokens;
      const answered = prompt + first.usage.completion_tokens + (first.choices[0].finish_reason === "stop" ? 1 : 0);
      const block = (n) => Math.floor(n / 64) * 64;
      assert.ok(block(answered) > block(prompt), `the answer (${prompt} to ${answered}) passes a boundary`);
      assert.equal(second.usage.prompt_tokens_details.cached_tokens, reruns ? block(answered) : block(prompt),
        `flags [${flags}]`);
      assert.equal(await metric(server.url, "plumb_prefix_cache_answer_tokens_total") > 0, reruns);
      assert.equal(await stopServer(server), 0);
    }
  });
});

describe("structured output", { timeout: 240_000 }, () => {
  let server, client;
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  const weather = { type: "object", properties: { city: { type: "string", maxLength: 12 },
    unit: { enum: ["celsius", "fahrenheit"] } }, required: ["city", "unit"], additionalProperties: false };
  const schemas = [
    weather,
    { type: "object", properties: { name: { type: "string", minLength: 1, maxLength: 8 }, age: { type: "integer" },
      tags: { type: "array", items: { enum: ["a", "b", "c"] }, maxItems: 3 } }, required: ["name", "age"] },
    { $defs: { leaf: { type: "object", properties: { v: { type: ["number", "null"] } }, required: ["v"] } },
      type: "array", items: { $ref: "#/$defs/leaf" }, minItems: 1, maxItems: 2 },
    { anyOf: [{ type: "boolean" }, { type: "object", properties: { ok: { const: true } }, required: ["ok"] }] },
    { type: "object", properties: { code: { type: "string", pattern: "^[A-Z]{2}-\\d{3}$" },
      month: { type: "integer", minimum: 1, maximum: 12 }, score: { type: "number", minimum: 0, maximum: 1 } },
      required: ["code", "month", "score"], additionalProperties: false },
  ];
  const sampled = (seed) => ({ temperature: 1, seed, max_tokens: 400 });
  const exact = { temperature: 0, max_tokens: 400 };
  function assertValid(text, schema, what) {
    let value;
    assert.doesNotThrow(() => (value = JSON.parse(text)), `${what}: not JSON: ${JSON.stringify(text)}`);
    const validate = ajv.compile(schema);
    assert.ok(validate(value), `${what}: ${JSON.stringify(text)}: ${ajv.errorsText(validate.errors)}`);
  }
  before(async () => {
    server = await startServer(["--max-batch", "8"]);
    client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "unused", maxRetries: 0, timeout: 120_000 });
  });
  after(async () => {
    if (server) await stopServer(server);
  });

  test("json_schema answers on chat and completions, greedy and sampled, all parse and validate", async () => {
    const runs = [];
    for (const [i, schema] of schemas.entries()) {
      const response_format = { type: "json_schema", json_schema: { name: `s${i}`, schema, strict: true } };
      for (const params of [exact, sampled(i + 1)]) {
        runs.push(client.chat.completions.create({ model: "default", messages: user("Answer in JSON"),
          response_format, ...params }).then((r) => {
          assert.equal(r.choices[0].finish_reason, "stop", JSON.stringify(r.choices[0]));
          assertValid(r.choices[0].message.content, schema, `chat, schema ${i}, ${JSON.stringify(params)}`);
        }));
        runs.push(client.completions.create({ model: "default", prompt: "JSON:", response_format, ...params })
          .then((r) => {
            assert.equal(r.choices[0].finish_reason, "stop", JSON.stringify(r.choices[0]));
            assertValid(r.choices[0].text, schema, `completion, schema ${i}, ${JSON.stringify(params)}`);
          }));
      }
    }
    await Promise.all(runs);
  });

  test("json_object: a streamed answer is one JSON object", async () => {
    const stream = await client.chat.completions.create({ model: "default", messages: user("JSON please"),
      response_format: { type: "json_object" }, ...exact, max_tokens: 1000, stream: true });
    let text = "", finish;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(finish, "stop", text);
    assertValid(text, { type: "object" }, "json_object");
  });

  test("a forced tool call, named or required, parses and its arguments validate", async () => {
    const tools = [{ type: "function", function: { name: "get_weather", parameters: weather } },
      { type: "function", function: { name: "add", parameters: { type: "object", properties: {
        a: { type: "integer" }, b: { type: "integer" } }, required: ["a", "b"], additionalProperties: false } } }];
    const byName = Object.fromEntries(tools.map((t) => [t.function.name, t.function.parameters]));
    for (const [tool_choice, params] of [[{ type: "function", function: { name: "add" } }, exact],
      ["required", exact], ["required", sampled(7)]]) {
      const r = await client.chat.completions.create({ model: "default", messages: user("Call a tool"), tools,
        tool_choice, ...params });
      const choice = r.choices[0];
      assert.equal(choice.finish_reason, "tool_calls", JSON.stringify(choice));
      assert.equal(choice.message.tool_calls.length, 1, JSON.stringify(choice));
      const call = choice.message.tool_calls[0].function;
      if (typeof tool_choice === "object") assert.equal(call.name, "add");
      assert.ok(call.name in byName, call.name);
      assertValid(call.arguments, byName[call.name], `tool call ${JSON.stringify(tool_choice)}`);
    }
  });

  test("guided_regex and guided_grammar: the whole answer matches, greedy and sampled", async () => {
    const guided_regex = "(yes|no), because [a-z ]{1,20}\\.";
    const guided_grammar = 'root ::= ("yes" | "no") ", because " [a-z ]{1,20} "."';
    for (const extra of [{ guided_regex }, { guided_grammar }]) {
      for (const params of [exact, sampled(3)]) {
        const r = await client.chat.completions.create({ model: "default", messages: user("Yes or no?"), ...extra,
          chat_template_kwargs: { enable_thinking: false }, ...params });
        assert.equal(r.choices[0].finish_reason, "stop", JSON.stringify(r.choices[0]));
        assert.match(r.choices[0].message.content, new RegExp(`^(?:${guided_regex})$`, "u"));
      }
    }
  });

  test("unsupported schemas and tool choices are answered 400 naming what is wrong", async () => {
    const ask = (extra) => postJson(server.url + "/v1/chat/completions",
      { model: "default", messages: user("x"), max_tokens: 4, ...extra });
    const format = await ask({ response_format: { type: "json_schema", json_schema: { name: "p",
      schema: { type: "object", properties: { id: { type: "string", format: "uuid" } } } } } });
    assertError(format, 400);
    assert.match(format.body.error.message, /keyword 'format' at #\/properties\/id/);
    const lookahead = await ask({ response_format: { type: "json_schema", json_schema: { name: "l",
      schema: { type: "string", pattern: "a(?=b)" } } } });
    assertError(lookahead, 400);
    assert.match(lookahead.body.error.message, /'pattern' at #: a lookaround assertion .* at offset 1/);
    assertError(await ask({ guided_regex: "\\bx" }), 400);
    const grammar = await ask({ guided_grammar: "root ::= e\ne ::= e \"+\" \"1\" | \"1\"" });
    assertError(grammar, 400);
    assert.match(grammar.body.error.message, /'guided_grammar': the grammar is left-recursive/);
    assertError(await ask({ response_format: { type: "yaml" } }), 400);
    const unknownTool = await ask({ tools: [{ type: "function", function: { name: "f" } }],
      tool_choice: { type: "function", function: { name: "g" } } });
    assertError(unknownTool, 400);
    assert.match(unknownTool.body.error.message, /'g', which is not in 'tools'/);
  });
});

describe("shutdown", { timeout: 60_000 }, () => {
  test("SIGTERM with a stream in flight ends the stream and exits 0", async () => {
    const server = await startServer([]);
    const client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "x", maxRetries: 0 });
    const stream = await client.chat.completions.create({ model: "default", messages: user("long"),
      temperature: 0, max_tokens: 3000, ignore_eos: true, stream: true });
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    const exit = stopServer(server, "SIGTERM");
    await assert.rejects(async () => {
      for (;;) {
        const { done } = await iterator.next();
        if (done) throw new Error("the stream ended without saying why");
      }
    });
    assert.equal(await exit, 0);
  });
});

describe("speculative decoding", { timeout: 240_000 }, () => {
  test("--speculative-tokens serves the same tokens and reports its drafts in usage and /metrics", async () => {
    // A synthetic model drafts with a random MTP head: few drafts are kept, but every one is verified.
    const modelArgs = ["--synthetic", "tiny"];
    const ask = (url) => postJson(url + "/v1/completions",
      { model: "default", prompt: [5, 6, 7, 8, 9, 10, 11], max_tokens: 16, temperature: 0 });
    const plainServer = await startServer([], { modelArgs });
    const plain = await ask(plainServer.url);
    assert.equal(await stopServer(plainServer), 0);
    assert.equal(plain.status, 200, JSON.stringify(plain.body));
    assert.equal(plain.body.usage.speculative_decoding, undefined);
    const server = await startServer(["--speculative-tokens", "3"], { modelArgs });
    const got = await ask(server.url);
    assert.equal(got.status, 200, JSON.stringify(got.body));
    assert.equal(got.body.choices[0].text, plain.body.choices[0].text);
    assert.equal(got.body.choices[0].finish_reason, plain.body.choices[0].finish_reason);
    assert.equal(got.body.usage.completion_tokens, plain.body.usage.completion_tokens);
    const s = got.body.usage.speculative_decoding;
    assert.ok(s.draft_tokens > 0 && s.verify_steps > 0 && s.accepted_tokens <= s.draft_tokens, JSON.stringify(s));
    assert.equal(s.mean_accepted_length, 1 + s.accepted_tokens / s.verify_steps);
    assert.equal(await metric(server.url, "plumb_speculative_draft_tokens_total"), s.draft_tokens);
    assert.equal(await stopServer(server), 0);
  });
});

describe("tensor parallelism", { timeout: 240_000 }, () => {
  test("--tensor-parallel 2 serves the unsplit model's tokens and logprobs, and --tp-reduction fast its tokens", async () => {
    const ask = (url) => postJson(url + "/v1/completions",
      { model: "default", prompt: "Once upon a time", max_tokens: 16, temperature: 0, logprobs: 1 });
    const plainServer = await startServer();
    const plain = await ask(plainServer.url);
    assert.equal(await stopServer(plainServer), 0);
    assert.equal(plain.status, 200, JSON.stringify(plain.body));
    for (const reduction of ["exact", "fast"]) {
      const server = await startServer(["--tensor-parallel", "2", "--tp-reduction", reduction]);
      assert.match(server.firstLine, /^plumb serve: listening on /);
      const got = await ask(server.url);
      assert.equal(await stopServer(server), 0);
      assert.equal(got.status, 200, JSON.stringify(got.body));
      assert.equal(got.body.choices[0].text, plain.body.choices[0].text, reduction);
      // exact: the unsplit model's bits, so its logprobs too; fast rounds its sums otherwise.
      if (reduction === "exact")
        assert.deepEqual(got.body.choices[0].logprobs.token_logprobs, plain.body.choices[0].logprobs.token_logprobs);
    }
  });
});
