// One question and its answer in the conversation, updated as the answer's events arrive:
// pages read, the streamed answer with its citations (a preview card each), sources, follow-ups,
// the mode and cost, and the notices folded into one "notes" line.

import { api } from "./api.js";
import { addCodeCopyButtons, answerTools } from "./answer-tools.js";
import { citationCard } from "./cite-card.js";
import { formatDuration, formatNumber, h } from "./dom.js";
import { normalizeWikiPath, renderMarkdown } from "./markdown.js";

/** One question and its answer, updated as events arrive. */
export class AnswerView {
  constructor(app, question, earlierPages = []) {
    this.app = app;
    this.question = question;
    this.earlierPages = earlierPages; // pages read for the earlier answers in this question's history
    this.pagesRead = [];
    this.rounds = []; // the pages events of rounds 2 and later (multi-hop reading): round, why, added
    this.citations = [];
    this.offline = null; // {reason, message} when the model failed and the answer is the offline extract
    this.abstained = null; // {message, related} when the wiki does not cover the question: no answer, no citation
    this.match = null; // "strong" | "weak" | "none": how well the keyword evidence matches (offline selection)
    this.mode = "llm";
    this.started = performance.now();
    this.answer = "";
    this.failed = false;
    this.invalid = new Set(); // catalog paths the answer linked to without having read them
    this.citationNumbers = new Map();
    this.frame = 0;
    this.pagesData = []; // the pages event's entries ({path, title, truncated}), kept with the chat
    this.method = null;
    this.usage = null;
    this.errorMessage = null;
    this.vote = null;
    this.inHistory = false;
    this.tools = null;

    this.status = h("p.status", { role: "status" }, h("span.spinner", { "aria-hidden": "true" }), "Choosing pages…");
    this.rewriteLine = h("p.rewrite-line", { hidden: true });
    this.pagesBox = h("details.pages-read", { hidden: true });
    this.matchLabel = h("p.match-label", { hidden: true }); // a weak keyword match says so, small
    // Notices (what was degraded, trimmed or dropped) are not the answer: one folded line under
    // it, "N notes", opened on demand. Errors and "Stopped" stay in view (laterNotices).
    this.noticeList = [];
    this.notes = h("details.answer-notes", { hidden: true });
    this.notices = h("div.notices"); // errors before the answer came
    this.laterNotices = h("div.notices"); // errors and "Stopped" after it
    this.body = h("div.answer-body.prose", { "aria-busy": "true" });
    this.sources = h("div.sources", { hidden: true });
    this.suggestions = h("div.suggestions", { hidden: true });
    this.footer = h("footer.answer-meta");
    this.node = h("article.turn", {},
      h("div.question", {}, h("p", {}, question)),
      h("div.answer", {}, this.rewriteLine, this.pagesBox, this.status, this.matchLabel, this.notices, this.body,
        this.sources, this.laterNotices, this.suggestions, this.footer, this.notes),
    );
  }

  event(name, data) {
    switch (name) {
      case "rewrite":
        this.rewriteLine.hidden = false;
        this.rewriteLine.replaceChildren("Searched for: ", h("q", {}, data.query));
        break;
      case "pages": // one per round of reading; each carries every page read so far
        this.pagesData = data.pages || [];
        this.method = data.method || null;
        this.pagesRead = (data.pages || []).map((p) => p.path);
        if ((data.round || 1) > 1) this.rounds.push(data);
        else { this.rounds = []; this.showMatch(data.match || null); }
        this.showPages(data.pages || [], data.method);
        break;
      case "notice": this.addNote(String(data.message || "")); break;
      case "token":
        this.answer += data.text || "";
        this.status.hidden = true;
        this.scheduleRender();
        break;
      case "citations":
        this.invalid = new Set((data.invalid || []).map(normalizeWikiPath).filter(Boolean));
        this.citations = data.citations || [];
        this.renderNow();
        this.showSources(this.citations);
        break;
      case "offline": this.offline = data; this.addNote(String(data.message || ""), true); break;
      case "abstained":
        this.abstained = { message: String(data.message || ""), related: Array.isArray(data.related) ? data.related : [] };
        this.status.hidden = true;
        this.renderNow();
        break;
      case "suggestions": this.showSuggestions(data.questions || []); break;
      case "usage": this.usage = { ...data, ms: Math.round(performance.now() - this.started) }; this.showUsage(data); break;
      case "error":
        this.failed = true;
        this.errorMessage = data.message;
        this.status.hidden = true;
        (this.answer ? this.laterNotices : this.notices).append(h("p.error", { role: "alert" }, h("strong", {}, "Could not answer: "), data.message,
          data.code ? h("code.code-tag", {}, data.code) : null));
        break;
      case "done": break;
      default: break;
    }
  }

