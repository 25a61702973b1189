// The chat itself. The server keeps no chat state: each request carries the whole conversation, and conversations
// live in this browser's localStorage. Answers are read from the server-sent events with fetch(), which can send the
// API key header (EventSource cannot) and be aborted (the Stop button; the server then cancels the request).
"use strict";
const $ = (id) => document.getElementById(id);
const log = $("log"), promptBox = $("prompt"), systemBox = $("system");
const storageKeys = { conversations: "plumb.conversations", current: "plumb.current", settings: "plumb.settings" };
const settingFields = ["max-tokens", "temperature", "extra-params"];
let model = null;
let running = null;  // { controller } while an answer streams

function readJson(key, fallback) {
  try {
    return JSON.parse(localStorage.getItem(key)) ?? fallback;
  } catch {
    return fallback;
  }
}

// A conversation: { id, title, system, messages: [{ role, content, reasoning?, stats?, error? }] }; the list holds
// them most recently saved first.
let conversations = readJson(storageKeys.conversations, []);
let current = conversations.find((c) => c.id === localStorage.getItem(storageKeys.current)) ?? fresh();

function fresh() {
  return { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 8), title: "", system: "", messages: [] };
}

// A conversation is listed once it holds something: an empty new one is not worth a line.
function save() {
  const kept = conversations.filter((c) => c.id !== current.id);
  if (current.messages.length > 0 || current.system) kept.unshift(current);
  conversations = kept;
  localStorage.setItem(storageKeys.conversations, JSON.stringify(conversations));
  localStorage.setItem(storageKeys.current, current.id);
  showList();
}

function showList() {
  const list = $("conversations");
  list.replaceChildren();
  for (const c of conversations) {
    const item = document.createElement("li");
    item.className = c.id === current.id ? "current" : "";
    item.dataset.id = c.id;
    const open = document.createElement("button");
    open.type = "button";
    open.className = "open";
    open.textContent = c.title || "(system prompt only)";
    open.title = open.textContent;
    open.onclick = () => switchTo(c);
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "delete";
    remove.textContent = "\u00d7";
    remove.title = "Delete this conversation";
    remove.onclick = () => removeConversation(c);
    item.append(open, remove);
    list.appendChild(item);
  }
}

function switchTo(conversation) {
  if (running) return;
  current = conversation;
  localStorage.setItem(storageKeys.current, current.id);
  showConversation();
}

function removeConversation(conversation) {
  if (running && conversation === current) return;
  conversations = conversations.filter((c) => c.id !== conversation.id);
  localStorage.setItem(storageKeys.conversations, JSON.stringify(conversations));
  if (conversation === current) current = conversations[0] ?? fresh();
  localStorage.setItem(storageKeys.current, current.id);
  showConversation();
}

function showConversation() {
  systemBox.value = current.system;
  log.replaceChildren();
  for (const m of current.messages) showMessage(m).dataset.state = m.error ? "error" : "done";
  showList();
  updateButtons();
  log.scrollTop = log.scrollHeight;
}

// A model may write its reasoning into the content as <think>...</think> when the server does not split it out.
function splitThink(message) {
  const m = /^\s*<think>([\s\S]*?)(?:<\/think>\s*|$)([\s\S]*)$/.exec(message.content);
  if (!m) return { reasoning: message.reasoning ?? "", content: message.content };
  return { reasoning: (message.reasoning ?? "") + m[1], content: m[2] };
}

function showMessage(message) {
  const view = document.createElement("div");
  view.className = "msg " + message.role;
  if (message.role === "user") {
    view.textContent = message.content;
  } else {
    view.innerHTML = '<details class="reasoning" hidden><summary>Reasoning</summary><div class="reasoning-text">' +
      '</div></details><div class="content"></div><div class="stats"></div>';
    fillAnswer(view, message);
  }
  log.appendChild(view);
  return view;
}

function fillAnswer(view, message) {
  const { reasoning, content } = splitThink(message);
  const details = view.querySelector(".reasoning");
  details.hidden = !reasoning;
  details.querySelector(".reasoning-text").textContent = reasoning;
  Markdown.render(content, view.querySelector(".content"));
  if (message.error) {
    view.classList.add("error");
    view.querySelector(".content").append(document.createTextNode("[error: " + message.error + "]"));
  }
  view.querySelector(".stats").textContent = message.stats ?? "";
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function loadModel() {
  try {
    const r = await fetch("/v1/models", { headers: headers() });
    const body = await r.json();
    if (!r.ok) throw new Error(body.error ? body.error.message : r.statusText);
    model = body.data[0].id;
    $("model").textContent = model;
  } catch (e) {
    $("model").textContent = "(model list: " + e.message + ")";
  }
}

// What is sent: the system prompt, then the turns that were answered (a failed answer is left out).
function requestBody(turns) {
  const messages = current.system.trim() ? [{ role: "system", content: current.system }] : [];
  for (const m of turns) if (!m.error) messages.push({ role: m.role, content: m.content });
  const extra = $("extra-params").value.trim();
  const body = { messages, stream: true, stream_options: { include_usage: true },
    max_tokens: Number($("max-tokens").value) || 512, temperature: Number($("temperature").value),
    ...(extra ? JSON.parse(extra) : {}) };
  if (model) body.model = model;
  return body;
}

// Tokens/s counts the tokens after the first over the time from the first token to the end of the stream, so it is
// the generation rate alone; the first token's wait (prompt processing and queueing) is the TTFT. Without the usage
// chunk (a stopped answer), the content chunks stand in for tokens, marked "~".
function statsLine(t) {
  const tokens = t.usage ? t.usage.completion_tokens : t.chunks;
  const parts = [(t.usage ? "" : "~") + tokens + " tokens"];
  if (t.first !== null && tokens > 1 && t.end > t.first)
    parts.push(((tokens - 1) / ((t.end - t.first) / 1000)).toFixed(1) + " tokens/s");
  if (t.first !== null) parts.push("TTFT " + Math.round(t.first - t.start) + " ms");
  if (t.seed !== null) parts.push("seed " + t.seed);
  if (t.stopped) parts.push("stopped");
  return parts.join(" \u00b7 ");
}

async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      if (event.startsWith("data: ") && event !== "data: [DONE]") onEvent(JSON.parse(event.slice(6)));
    }
  }
}

