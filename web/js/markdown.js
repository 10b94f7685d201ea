// A small Markdown renderer that builds DOM nodes directly. It never parses HTML: every piece of
// text becomes a text node, so a model's answer cannot inject markup, scripts or handlers. Links
// are only created for wiki pages (opened in the side panel) and http(s) URLs; anything else
// (javascript:, data:, relative files) is shown as plain text.
//
// It covers what answers use: paragraphs, headings, lists (nested by indentation), block quotes,
// fenced code, tables, rules, and inline code, emphasis, strike-through, links and autolinks.
// It is tolerant of half-written input, because it re-renders the answer as tokens stream in.

const FENCE = /^\s{0,3}(`{3,}|~{3,})\s*([\w+-]*)/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
const BULLET = /^(\s*)([-*+])\s+(.*)$/;
const ORDERED = /^(\s*)(\d{1,9})[.)]\s+(.*)$/;
const QUOTE = /^\s{0,3}>\s?(.*)$/;
const TABLE_SEP = /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/;

/** Turn a link target into where it may go: a wiki page, an external URL, or nowhere. */
export function classifyLink(target) {
  let raw = (target || "").trim();
  if (/^https?:\/\//i.test(raw)) {
    try {
      const url = new URL(raw);
      if (url.protocol === "http:" || url.protocol === "https:") return { kind: "external", href: url.href };
    } catch { /* not a URL */ }
    return null;
  }
  if (/^[a-z][a-z0-9+.-]*:/i.test(raw)) return null; // javascript:, data:, mailto: in answers, ...
  const path = normalizeWikiPath(raw);
  return path ? { kind: "wiki", path, href: "/wiki/" + path.split("/").map(encodeURIComponent).join("/") } : null;
}

/** The catalog form of a page path as answers write it (mirrors store/paths.py), or null. */
export function normalizeWikiPath(raw) {
  let text = raw.split("#")[0].split("?")[0];
  try { text = decodeURIComponent(text); } catch { return null; }
  if (!text || /[\u0000-\u001f\\]/.test(text)) return null;
  if (text.startsWith("/wiki/")) text = text.slice(6);
  else if (text.startsWith("wiki/")) text = text.slice(5);
  while (text.startsWith("./")) text = text.slice(2);
  if (text.startsWith("/")) return null;
  const parts = text.split("/");
  if (parts.some((p) => p === "" || p === "." || p === ".." || p.startsWith("."))) return null;
  if (!text.endsWith(".md")) return null;
  return parts.join("/");
}

function el(tag, className) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  return node;
}

// ---- inline -----------------------------------------------------------------------------------

const INLINE = [
  { name: "code", re: /(`+)([\s\S]*?[^`])\1(?!`)/y },
  { name: "link", re: /\[((?:\\.|[^\]\\])+)\]\(\s*<?((?:[^()\s<>]|\([^()\s]*\))+)>?(?:\s+"([^"]*)")?\s*\)/y },
  { name: "autolink", re: /<(https?:\/\/[^\s<>]+)>/y },
  { name: "url", re: /https?:\/\/[^\s<>()\]]+[^\s<>()\].,;:!?'"]/y },
  { name: "strong", re: /(\*\*|__)(?=\S)([\s\S]*?\S)\1/y },
  { name: "strike", re: /~~(?=\S)([\s\S]*?\S)~~/y },
  { name: "em", re: /(\*|_)(?=\S)([\s\S]*?\S)\1(?![\w*])/y },
  { name: "escape", re: /\\([\\`*_{}\[\]()#+\-.!~|>])/y },
  { name: "break", re: / {2,}\n|\\\n/y },
];
const SPECIAL = /[`[<h*_~\\ ]/g;

function renderInline(text, parent, ctx) {
  let buffer = "";
  const flush = () => { if (buffer) { parent.append(document.createTextNode(buffer)); buffer = ""; } };
  let i = 0;
  while (i < text.length) {
    SPECIAL.lastIndex = i;
    const next = SPECIAL.exec(text);
    if (!next) { buffer += text.slice(i); break; }
    buffer += text.slice(i, next.index);
    i = next.index;
    let matched = false;
    for (const rule of INLINE) {
      if (rule.name === "em" && text[i] === "_" && i > 0 && /\w/.test(text[i - 1])) continue; // snake_case
      if (rule.name === "url" && i > 0 && /[\w/]/.test(text[i - 1])) continue;
      rule.re.lastIndex = i;
      const m = rule.re.exec(text);
      if (!m) continue;
      const end = rule.re.lastIndex; // read before recursing: the rules' regexes are shared
      flush();
      emitInline(rule.name, m, parent, ctx);
      i = end;
      matched = true;
      break;
    }
    if (!matched) { buffer += text[i]; i += 1; }
  }
  flush();
}

function emitInline(name, m, parent, ctx) {
  switch (name) {
    case "code": { const c = el("code"); c.textContent = m[2].replace(/^ (.*) $/, "$1"); parent.append(c); break; }
    case "strong": { const s = el("strong"); renderInline(m[2], s, ctx); parent.append(s); break; }
    case "em": { const s = el("em"); renderInline(m[2], s, ctx); parent.append(s); break; }
    case "strike": { const s = el("del"); renderInline(m[1], s, ctx); parent.append(s); break; }
    case "escape": parent.append(document.createTextNode(m[1])); break;
    case "break": parent.append(el("br")); break;
    case "autolink": case "url": appendLink(m[1] || m[0], m[1] || m[0], null, parent, ctx, false); break;
    case "link": appendLink(m[1].replace(/\\(.)/g, "$1"), m[2], m[3], parent, ctx, true); break;
  }
}

function appendLink(label, target, title, parent, ctx, rich) {
  const link = classifyLink(target);
  if (!link) {
    const span = el("span", "dead-link");
    span.title = "Link not followed: " + target;
    if (rich) renderInline(label, span, ctx); else span.textContent = label;
    parent.append(span);
    return;
  }
  const a = el("a");
  a.href = link.href;
  if (title) a.title = title;
  if (link.kind === "external") {
    a.className = "external";
    a.target = "_blank";
    a.rel = "noopener noreferrer";
    if (rich) renderInline(label, a, ctx); else a.textContent = label;
  } else {
    a.className = "citation";
    a.dataset.path = link.path;
    renderInline(label, a, ctx);
    if (ctx.onCitation) ctx.onCitation(a, link.path);
  }
  parent.append(a);
}

// ---- blocks -----------------------------------------------------------------------------------

function splitRow(line) {
  let s = line.trim();
  if (s.startsWith("|")) s = s.slice(1);
  if (s.endsWith("|") && !s.endsWith("\\|")) s = s.slice(0, -1);
  return s.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
}

function isBlockStart(line, nextLine) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line)
    || BULLET.test(line) || ORDERED.test(line)
    || (line.includes("|") && nextLine !== undefined && TABLE_SEP.test(nextLine));
}

function renderBlocks(lines, parent, ctx) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (!line.trim()) { i += 1; continue; }

    let m = FENCE.exec(line);
    if (m) {
      const fence = m[1];
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence)) { body.push(lines[i]); i += 1; }
      i += 1; // closing fence (absent while streaming: the block simply runs to the end)
      const pre = el("pre");
      const code = el("code");
      if (m[2]) code.dataset.lang = m[2];
      code.textContent = body.join("\n");
      pre.append(code);
      parent.append(pre);
      continue;
    }
    m = HEADING.exec(line);
    if (m) {
      const level = Math.min(6, m[1].length + (ctx.headingShift || 0));
      const h = el("h" + level);
      renderInline(m[2], h, ctx);
      parent.append(h);
      i += 1;
      continue;
    }
    if (RULE.test(line)) { parent.append(el("hr")); i += 1; continue; }
    if (QUOTE.test(line)) {
      const inner = [];
      while (i < lines.length && lines[i].trim() && (QUOTE.test(lines[i]) || !isBlockStart(lines[i], lines[i + 1]))) {
        const q = QUOTE.exec(lines[i]);
        inner.push(q ? q[1] : lines[i]);
        i += 1;
      }
      const bq = el("blockquote");
      renderBlocks(inner, bq, ctx);
      parent.append(bq);
      continue;
    }
    if (BULLET.test(line) || ORDERED.test(line)) { i = renderList(lines, i, parent, ctx); continue; }
    if (line.includes("|") && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1])) {
      i = renderTable(lines, i, parent, ctx);
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() && (para.length === 0 || !isBlockStart(lines[i], lines[i + 1]))) {
      para.push(lines[i].replace(/^\s+/, ""));
      i += 1;
    }
    const p = el("p");
    renderInline(para.join("\n"), p, ctx);
    parent.append(p);
  }
}

