#include "server/chat_page.h"

namespace plumb::server {

namespace {

// The page keeps the conversation in memory, sends it whole with each message (the server keeps no chat state), and
// reads the server-sent events with fetch() so it can send the API key header, which EventSource cannot.
constexpr std::string_view kPage = R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>plumb chat</title>
<style>
  :root { color-scheme: light dark; --accent: #3b6ea5; --muted: #888; }
  body { margin: 0; font: 15px/1.5 system-ui, sans-serif; display: flex; flex-direction: column; height: 100vh; }
  header { padding: 8px 16px; border-bottom: 1px solid #8884; display: flex; gap: 12px; align-items: center; }
  header h1 { font-size: 16px; margin: 0; }
  header .model { color: var(--muted); font-size: 13px; flex: 1; }
  header label { font-size: 13px; color: var(--muted); }
  header input { width: 9em; }
  #log { flex: 1; overflow-y: auto; padding: 16px; }
  .msg { max-width: 760px; margin: 0 auto 12px; padding: 8px 12px; border-radius: 8px; white-space: pre-wrap;
         word-wrap: break-word; }
  .msg.user { background: #3b6ea522; }
  .msg.assistant { background: #8881; }
  .msg.error { background: #c0392b33; }
  .reasoning { color: var(--muted); font-size: 13px; border-left: 3px solid #8886; padding-left: 8px;
               margin-bottom: 6px; }
  .reasoning:empty { display: none; }
  form { display: flex; gap: 8px; padding: 12px 16px; border-top: 1px solid #8884; max-width: 792px; width: 100%;
         margin: 0 auto; box-sizing: border-box; }
  textarea { flex: 1; resize: none; font: inherit; padding: 6px; }
  button { padding: 6px 16px; background: var(--accent); color: white; border: 0; border-radius: 6px; }
  button:disabled { opacity: 0.5; }
</style>
</head>
<body>
<header>
  <h1>plumb</h1><span class="model" id="model">…</span>
  <label>max tokens <input id="max-tokens" type="number" value="256" min="1"></label>
  <label>temperature <input id="temperature" type="number" value="0.7" min="0" max="2" step="0.1"></label>
  <label>API key <input id="api-key" type="password" autocomplete="off"></label>
</header>
<main id="log" aria-live="polite"></main>
<form id="form">
  <textarea id="prompt" rows="2" placeholder="Send a message (Enter to send, Shift+Enter for a new line)"></textarea>
  <button id="send" type="submit">Send</button>
</form>
<script>
"use strict";
const log = document.getElementById("log");
const form = document.getElementById("form");
const promptBox = document.getElementById("prompt");
const sendButton = document.getElementById("send");
const history = [];
let model = null;

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = document.getElementById("api-key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  if (role === "assistant") {
    div.innerHTML = '<div class="reasoning"></div><div class="content"></div>';
  } else {
    div.textContent = text;
  }
  log.appendChild(div);
  log.scrollTop = log.scrollHeight;
  return div;
}

async function loadModel() {
  try {
    const r = await fetch("/v1/models", { headers: headers() });
    const body = await r.json();
    if (!r.ok) throw new Error(body.error ? body.error.message : r.statusText);
    model = body.data[0].id;
    document.getElementById("model").textContent = model;
  } catch (e) {
    document.getElementById("model").textContent = "(model list: " + e.message + ")";
  }
}

async function send(text) {
  if (!model) await loadModel();
  history.push({ role: "user", content: text });
  addMessage("user", text);
  const div = addMessage("assistant");
  div.dataset.state = "streaming";
  const reasoningBox = div.querySelector(".reasoning");
  const contentBox = div.querySelector(".content");
  let content = "", reasoning = "";
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(),
      body: JSON.stringify({
        model, messages: history, stream: true,
        max_tokens: Number(document.getElementById("max-tokens").value) || 256,
        temperature: Number(document.getElementById("temperature").value),
      }),
    });
    if (!r.ok) {
      const body = await r.json().catch(() => ({}));
      throw new Error(body.error ? body.error.message : r.status + " " + r.statusText);
    }
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        if (!event.startsWith("data: ")) continue;
        const data = event.slice(6);
        if (data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        const delta = (chunk.choices[0] || {}).delta || {};
        if (delta.reasoning_content) reasoningBox.textContent = (reasoning += delta.reasoning_content);
        if (delta.content) contentBox.textContent = (content += delta.content);
        log.scrollTop = log.scrollHeight;
      }
    }
    history.push({ role: "assistant", content });
    div.dataset.state = "done";
  } catch (e) {
    div.classList.add("error");
    contentBox.textContent = content + "\n[error: " + e.message + "]";
    history.pop();
    div.dataset.state = "error";
  }
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = promptBox.value.trim();
  if (!text) return;
  promptBox.value = "";
  sendButton.disabled = true;
  try { await send(text); } finally { sendButton.disabled = false; promptBox.focus(); }
});
promptBox.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); form.requestSubmit(); }
});
loadModel();
</script>
</body>
</html>
)PAGE";

}  // namespace

std::string_view chat_page_html() {
  return kPage;
}

}  // namespace plumb::server
