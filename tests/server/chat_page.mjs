// The chat page (src/server/chat_page/) in headless Chromium against a live `plumb serve`: streaming, timings,
// reasoning, the system prompt, conversations in localStorage, stop and regenerate. Markdown is checked on a canned
// answer (the page's request answered by the test), since the test model's random weights write no Markdown. Run by
// ctest as `node --test chat_page.mjs`, with the environment of e2e.mjs.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { launchBrowser, makeTestModel, metric, OpenAI, startServer, stopServer, until } from "./support.mjs";

const model = await makeTestModel("chat-model");
const user = (content) => [{ role: "user", content }];

describe("the chat page", { timeout: 240_000 }, () => {
  let server, client, browser, page;
  const sent = [];  // the bodies of the page's chat requests, in order
  before(async () => {
    server = await startServer(["--model", model]);
    client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "unused", maxRetries: 0, timeout: 60_000 });
    browser = await launchBrowser();
    page = await browser.newPage();
    await page.setViewport({ width: 1100, height: 700 });
    page.on("request", (r) => {
      if (r.url().endsWith("/v1/chat/completions")) sent.push(JSON.parse(r.postData()));
    });
    await open(page);
  });
  after(async () => {
    if (browser) await browser.close();
    if (server) await stopServer(server);
  });

  async function open(p, reload = false) {
    if (reload) await p.reload({ waitUntil: "load" });
    else await p.goto(server.url + "/", { waitUntil: "load" });
    await p.waitForFunction(() => document.getElementById("model").textContent === "default");
  }

  // Sets a settings field as a user would (its change event stores it).
  async function setField(id, value) {
    await page.$eval("#" + id, (e, v) => {
      e.value = v;
      e.dispatchEvent(new Event("change"));
    }, value);
  }

  const answers = (p = page) => p.$$eval(".msg.assistant", (all) => all.map((e) => ({ state: e.dataset.state,
    content: e.querySelector(".content").textContent, stats: e.querySelector(".stats").textContent,
    reasoning: e.querySelector(".reasoning").hidden ? null : e.querySelector(".reasoning-text").textContent,
    reasoningOpen: e.querySelector(".reasoning").open })));
  const stored = (p = page) => p.evaluate(() => JSON.parse(localStorage.getItem("plumb.conversations")));
  const currentConversation = async () => {
    const id = await page.evaluate(() => localStorage.getItem("plumb.current"));
    return (await stored()).find((c) => c.id === id);
  };

  // Sends `text` and waits for its answer to end (done, stopped or failed).
  async function ask(text, p = page) {
    const before = (await answers(p)).length;
    await p.type("#prompt", text);
    await p.click("#send");
    await p.waitForFunction((n) => {
      const all = document.querySelectorAll(".msg.assistant");
      return all.length === n + 1 && all[n].dataset.state !== "streaming";
    }, { timeout: 60_000 }, before);
    return (await answers(p)).at(-1);
  }

  test("streams an answer, keeps its text, and shows tokens/s and TTFT under it", async () => {
    await setField("max-tokens", "8");
    await setField("temperature", "0");
    const shown = await ask("Hello from Chromium");
    const expected = await client.chat.completions.create({ model: "default", messages: user("Hello from Chromium"),
      temperature: 0, max_tokens: 8 });
    assert.equal(shown.state, "done");
    const conversation = await currentConversation();
    assert.equal(conversation.messages[1].content, expected.choices[0].message.content ?? "");
    assert.ok(expected.usage.completion_tokens > 1, "the tokens/s check needs an answer of two tokens or more");
    assert.match(shown.stats, new RegExp(`^${expected.usage.completion_tokens} tokens \u00b7 \\d+\\.\\d tokens/s ` +
      "\u00b7 TTFT \\d+ ms \u00b7 seed \\d+$"));
    assert.equal(conversation.messages[1].stats, shown.stats);
    assert.deepEqual(sent.at(-1).stream_options, { include_usage: true });
  });

  test("reasoning is shown apart, collapsed", async () => {
    // A question makes the test template open a <think> block.
    const shown = await ask("Why?");
    const first = (await currentConversation()).messages[1].content;
    const asked = await client.chat.completions.create({ model: "default", temperature: 0, max_tokens: 8,
      messages: [...user("Hello from Chromium"), { role: "assistant", content: first }, ...user("Why?")] });
    assert.ok(asked.choices[0].message.reasoning_content.length > 0);
    assert.equal(shown.reasoning, asked.choices[0].message.reasoning_content);
    assert.equal(shown.reasoningOpen, false);
    assert.deepEqual(sent.at(-1).messages.map((m) => m.role), ["user", "assistant", "user"]);
  });

  test("the system prompt reaches the request and is kept with its conversation", async () => {
    await page.click("#new-chat");
    assert.equal((await answers()).length, 0);
    await page.type("#system", "You answer in one word.");
    await ask("Hi");
    assert.deepEqual(sent.at(-1).messages, [{ role: "system", content: "You answer in one word." },
      { role: "user", content: "Hi" }]);
    const expected = await client.chat.completions.create({ model: "default", temperature: 0, max_tokens: 8,
      messages: [{ role: "system", content: "You answer in one word." }, ...user("Hi")] });
    const conversation = await currentConversation();
    assert.equal(conversation.system, "You answer in one word.");
    assert.equal(conversation.messages[1].content, expected.choices[0].message.content ?? "");
  });

  test("conversations survive a reload; the list switches between them and deletes them", async () => {
    const beforeReload = await answers();
    await open(page, true);
    assert.deepEqual(await answers(), beforeReload.map((a) => ({ ...a, state: "done" })));
    assert.equal(await page.$eval("#system", (e) => e.value), "You answer in one word.");
    assert.equal(await page.$eval("#max-tokens", (e) => e.value), "8");
    const titles = () => page.$$eval("#conversations .open", (all) => all.map((e) => e.textContent));
    assert.deepEqual(await titles(), ["Hi", "Hello from Chromium"]);
    await page.click("#conversations li:nth-child(2) .open");
    assert.deepEqual(await page.$$eval(".msg.user", (all) => all.map((e) => e.textContent)),
      ["Hello from Chromium", "Why?"]);
    assert.equal(await page.$eval("#system", (e) => e.value), "");
    await page.click("#conversations li:nth-child(1) .delete");
    assert.deepEqual(await titles(), ["Hello from Chromium"]);
    await open(page, true);
    assert.deepEqual(await titles(), ["Hello from Chromium"]);
    assert.equal((await stored()).length, 1);
  });

  test("stop ends a stream, keeps what came, and the server frees its slot", async () => {
    await page.click("#new-chat");
    await setField("max-tokens", "3000");
    await setField("extra-params", '{"ignore_eos": true}');
    await page.type("#prompt", "Go on forever");
    await page.click("#send");
    // The answer is rendered while it streams, before any stop.
    await page.waitForFunction(() => {
      const a = document.querySelector(".msg.assistant");
      return a && a.dataset.state === "streaming" && a.querySelector(".content").textContent.length > 0;
    }, { timeout: 60_000 });
    assert.equal(await page.$eval("#send", (e) => e.hidden), true);
    await page.click("#stop");
    await page.waitForSelector('.msg.assistant[data-state="stopped"]', { timeout: 10_000 });
    const shown = (await answers()).at(-1);
    assert.match(shown.stats, /^~\d+ tokens .* \u00b7 stopped$/);
    const kept = (await currentConversation()).messages[1];
    assert.ok(kept.content.length > 0 && !kept.error);
    assert.equal(await page.$eval("#send", (e) => e.hidden), false);
    await until("the slot to be freed", async () => (await metric(server.url, "plumb_state_slots_used")) === 0 &&
      (await metric(server.url, "plumb_running_batch_size")) === 0);
    // The server frees the slot before it answers 499 and counts it, so the count may come a moment later.
    await until("the 499 to be counted", async () =>
      (await metric(server.url, 'plumb_requests_total{endpoint="/v1/chat/completions",status="499"}')) >= 1);
  });

  test("regenerate asks the last user turn again and replaces the answer with a fresh one", async () => {
    await page.click("#new-chat");
    await setField("max-tokens", "12");
    await setField("temperature", "1");
    const first = await ask("Tell a story");
    const firstRequest = sent.at(-1), requests = sent.length;
    await page.click("#regenerate");
    await page.waitForFunction(() => {
      const all = document.querySelectorAll(".msg.assistant");
      return all.length === 1 && all[0].dataset.state === "done";
    }, { timeout: 60_000 });
    assert.equal(sent.length, requests + 1);
    assert.deepEqual(sent.at(-1).messages, firstRequest.messages);
    const second = (await answers()).at(-1);
    const seed = (stats) => /seed (\d+)/.exec(stats)[1];
    assert.notEqual(seed(second.stats), seed(first.stats));
    assert.notEqual(second.content, first.content);
    const conversation = await currentConversation();
    assert.equal(conversation.messages.length, 2);
    assert.equal(conversation.messages[1].stats, second.stats);
  });

  test("Markdown sent in split deltas is rendered as elements; HTML in an answer is shown as text", async () => {
    const answer = "<think>Pondering.</think>\n\n# Title\n\nSome **bold**, *italic* and `a_b` with a " +
      "[link](https://example.com/) and a [trap](javascript:window.trapped=1).\n\n- one\n- two\n  1. nested\n\n" +
      "```js\nconst tag = \"<b>\";\n```\n\n<script>window.injected = 1</script>" +
      "<img src=x onerror=\"window.injected = 2\">\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n";
    // Cut into 5-character deltas, so tags and fences arrive split across chunks.
    const deltas = answer.match(/[\s\S]{1,5}/g).map((content) => ({ id: "chatcmpl-1", object: "chat.completion.chunk",
      seed: 5, choices: [{ index: 0, delta: { content }, finish_reason: null }] }));
    const body = deltas.map((d) => "data: " + JSON.stringify(d) + "\n\n").join("") + "data: [DONE]\n\n";
    const canned = await browser.newPage();
    try {
      await canned.setRequestInterception(true);
      canned.on("request", (r) => r.url().endsWith("/v1/chat/completions")
        ? r.respond({ status: 200, contentType: "text/event-stream", body }) : r.continue());
      await canned.goto(server.url + "/", { waitUntil: "load" });
      await canned.click("#new-chat");
      const shown = await ask("Show me Markdown", canned);
      assert.equal(shown.state, "done");
      assert.equal(shown.reasoning, "Pondering.");
      const dom = await canned.$eval(".msg.assistant .content", (c) => ({
        h1: c.querySelector("h1")?.textContent,
        strong: c.querySelector("p strong")?.textContent,
        em: c.querySelector("p em")?.textContent,
        inlineCode: c.querySelector("p code")?.textContent,
        links: [...c.querySelectorAll("a")].map((a) => [a.textContent, a.getAttribute("href")]),
        items: [...c.querySelectorAll("ul > li")].map((li) => li.firstChild.textContent),
        nested: c.querySelector("ul > li > ol > li")?.textContent,
        code: c.querySelector(".code-block pre code")?.textContent,
        codeClass: c.querySelector(".code-block pre code")?.className,
        copyButton: c.querySelector(".code-block button.copy")?.textContent,
        cells: [...c.querySelectorAll("table th, table td")].map((e) => e.textContent),
        injectedElements: c.querySelectorAll("script, img").length,
        text: c.textContent,
      }));
      assert.deepEqual(dom, {
        h1: "Title", strong: "bold", em: "italic", inlineCode: "a_b",
        links: [["link", "https://example.com/"]],
        items: ["one", "two"], nested: "nested",
        code: "const tag = \"<b>\";", codeClass: "language-js", copyButton: "Copy",
        cells: ["a", "b", "1", "2"],
        injectedElements: 0,
        text: dom.text,
      });
      assert.ok(dom.text.includes("a trap"), dom.text);
      assert.ok(dom.text.includes("<script>window.injected = 1</script><img src=x onerror=\"window.injected = 2\">"),
        dom.text);
      assert.ok(!dom.text.includes("Pondering"));
      assert.deepEqual(await canned.evaluate(() => [typeof window.injected, typeof window.trapped]),
        ["undefined", "undefined"]);
      await canned.click(".code-block button.copy");
      await canned.waitForFunction(() => document.querySelector(".code-block button.copy").textContent === "Copied");
    } finally {
      await canned.close();
    }
  });
});
