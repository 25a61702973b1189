// Writes docs/chat-page.png (README's picture of the chat page): a short exchange with models/default in headless
// Chromium, its sampling seeded so the text is the same on each run (the timings under the answers are measured
// anew). Run from the repository root after scripts/setup.d/server.sh:
//   PLUMB_BINARY=build/release/bin/plumb node tests/server/chat_screenshot.mjs [OUT.png]
import path from "node:path";
import { launchBrowser, root, startServer, stopServer } from "./support.mjs";

const out = path.resolve(process.argv[2] ?? path.join(root, "docs/chat-page.png"));
const server = await startServer(["--model", path.join(root, "models/default")]);
const browser = await launchBrowser();
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1100, height: 640 });
  await page.goto(server.url + "/", { waitUntil: "load" });
  await page.waitForFunction(() => document.getElementById("model").textContent === "default");
  await page.$eval("#extra-params", (e) => (e.value = '{"seed": 7}'));
  await page.$eval("#max-tokens", (e) => (e.value = "48"));
  const ask = async (text) => {
    const answered = await page.$$eval(".msg.assistant", (all) => all.length);
    await page.type("#prompt", text);
    await page.click("#send");
    await page.waitForFunction((n) => {
      const all = document.querySelectorAll(".msg.assistant");
      return all.length === n + 1 && all[n].dataset.state === "done";
    }, { timeout: 120_000 }, answered);
  };
  await ask("Hello there.");
  await page.click("#new-chat");
  await page.type("#system", "You write fortunes.");
  await ask("Tell me a fortune.");
  await ask("And another one.");
  await page.screenshot({ path: out });
  console.log("chat_screenshot: wrote " + out);
} finally {
  await browser.close();
  await stopServer(server);
}