function renderList(lines, start, parent, ctx) {
  const first = BULLET.exec(lines[start]) || ORDERED.exec(lines[start]);
  const ordered = !BULLET.test(lines[start]);
  const indent = first[1].length;
  const list = el(ordered ? "ol" : "ul");
  if (ordered && first[2] !== "1") list.start = parseInt(first[2], 10);
  let i = start;
  let item = null;
  let itemLines = [];
  const closeItem = () => {
    if (!item) return;
    const [head, ...rest] = itemLines;
    const nested = rest.length ? rest : null;
    renderInline(head, item, ctx);
    if (nested) {
      const minIndent = Math.min(...nested.filter((l) => l.trim()).map((l) => l.match(/^\s*/)[0].length));
      const box = document.createDocumentFragment();
      renderBlocks(nested.map((l) => l.slice(Math.min(minIndent, l.match(/^\s*/)[0].length))), box, ctx);
      item.append(box);
    }
    list.append(item);
    item = null;
  };
  while (i < lines.length) {
    const line = lines[i];
    const m = (ordered ? ORDERED : BULLET).exec(line);
    if (m && m[1].length <= indent + 1 && m[1].length >= indent) {
      closeItem();
      item = el("li");
      itemLines = [m[3]];
      i += 1;
      continue;
    }
    if (!line.trim()) {
      const next = lines[i + 1];
      if (next !== undefined && next.match(/^\s*/)[0].length > indent && next.trim()) { itemLines.push(""); i += 1; continue; }
      break;
    }
    const lead = line.match(/^\s*/)[0].length;
    if (lead > indent) { itemLines.push(line); i += 1; continue; }
    if (!isBlockStart(line, lines[i + 1]) && item) { itemLines[0] += "\n" + line.trim(); i += 1; continue; }
    break;
  }
  closeItem();
  parent.append(list);
  return i;
}