  /** One notice into the folded notes line (`first`: the line saying why the model was not used). */
  addNote(message, first = false) {
    if (!message) return;
    if (first) this.noticeList.unshift(message);
    else this.noticeList.push(message);
    const count = this.noticeList.length;
    this.notes.hidden = false;
    this.notes.replaceChildren(
      h("summary", {}, `${count} note${count === 1 ? "" : "s"}`, h("span.muted", {}, " · how this answer was made")),
      h("ul", {}, this.noticeList.map((n) => h("li.notice", {}, n))));
  }

  /** A weak keyword match is labelled: the passages are the closest, not a sure answer. */
  showMatch(match) {
    this.match = match;
    this.matchLabel.hidden = match !== "weak";
    this.matchLabel.textContent = match === "weak" ? "Weak keyword match" : "";
  }

  showPages(pages, method) {
    this.status.replaceChildren(h("span.spinner", { "aria-hidden": "true" }), pages.length ? "Reading and answering…" : "Answering…");
    if (!pages.length) return;
    this.pagesBox.hidden = false;
    const how = { llm: "chosen by the model", lexical: "keyword search", "lexical-fallback": "keyword search (fallback)", given: "as requested" }[method] || "";
    this.pagesBox.replaceChildren(
      h("summary", {}, `Read ${pages.length} page${pages.length === 1 ? "" : "s"}`, how ? h("span.muted", {}, ` · ${how}`) : null),
      h("ul", {}, pages.map((p) => h("li", {},
        h("a.page-link", { href: "/wiki/" + p.path, dataset: { path: p.path } }, p.title),
        h("span.path", {}, p.path), p.truncated ? h("span.tag", {}, "shortened") : null))),
      ...this.rounds.map((r) => h("p.round", {}, `round ${r.round}: ${r.why || ""}`,
        h("span.muted", {}, ` (${(r.added || []).length} page${(r.added || []).length === 1 ? "" : "s"})`))),
    );
  }

