// The wiki browser (articles by topic, an article with its table of contents), the side panel
// that shows a cited article next to the chat, and the way into the editor (editor.js).

import { api, getToken } from "./api.js";
import { $, clear, h, setSanitizedHtml } from "./dom.js";
import { Editor } from "./editor.js";
import { confirmDialog } from "./notify.js";

export const topicLabel = (topic) => topic.replace(/[-_]+/g, " ");

export function tocList(toc, onJump) {
  const items = (toc || []).filter((t) => t.level >= 2 && t.level <= 3);
  if (items.length < 2) return null;
  return h("ul", {}, items.map((t) => h("li", { class: "toc-l" + t.level },
    h("a", { href: "#" + t.id, onclick: (e) => { e.preventDefault(); onJump(t.id); } }, t.title))));
}

function metaLine(page) {
  const fm = page.frontmatter || {};
  const bits = [];
  if (fm.updated) bits.push(h("span", {}, "Updated ", h("time", {}, String(fm.updated))));
  const tags = Array.isArray(fm.tags) ? fm.tags : [];
  if (tags.length) bits.push(h("span.tags", {}, tags.map((t) => h("span.tag", {}, String(t)))));
  return bits.length ? h("p.article-meta", {}, bits) : null;
}

function sourcesBlock(page) {
  const sources = Array.isArray(page.frontmatter?.sources) ? page.frontmatter.sources : [];
  if (!sources.length) return null;
  return h("details.article-sources", {}, h("summary", {}, `Compiled from ${sources.length} source${sources.length === 1 ? "" : "s"}`),
    h("ul", {}, sources.map((s) => h("li", {}, h("code", {}, String(s))))));
}

// The pages that link to this one (``links_in`` of /api/pages: only pages this reader may read).
function backlinksBlock(page) {
  const pages = Array.isArray(page.links_in) ? page.links_in : [];
  if (!pages.length) return null;
  return h("section.article-backlinks", { "aria-label": "Linked from" }, h("h2", {}, "Linked from"),
    h("ul", {}, pages.map((p) => h("li", {}, h("a", { href: "#/wiki/" + p.path }, p.title)))));
}

function warningsBlock(page) {
  const warnings = [...(page.warnings || [])];
  if (page.broken_links?.length) warnings.push(`Links to missing pages: ${page.broken_links.join(", ")}`);
  if (!page.in_catalog) warnings.push("This page is not in the catalog yet (run `kaas index`, or save it here).");
  return warnings.length ? h("div.notices", {}, warnings.map((w) => h("p.notice", {}, w))) : null;
}

function scrollToId(container, id) {
  const target = container.querySelector(`[id="${CSS.escape(id)}"]`);
  if (target) target.scrollIntoView({ behavior: "smooth", block: "start" });
  return !!target;
}

const WORD_CHAR = /[\p{L}\p{N}]/u;

/** The letters and digits of the text under `container`, lower-cased, with where each is
 * ([text node, offset]): what a quote is compared with (whitespace, punctuation, list markers
 * and Markdown's marks are not compared, so a passage spanning a list or an admonition's
 * blocks matches the page as rendered). `from`: where the text under `heading` begins. */
function pageLetters(container, heading) {
  const walker = document.createTreeWalker(container, NodeFilter.SHOW_TEXT);
  const chars = [];
  let text = "";
  let from = 0;
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (heading && !from && (heading === node.parentNode || heading.contains(node) ||
        (heading.compareDocumentPosition(node) & Node.DOCUMENT_POSITION_FOLLOWING))) from = text.length;
    const value = node.nodeValue;
    for (let i = 0; i < value.length; i++) {
      if (!WORD_CHAR.test(value[i])) continue;
      for (const c of value[i].toLowerCase()) { text += c; chars.push([node, i]); }
    }
  }
  return { text, chars, from };
}

const letters = (s) => [...String(s || "").toLowerCase()].filter((c) => WORD_CHAR.test(c)).join("");

/** Where `quote` is in `text` ([start, end) of letters), the heading's part first: the whole
 * quote; else from its first words to its last (a passage whose middle the page shows
 * otherwise); else its first or its last words alone. Null when none is there. */
function findQuote(text, quote, from) {
  const find = (wanted, after = from) => {
    if (wanted.length < 3) return -1;
    const at = text.indexOf(wanted, after);
    return at >= 0 || !after ? at : text.indexOf(wanted);
  };
  const whole = find(quote);
  if (whole >= 0) return [whole, whole + quote.length];
  const head = quote.slice(0, 40);
  const tail = quote.slice(-40);
  const start = find(head);
  if (start >= 0) {
    const end = text.indexOf(tail, start + head.length);
    if (end >= 0 && end + tail.length - start <= quote.length * 1.5 + 40) return [start, end + tail.length];
    return [start, start + head.length];
  }
  const last = find(tail);
  return last >= 0 ? [last, last + tail.length] : null;
}