function renderTable(lines, start, parent, ctx) {
  const header = splitRow(lines[start]);
  const aligns = splitRow(lines[start + 1]).map((c) => (c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : c.startsWith(":") ? "left" : ""));
  const wrap = el("div", "table-wrap");
  const table = el("table");
  const thead = el("thead");
  const tr = el("tr");
  header.forEach((cell, n) => {
    const th = el("th");
    if (aligns[n]) th.style.textAlign = aligns[n];
    renderInline(cell, th, ctx);
    tr.append(th);
  });
  thead.append(tr);
  table.append(thead);
  const tbody = el("tbody");
  let i = start + 2;
  while (i < lines.length && lines[i].includes("|") && lines[i].trim()) {
    const row = el("tr");
    splitRow(lines[i]).slice(0, header.length).forEach((cell, n) => {
      const td = el("td");
      if (aligns[n]) td.style.textAlign = aligns[n];
      renderInline(cell, td, ctx);
      row.append(td);
    });
    tbody.append(row);
    i += 1;
  }
  table.append(tbody);
  wrap.append(table);
  parent.append(wrap);
  return i;
}

/**
 * Render Markdown `text` into a fresh DocumentFragment.
 * ctx.onCitation(anchor, path) is called for every link to a wiki page (to number or mark it);
 * ctx.headingShift demotes headings (an answer's "#" should not outrank the page's own).
 */
export function renderMarkdown(text, ctx = {}) {
  const fragment = document.createDocumentFragment();
  renderBlocks(String(text || "").replace(/\r\n?/g, "\n").split("\n"), fragment, ctx);
  return fragment;
}
