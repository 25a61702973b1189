// The Markdown of chat answers (CommonMark's common part plus GitHub's tables and strikethrough), rendered straight
// into DOM nodes. Model text reaches the page only as text nodes and as href attributes that passed safeHref, never
// as HTML, so markup in an answer is shown, not run. Rendering the whole text again on each streamed chunk keeps a
// half-written answer (an open code fence, a list still growing) looking as it will once complete.
const Markdown = (() => {
  "use strict";

  function el(tag, parent, text) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }

  // Only links that leave the page for the web or mail: javascript: and data: URLs would run in the page's origin.
  function safeHref(url) {
    const u = url.trim();
    return /^(https?:\/\/|mailto:)/i.test(u) ? u : null;
  }

  function link(parent, href, label) {
    const a = el("a", parent);
    a.href = href;
    a.target = "_blank";
    a.rel = "noopener noreferrer";
    if (typeof label === "string") inline(label, a);
    return a;
  }

  // [label](url "title") starting at text[i]: the label's brackets may nest.
  function matchLink(text, i) {
    let depth = 0, j = i;
    for (; j < text.length; ++j) {
      if (text[j] === "\\") ++j;
      else if (text[j] === "[") ++depth;
      else if (text[j] === "]" && --depth === 0) break;
    }
    if (j >= text.length || text[j + 1] !== "(") return null;
    const m = /^\(\s*<?([^\s()<>]*)>?(?:\s+"[^"]*")?\s*\)/.exec(text.slice(j + 1));
    return m ? { label: text.slice(i + 1, j), url: m[1], end: j + 1 + m[0].length } : null;
  }

  // *em*, **strong**, ***both***, the same with _, and ~~del~~ starting at text[i]. A delimiter opens only before a
  // non-space and closes only after one; _ does not work inside words (snake_case stays as written).
  function emphasis(text, i) {
    const c = text[i];
    const run = /^(\*{1,3}|_{1,3}|~~)/.exec(text.slice(i));
    if (!run) return null;
    const wordy = (k) => k >= 0 && k < text.length && /\w/.test(text[k]);
    if (c === "_" && wordy(i - 1)) return null;
    for (let len = run[1].length; len >= (c === "~" ? 2 : 1); --len) {
      const d = c.repeat(len);
      if (!text[i + len] || /\s/.test(text[i + len])) return null;
      for (let k = text.indexOf(d, i + len + 1); k > 0; k = text.indexOf(d, k + 1)) {
        if (/\s/.test(text[k - 1]) || text[k - 1] === "\\") continue;
        if (len === 1 && (text[k - 1] === c || text[k + 1] === c)) continue;
        if (c === "_" && wordy(k + len)) continue;
        const inner = text.slice(i + len, k);
        if (c === "~") return { tag: "del", inner, end: k + len };
        if (len === 3) return { tag: "strong", inner: c + inner + c, end: k + len };
        return { tag: len === 2 ? "strong" : "em", inner, end: k + len };
      }
    }
    return null;
  }

  const bareUrl = /^https?:\/\/[^\s<>"'`]*[^\s<>"'`.,;:!?)\]]/;

  function inline(text, parent) {
    let plain = "";
    const flush = () => {
      if (plain) parent.appendChild(document.createTextNode(plain));
      plain = "";
    };
    for (let i = 0; i < text.length;) {
      const c = text[i];
      let m;
      if (c === "\\" && /[!-/:-@[-`{-~]/.test(text[i + 1] || "")) {
        plain += text[i + 1];
        i += 2;
      } else if (c === "\n") {
        flush();
        el("br", parent);
        ++i;
      } else if (c === "`") {
        const ticks = /^`+/.exec(text.slice(i))[0];
        const end = text.indexOf(ticks, i + ticks.length);
        if (end < 0) {
          plain += ticks;
          i += ticks.length;
          continue;
        }
        flush();
        el("code", parent, text.slice(i + ticks.length, end).replace(/^ (.+) $/s, "$1"));
        i = end + ticks.length;
      } else if (c === "[" && (m = matchLink(text, i))) {
        flush();
        const href = safeHref(m.url);
        if (href) link(parent, href, m.label);
        else inline(m.label, parent);
        i = m.end;
      } else if (c === "<" && (m = /^<(https?:\/\/[^\s<>]+)>/.exec(text.slice(i)))) {
        flush();
        link(parent, m[1]).textContent = m[1];
        i += m[0].length;
      } else if (c === "h" && !/\w/.test(text[i - 1] || "") && (m = bareUrl.exec(text.slice(i)))) {
        flush();
        link(parent, m[0]).textContent = m[0];
        i += m[0].length;
      } else if ("*_~".includes(c) && (m = emphasis(text, i))) {
        flush();
        inline(m.inner, el(m.tag, parent));
        i = m.end;
      } else {
        plain += c;
        ++i;
      }
    }
    flush();
  }

  const blank = (line) => /^\s*$/.test(line);
  const indentOf = (line) => /^ */.exec(line)[0].length;
  const fenceOpen = (line) => /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)/.exec(line);
  const heading = (line) => /^ {0,3}(#{1,6})(?:\s+(.*?))?(?:\s+#+)?\s*$/.exec(line);
  const rule = (line) => /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/.test(line);
  const quote = (line) => /^ {0,3}>/.test(line);
  const listItem = (line) => /^( {0,3})([-*+]|\d{1,9}[.)])(?: +|$)/.exec(line);
  const tableRule = (line) => /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/.test(line) && line.includes("-");
  const startsBlock = (line) => fenceOpen(line) || heading(line) || rule(line) || quote(line) || listItem(line);

  function codeBlock(parent, code, lang) {
    const box = el("div", parent);
    box.className = "code-block";
    const bar = el("div", box);
    bar.className = "code-bar";
    el("span", bar, lang || "code");
    const copy = el("button", bar, "Copy");
    copy.type = "button";
    copy.className = "copy";
    const body = el("code", el("pre", box), code);
    if (lang) body.className = "language-" + lang.replace(/[^\w+-]/g, "");
  }

  function cells(line) {
    return line.trim().replace(/^\|/, "").replace(/\|$/, "").split(/(?<!\\)\|/).map((s) => s.trim());
  }

  function table(lines, i, parent) {
    const aligns = cells(lines[i + 1]).map((s) => {
      if (s.startsWith(":") && s.endsWith(":")) return "center";
      return s.endsWith(":") ? "right" : s.startsWith(":") ? "left" : "";
    });
    const row = (line, section, tag) => {
      const tr = el("tr", section);
      cells(line).forEach((text, k) => {
        const cell = el(tag, tr);
        if (aligns[k]) cell.style.textAlign = aligns[k];
        inline(text, cell);
      });
    };
    const t = el("table", parent);
    row(lines[i], el("thead", t), "th");
    const body = el("tbody", t);
    for (i += 2; i < lines.length && !blank(lines[i]) && lines[i].includes("|"); ++i) row(lines[i], body, "td");
    return i;
  }

  // A list from lines[i]: each item holds the lines after its marker that are indented past the marker or continue
  // its paragraph; items are parsed as blocks of their own, so lists nest. A tight list (no blank line within) shows
  // its items' paragraphs without <p> margins.
  function list(lines, i, parent) {
    const first = listItem(lines[i]);
    const ordered = /\d/.test(first[2]);
    const box = el(ordered ? "ol" : "ul", parent);
    if (ordered && parseInt(first[2], 10) !== 1) box.start = parseInt(first[2], 10);
    let loose = false;
    while (i < lines.length) {
      const m = listItem(lines[i]);
      if (!m || /\d/.test(m[2]) !== ordered || m[1].length > first[1].length) break;
      const body = [lines[i].slice(m[0].length)];
      for (++i; i < lines.length; ++i) {
        const line = lines[i];
        if (blank(line)) {
          let k = i;
          while (k < lines.length && blank(lines[k])) ++k;
          if (k < lines.length && indentOf(lines[k]) > m[1].length) {
            loose = true;
            body.push(...lines.slice(i, k));
            i = k - 1;
            continue;
          }
          if (k < lines.length && listItem(lines[k])) loose = true;
          i = k;
          break;
        }
        if (indentOf(line) > m[1].length) body.push(line.slice(Math.min(indentOf(line), m[0].length)));
        else if (!startsBlock(line)) body.push(line);
        else break;
      }
      blocks(body, el("li", box));
    }
    if (!loose)
      for (const p of box.querySelectorAll(":scope > li > p")) p.replaceWith(...p.childNodes);
    return i;
  }

  function blocks(lines, parent) {
    for (let i = 0; i < lines.length;) {
      const line = lines[i];
      let m;
      if (blank(line)) {
        ++i;
      } else if ((m = fenceOpen(line))) {
        const close = new RegExp("^ {0,3}" + (m[1][0] === "`" ? "`" : "~") + "{" + m[1].length + ",}\\s*$");
        const body = [];
        for (++i; i < lines.length && !close.test(lines[i]); ++i) body.push(lines[i]);
        ++i;  // the closing fence; an answer still streaming may not have written it yet
        codeBlock(parent, body.join("\n"), m[2]);
      } else if ((m = heading(line))) {
        inline(m[2] || "", el("h" + m[1].length, parent));
        ++i;
      } else if (rule(line)) {
        el("hr", parent);
        ++i;
      } else if (quote(line)) {
        const body = [];
        for (; i < lines.length && quote(lines[i]); ++i) body.push(lines[i].replace(/^ {0,3}> ?/, ""));
        blocks(body, el("blockquote", parent));
      } else if (listItem(line)) {
        i = list(lines, i, parent);
      } else if (line.includes("|") && i + 1 < lines.length && tableRule(lines[i + 1])) {
        i = table(lines, i, parent);
      } else {
        const para = [line.trim()];
        for (++i; i < lines.length && !blank(lines[i]) && !startsBlock(lines[i]); ++i) para.push(lines[i].trim());
        inline(para.join("\n"), el("p", parent));
      }
    }
  }

  return {
    // Replaces what `parent` shows with `text` rendered.
    render(text, parent) {
      parent.replaceChildren();
      blocks(text.replace(/\r\n?/g, "\n").split("\n"), parent);
    },
  };
})();