  scheduleRender() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => { this.frame = 0; this.renderNow(); });
  }

  renderNow() {
    if (this.frame) { cancelAnimationFrame(this.frame); this.frame = 0; }
    if (this.abstained) { // the answer's text says the same in words (kept for copying and the history)
      this.body.replaceChildren(this.notCovered(this.abstained));
      return;
    }
    const numbers = this.citationNumbers;
    const invalid = this.invalid;
    const seen = new Map(); // path -> links to it so far: the k-th link cites the passage listing k
    const fragment = renderMarkdown(this.answer, {
      headingShift: 1,
      onCitation: (anchor, path) => {
        if (invalid.has(path)) {
          anchor.classList.add("invalid");
          anchor.title = "Not one of the pages read for this answer";
          return;
        }
        if (!numbers.has(path)) numbers.set(path, numbers.size + 1);
        anchor.append(h("sup.cite-num", { "aria-hidden": "true" }, String(numbers.get(path))));
        const k = seen.get(path) || 0;
        seen.set(path, k + 1);
        this.linkPassage(anchor, path, this.passageOf(path, k));
      },
    });
    this.body.replaceChildren(fragment);
  }

  /** "Not covered by this wiki": the wiki holds no answer. The closest pages are offered as
   * related reading, not as sources: plain page links (they open in the panel), no numbers. */
  notCovered({ message, related }) {
    const pages = related.filter((r) => r && typeof r.path === "string" && normalizeWikiPath(r.path));
    return h("section.not-covered", { "aria-label": "Not covered by this wiki" },
      h("p.not-covered-title", {}, "Not covered by this wiki"),
      h("div.not-covered-message", {}, renderMarkdown(message)),
      pages.length ? h("div.related-pages", {},
        h("p.related-label", {}, "Related, not an answer"),
        h("ul", {}, pages.map((r) => h("li", {},
          h("a.page-link.related-link", { href: "/wiki/" + r.path, dataset: { path: r.path } }, r.title || r.path),
          h("span.path", {}, r.path))))) : null);
  }

  /** The passage of `path` that its k-th link in the answer cites (the page's first, else none). */
  passageOf(path, k) {
    const citation = this.citations.find((c) => c.path === path);
    const passages = (citation && Array.isArray(citation.passages)) ? citation.passages : [];
    return passages.find((p) => Array.isArray(p.links) && p.links.includes(k)) || passages[0] || null;
  }

  /** A citation link that opens its page at `passage`, and previews it in a card on hover, focus
   * and tap (cite-card.js). The quote is page text from the server: it goes in as text. */
  linkPassage(anchor, path, passage) {
    const citation = this.citations.find((c) => c.path === path);
    const title = (citation && citation.title) || this.app.titleOf(path);
    const quoted = passage && typeof passage.quote === "string";
    citationCard().attach(anchor, {
      title, heading: quoted ? passage.heading || "" : "", quote: quoted ? passage.quote : "",
      onOpen: () => this.app.panel.open(path, quoted ? passage : null),
    });
    if (!quoted) return;
    anchor.classList.add("has-passage");
    if (passage.anchor) anchor.href = "/wiki/" + path + "#" + passage.anchor;
    anchor.addEventListener("click", (event) => {
      if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
      event.preventDefault();
      this.app.panel.open(path, passage);
    });
  }

  showSources(citations) {
    if (!citations.length) return;
    this.sources.hidden = false;
    this.sources.replaceChildren(
      h("h3", {}, "Sources"),
      h("ol", {}, citations.map((c) => {
        const passage = this.passageOf(c.path, 0);
        const link = h("a.page-link", { href: "/wiki/" + c.path, dataset: { path: c.path } }, c.title);
        this.linkPassage(link, c.path, passage);
        return h("li", { value: this.citationNumbers.get(c.path) || undefined }, link, h("span.path", {}, c.path),
          passage && typeof passage.quote === "string" ? h("q.cited-quote", {}, passage.quote) : null);
      })),
    );
  }

  showSuggestions(questions) {
    if (!questions.length) return;
    this.suggestions.hidden = false;
    this.suggestions.replaceChildren(
      h("span.muted", {}, "Ask next"),
      ...questions.map((q) => h("button.chip", { type: "button", onclick: () => this.app.chat.ask(q) }, q)),
    );
  }

  showUsage(usage) {
    this.mode = usage.mode || this.mode;
    const parts = [];
    if (usage.mode === "offline") {
      parts.push(h("span.mode-pill.offline", { title: this.offline ? this.offline.message : undefined },
        this.offline ? "Offline answer · model unavailable" : "Offline answer"));
    }
    else {
      parts.push(h("span.mode-pill", {}, "Model answer"));
      parts.push(`${usage.llm_calls} call${usage.llm_calls === 1 ? "" : "s"}`);
      if (usage.prompt_tokens || usage.completion_tokens) {
        parts.push(`${formatNumber(usage.prompt_tokens)} + ${formatNumber(usage.completion_tokens)} tokens`);
      }
      if (usage.cost_usd) parts.push(`$${usage.cost_usd.toFixed(4)}`);
      if (usage.cache_hits) parts.push(`${usage.cache_hits} cached`);
    }
    parts.push(formatDuration(usage.ms ?? performance.now() - this.started));
    this.footer.replaceChildren(...parts.flatMap((p, i) => (i ? [h("span.sep", { "aria-hidden": "true" }, "·"), p] : [p])));
  }

  finish() {
    this.status.hidden = true;
    this.body.setAttribute("aria-busy", "false");
    this.renderNow();
    if (!this.answer && !this.failed) this.body.append(h("p.muted", {}, "No answer was returned."));
    addCodeCopyButtons(this.body);
    if (this.answer && !this.failed && this.citations.length) this.offerSave();
  }

  // Saved answers are navigation pages in wiki/answers/: later questions can find them and
  // follow their citations, but no answer may cite them as evidence.
  offerSave() {
    const button = h("button.link-button.save-answer", { type: "button", title: "File this answer into wiki/answers/ (navigation only, never cited)" }, "Save to wiki");
    button.addEventListener("click", async () => {
      button.disabled = true;
      button.textContent = "Saving…";
      try {
        const saved = await api.saveAnswer(this.question, this.answer, this.citations.map((c) => c.path),
          this.madeFrom(), this.mode);
        button.replaceWith(h("a.page-link.saved-answer", { href: "/wiki/" + saved.path, dataset: { path: saved.path } }, "Saved as " + saved.path));
      } catch (error) {
        button.disabled = false;
        button.textContent = "Save to wiki";
        this.laterNotices.append(h("p.error", { role: "alert" }, "Not saved: " + (error.message || error)));
      }
    });
    this.footer.append(h("span.sep", { "aria-hidden": "true" }, "·"), button);
  }

  /** What a kept chat stores of this turn (history.js). */
  record() {
    return {
      question: this.question, answer: this.answer, citations: this.citations, pages: this.pagesData,
      method: this.method, mode: this.mode, earlierPages: this.earlierPages, failed: this.failed,
      error: this.errorMessage, usage: this.usage, vote: this.vote, abstained: this.abstained,
      notices: this.noticeList, offline: this.offline, match: this.match,
    };
  }

  /** Show a kept turn as it ended, without asking again. */
  restore(record) {
    this.answer = typeof record.answer === "string" ? record.answer : "";
    this.citations = Array.isArray(record.citations) ? record.citations : [];
    this.pagesData = Array.isArray(record.pages) ? record.pages : [];
    this.pagesRead = this.pagesData.map((p) => p.path);
    this.method = record.method || null;
    this.mode = record.mode || "llm";
    this.vote = record.vote || null;
    if (record.offline && typeof record.offline === "object") this.offline = record.offline;
    for (const note of Array.isArray(record.notices) ? record.notices : []) this.addNote(String(note));
    if (record.abstained && typeof record.abstained === "object") {
      this.abstained = { message: String(record.abstained.message || ""),
        related: Array.isArray(record.abstained.related) ? record.abstained.related : [] };
    }
    if (this.pagesData.length) this.showPages(this.pagesData, this.method);
    if (typeof record.match === "string") this.showMatch(record.match);
    if (record.error) this.event("error", { message: record.error });
    this.failed = Boolean(record.failed);
    this.showSources(this.citations);
    if (record.usage) { this.usage = record.usage; this.showUsage(record.usage); }
    this.finish();
  }

  showTools(chat, index, last) {
    if (!this.answer || this.failed) {
      if (last && this.failed) { // a failed question can be asked again
        this.tools?.remove();
        this.tools = h("div.answer-tools", {}, h("button.tool-button.regenerate", { type: "button", onclick: () => chat.regenerate(this) }, "Try again"));
        this.node.querySelector(".answer").append(this.tools);
      }
      return;
    }
    const tools = answerTools(() => this.answer, {
      regenerate: last ? () => chat.regenerate(this) : null,
      vote: (kind) => chat.vote(this, index, kind),
    }, this.vote);
    if (this.tools) this.tools.replaceWith(tools);
    else this.node.querySelector(".answer").append(tools);
    this.tools = tools;
  }

  /** Every page this answer was made from: read for it, or behind the history it was asked with. */
  madeFrom() {
    return [...new Set([...this.pagesRead, ...this.earlierPages])];
  }

  stopped() {
    this.finish();
    this.laterNotices.append(h("p.notice", {}, "Stopped. The server stopped the answer too."));
    this.failed = !this.answer;
  }
}