// Answers the conversation's last user turn, appending the answer as it streams.
async function answer() {
  const message = { role: "assistant", content: "", reasoning: "" };
  current.messages.push(message);
  save();
  const view = showMessage(message);
  view.dataset.state = "streaming";
  running = { controller: new AbortController() };
  updateButtons();
  const t = { start: performance.now(), first: null, end: null, chunks: 0, usage: null, seed: null, stopped: false };
  let pending = null;
  const redraw = () => {
    pending = null;
    fillAnswer(view, message);
    log.scrollTop = log.scrollHeight;
  };
  try {
    const body = JSON.stringify(requestBody(current.messages.slice(0, -1)));
    const r = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body,
      signal: running.controller.signal });
    if (!r.ok) {
      const reply = await r.json().catch(() => ({}));
      throw new Error(reply.error ? reply.error.message : r.status + " " + r.statusText);
    }
    await readEvents(r, (chunk) => {
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.seed !== undefined) t.seed = chunk.seed;
      if (chunk.usage) t.usage = chunk.usage;
      const delta = (chunk.choices[0] || {}).delta || {};
      if (!delta.content && !delta.reasoning_content) return;
      t.first ??= performance.now();
      ++t.chunks;
      message.content += delta.content ?? "";
      message.reasoning += delta.reasoning_content ?? "";
      pending ??= setTimeout(redraw, 40);  // one render per burst of chunks, not one per chunk
    });
  } catch (e) {
    if (e.name === "AbortError") t.stopped = true;
    else message.error = e.message;
  }
  clearTimeout(pending);
  t.end = performance.now();
  message.stats = statsLine(t);
  if (!message.reasoning) delete message.reasoning;
  redraw();
  running = null;
  save();
  view.dataset.state = message.error ? "error" : t.stopped ? "stopped" : "done";
  updateButtons();
}

function updateButtons() {
  $("send").hidden = !!running;
  $("stop").hidden = !running;
  $("regenerate").disabled = !!running || current.messages.length === 0;
}

$("form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = promptBox.value.trim();
  if (!text || running) return;
  promptBox.value = "";
  if (!model) await loadModel();
  if (!current.title) current.title = text.slice(0, 60);
  current.messages.push({ role: "user", content: text });
  showMessage(current.messages.at(-1)).dataset.state = "done";
  await answer();
  promptBox.focus();
});
promptBox.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    $("form").requestSubmit();
  }
});
$("stop").addEventListener("click", () => running && running.controller.abort());
// Regenerate drops the last answer and asks the last user turn again; the server draws a fresh seed for it.
$("regenerate").addEventListener("click", async () => {
  if (running) return;
  if (current.messages.at(-1)?.role === "assistant") {
    current.messages.pop();
    log.lastElementChild?.remove();
  }
  if (current.messages.at(-1)?.role === "user") await answer();
});
$("new-chat").addEventListener("click", () => {
  if (running) return;
  current = fresh();
  showConversation();
  promptBox.focus();
});
systemBox.addEventListener("input", () => {
  current.system = systemBox.value;
  save();
});

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    // navigator.clipboard exists only in secure contexts (https, localhost): elsewhere the older way.
    const scratch = document.createElement("textarea");
    scratch.value = text;
    document.body.appendChild(scratch);
    scratch.select();
    document.execCommand("copy");
    scratch.remove();
  }
}
log.addEventListener("click", async (event) => {
  const button = event.target.closest(".copy");
  if (!button) return;
  await copyText(button.closest(".code-block").querySelector("code").textContent);
  button.textContent = "Copied";
  setTimeout(() => (button.textContent = "Copy"), 1500);
});

// Settings last across reloads; the API key only for the tab's session, so it is not left on disk.
const settings = readJson(storageKeys.settings, {});
for (const id of settingFields) {
  if (settings[id] !== undefined) $(id).value = settings[id];
  $(id).addEventListener("change", () => {
    settings[id] = $(id).value;
    localStorage.setItem(storageKeys.settings, JSON.stringify(settings));
  });
}
$("api-key").value = sessionStorage.getItem("plumb.api-key") ?? "";
$("api-key").addEventListener("change", () => {
  sessionStorage.setItem("plumb.api-key", $("api-key").value);
  loadModel();
});
showConversation();
loadModel();