/**
 * Mark a cited passage in a rendered article and scroll to it: all of it, every block it spans
 * (paragraphs, list items, an admonition's title and body). `passage` comes from the answer's
 * `citations` event: `quote` is text of the page (untrusted: it is only ever compared with the
 * page's text and never parsed; the marks wrap the page's own text nodes), `anchor` the id of
 * the heading it is under (searched from there first). Returns the first mark, or null when the
 * quote is not found (then the page is scrolled to the heading, if any).
 */
export function highlightPassage(container, passage) {
  if (!passage) return null;
  const heading = passage.anchor ? container.querySelector(`[id="${CSS.escape(String(passage.anchor))}"]`) : null;
  const { text, chars, from } = pageLetters(container, heading);
  const found = findQuote(text, letters(passage.quote), from);
  if (!found) {
    if (heading) heading.scrollIntoView({ block: "start" });
    return null;
  }
  // Each text node's share of the passage: from its first letter to its last, and the
  // punctuation that ends it ("five seconds." keeps its full stop).
  const pieces = new Map();
  for (let k = found[0]; k < found[1]; k++) {
    const [node, offset] = chars[k];
    const piece = pieces.get(node) || [offset, offset];
    piece[1] = offset + 1;
    pieces.set(node, piece);
  }
  for (const [node, piece] of pieces) {
    while (piece[1] < node.nodeValue.length && /[^\s\p{L}\p{N}]/u.test(node.nodeValue[piece[1]])) piece[1]++;
  }
  // Wrapped last node first (offsets stay valid).
  const marks = [];
  for (const [node, [begin, end]] of [...pieces].reverse()) {
    const range = document.createRange();
    range.setStart(node, begin);
    range.setEnd(node, end);
    const mark = document.createElement("mark");
    mark.className = "cited-passage";
    range.surroundContents(mark);
    marks.unshift(mark);
  }
  marks[0].scrollIntoView({ block: "center" });
  return marks[0];
}

/** The side panel: a cited article next to the conversation. */
export class Panel {
  constructor({ app }) {
    this.app = app;
    this.node = $("#panel");
    this.title = $("#panel-title");
    this.body = $("#panel-body");
    this.path = null;
    this.returnFocus = null;
    $("#panel-close").addEventListener("click", () => this.close());
    $("#panel-open").addEventListener("click", () => { if (this.path) { const p = this.path; this.close(); location.hash = "#/wiki/" + p; } });
    $("#panel-edit").addEventListener("click", () => { if (this.path) { const p = this.path; this.close(); location.hash = "#/edit/" + p; } });
  }

  get isOpen() { return !this.node.hidden; }

  /** Open `path` in the panel; with `passage` (a citation's), scrolled to it and marked. */
  async open(path, passage = null) {
    if (!this.isOpen) this.returnFocus = document.activeElement;
    this.path = path;
    this.node.hidden = false;
    document.body.classList.add("panel-open");
    this.title.textContent = this.app.titleOf(path);
    this.body.replaceChildren(h("p.muted", {}, "Loading…"));
    try {
      const page = await api.page(path);
      if (this.path !== path) return;
      this.title.textContent = page.title;
      const content = h("div.prose");
      setSanitizedHtml(content, page.html);
      const toc = tocList(page.toc, (id) => scrollToId(content, id));
      this.body.replaceChildren(...[
        h("p.panel-path", {}, h("span.topic", {}, topicLabel(page.topic)), " · ", h("code", {}, page.path)),
        page.summary ? h("p.lede", {}, page.summary) : null,
        toc ? h("details.toc.toc-inline", {}, h("summary", {}, "On this page"), toc) : null,
        warningsBlock(page),
        content,
        sourcesBlock(page),
      ].filter(Boolean));
      this.body.scrollTop = 0;
      this.title.focus({ preventScroll: true });
      highlightPassage(content, passage);
      return;
    } catch (error) {
      this.body.replaceChildren(h("p.error", { role: "alert" }, error.message));
    }
    this.title.focus();
  }

  close() {
    if (!this.isOpen) return;
    this.node.hidden = true;
    this.path = null;
    document.body.classList.remove("panel-open");
    if (this.returnFocus && document.contains(this.returnFocus)) this.returnFocus.focus();
  }
}

/** The wiki view: tree of articles by topic, the article, or the editor. */
export class WikiView {
  constructor({ app }) {
    this.app = app;
    this.tree = $("#wiki-tree");
    this.main = $("#wiki-main");
    this.filter = $("#wiki-filter");
    this.current = null;
    this.editor = null;
    this.filter.addEventListener("input", () => this.renderTree());
  }

  renderTree() {
    const catalog = this.app.catalog;
    if (!catalog) return;
    const needle = this.filter.value.trim().toLowerCase();
    clear(this.tree);
    let shown = 0;
    for (const topic of catalog.topics) {
      const pages = topic.pages.filter((p) => !needle || p.title.toLowerCase().includes(needle)
        || p.path.toLowerCase().includes(needle) || (p.summary || "").toLowerCase().includes(needle));
      if (!pages.length) continue;
      shown += pages.length;
      const open = !!needle || pages.some((p) => p.path === this.current) || catalog.topics.length <= 6;
      this.tree.append(h("details.topic", { open },
        h("summary", {}, h("span", {}, topicLabel(topic.topic)), h("span.count", {}, String(pages.length))),
        h("ul", {}, pages.map((p) => h("li", {}, h("a", {
          href: "#/wiki/" + p.path, title: p.summary,
          "aria-current": p.path === this.current ? "page" : undefined,
        }, p.title))))));
    }
    if (!shown) this.tree.append(h("p.muted.small", {}, needle ? "No article matches." : "The wiki has no articles yet."));
  }

  async show(path) {
    if (!(await this.leaveEditor())) return false;
    this.current = path || null;
    this.renderTree();
    if (!path) { this.showHome(); return true; }
    this.main.replaceChildren(h("p.muted", {}, "Loading…"));
    try {
      const page = await api.page(path);
      if (this.current !== path) return true;
      this.renderArticle(page);
    } catch (error) {
      this.main.replaceChildren(h("div.empty-state", {}, h("h1", {}, "Page not available"), h("p.error", {}, error.message),
        h("p", {}, h("a", { href: "#/wiki" }, "All articles"))));
    }
    return true;
  }

  showHome() {
    const catalog = this.app.catalog;
    const count = catalog ? catalog.articles : 0;
    this.main.replaceChildren(h("div.wiki-home", {},
      h("h1", {}, "Wiki"),
      h("p.lede", {}, count ? `${count} article${count === 1 ? "" : "s"} in ${catalog.topics.length} topic${catalog.topics.length === 1 ? "" : "s"}. Pick one on the left, or ask a question in the chat.`
        : "This wiki has no articles yet. Add Markdown files under wiki/ (or run kaas compile), and they appear here."),
      (catalog?.topics || []).map((topic) => h("section.topic-card", {},
        h("h2", {}, topicLabel(topic.topic)),
        h("ul", {}, topic.pages.map((p) => h("li", {}, h("a", { href: "#/wiki/" + p.path }, p.title),
          p.summary ? h("span.summary", {}, p.summary) : null))))),
    ));
    this.main.scrollTop = 0;
  }

  renderArticle(page) {
    const content = h("div.prose.article-body");
    setSanitizedHtml(content, page.html);
    const toc = tocList(page.toc, (id) => scrollToId(content, id));
    this.main.replaceChildren(h("article.wiki-article", {},
      h("header.article-head", {},
        h("p.crumbs", {}, h("a", { href: "#/wiki" }, "Wiki"), " / ", h("span", {}, topicLabel(page.topic))),
        h("div.actions", {},
          // With a token, the server-rendered /wiki/ page cannot be opened by a plain link (the
          // token travels only as a header): open the page in the app, in a new tab.
          getToken()
            ? h("a.button.ghost", { href: "/#/wiki/" + page.path, target: "_blank", rel: "noopener", title: "Open in a new tab" }, "Page")
            : h("a.button.ghost", { href: "/wiki/" + page.path, target: "_blank", rel: "noopener", title: "Open as a standalone page" }, "Page"),
          h("a.button", { href: "#/edit/" + page.path, "data-action": "edit" }, "Edit"))),
      metaLine(page),
      warningsBlock(page),
      h("div.article-layout", {},
        content,
        toc ? h("nav.toc.toc-side", { "aria-label": "On this page" }, h("p.toc-title", {}, "On this page"), toc) : null),
      backlinksBlock(page),
      sourcesBlock(page),
    ));
    this.main.scrollTop = 0;
    window.scrollTo(0, 0);
  }

  async edit(path) {
    if (!(await this.leaveEditor())) return;
    this.current = path;
    this.renderTree();
    this.main.replaceChildren(h("p.muted", {}, "Loading…"));
    try {
      const page = await api.page(path);
      this.editor = new Editor(this, page);
      this.main.replaceChildren(this.editor.node);
      this.editor.focus();
    } catch (error) {
      this.main.replaceChildren(h("p.error", { role: "alert" }, error.message));
    }
  }

  /** Leaving the editor with unsaved changes asks first (an in-app dialog). Returns false to stay. */
  async leaveEditor() {
    const editor = this.editor;
    if (!editor) return true;
    if (editor.dirty && !(await confirmDialog({
      title: "Leave without saving?", message: `Your changes to “${editor.page.title}” are not saved.`,
      ok: "Discard changes", cancel: "Keep editing", danger: true,
    }))) {
      editor.focus(false);
      return false;
    }
    if (this.editor === editor) this.editor = null;
    return true;
  }
}
