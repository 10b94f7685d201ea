// The conversation: questions, streamed answers with citations, pages read, notices,
// suggested follow-ups, and what each answer cost.

import { api, streamChat } from "./api.js";
import { AnswerView } from "./answer-view.js";
import { ChatList } from "./chat-list.js";
import { $, clear, h } from "./dom.js";
import { ChatStore } from "./history.js";

const HISTORY_TURNS = 10;
const QUESTION_WORDS = new Set(("why how what when where which who whom whose is are was were can could do does did " +
  "should would will shall may might must has have had").split(" "));

/** A starter question about a page, as the server's offline follow-ups make them
 * (navigate/offline_navigator.py: about): a title that is a question is that question, a
 * subject gives "What does the wiki say about <subject>?", a sentence gives none. */
export function questionAbout(raw) {
  const title = String(raw || "").replace(/\s+/g, " ").trim().replace(/[:;,\s]+$/, "");
  const words = title.split(" ").filter(Boolean);
  if (!words.length) return null;
  if (title.endsWith("?") || QUESTION_WORDS.has(words[0].toLowerCase())) return title.replace(/[.!?]+$/, "") + "?";
  if (words.length > 8 || /[.!]$/.test(title)) return null;
  const subject = /^[A-Z][a-z]/.test(title) ? title[0].toLowerCase() + title.slice(1) : title; // "API" stays
  return `What does the wiki say about ${subject}?`;
}

export class Chat {
  constructor({ app }) {
    this.app = app;
    this.list = $("#conversation");
    this.empty = $("#chat-empty");
    this.form = $("#ask-form");
    this.input = $("#question");
    this.send = $("#send");
    this.rewrite = $("#opt-rewrite");
    this.suggest = $("#opt-suggest");
    this.history = [];
    // Per history item, the pages its text came from: an answer that uses the history is made
    // from those pages too, and saving it must say so (only their readers may read the copy).
    this.historyPages = [];
    this.controller = null;
    // Chats kept in this browser (history.js): the open chat's id (null until its first answer)
    // and the views of its turns, in order.
    this.store = new ChatStore();
    this.chatId = null;
    this.turns = [];
    this.chatList = new ChatList({
      store: this.store,
      onOpen: (id) => this.openChat(id),
      onDeleted: (id) => { if (id === this.chatId) this.reset(); },
    });

    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      if (this.controller) this.stop();
      else this.ask(this.input.value);
    });
    this.input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        if (!this.controller) this.ask(this.input.value);
      }
    });
    this.input.addEventListener("input", () => this.autosize());
    $("#new-chat").addEventListener("click", () => this.reset());
    for (const box of [this.rewrite, this.suggest]) {
      const key = "kaas-" + box.id;
      if (localStorage.getItem(key) !== null) box.checked = localStorage.getItem(key) === "1";
      box.addEventListener("change", () => localStorage.setItem(key, box.checked ? "1" : "0"));
    }
  }

  autosize() {
    this.input.style.height = "auto";
    this.input.style.height = Math.min(this.input.scrollHeight, 220) + "px";
  }

  focus() { this.input.focus(); }

  reset() {
    this.clearView();
    this.chatId = null;
    this.store.currentId = null;
    this.chatList.render(null);
    this.input.value = "";
    this.autosize();
    this.focus();
  }

  clearView() {
    this.stop();
    this.history = [];
    this.historyPages = [];
    this.turns = [];
    for (const node of [...this.list.children]) if (node !== this.empty) node.remove();
    this.empty.hidden = false;
  }

  /** The chat this browser had open (after a reload), or none. */
  restore() {
    const id = this.store.currentId;
    if (id && this.store.get(id)) this.openChat(id);
    else this.chatList.render(null);
  }

  /** Show a kept chat: its turns as they ended, and its answers as the history of the next question. */
  openChat(id) {
    const chat = this.store.get(id);
    if (!chat) return;
    this.clearView();
    this.chatId = id;
    this.store.currentId = id;
    for (const record of chat.turns) {
      const turn = new AnswerView(this.app, record.question, record.earlierPages || []);
      turn.restore(record);
      this.list.append(turn.node);
      this.empty.hidden = true;
      this.remember(turn);
    }
    this.offerTools();
    this.chatList.render(id);
  }

  /** A finished turn joins the conversation: its view, and (when it answered) the history. */
  remember(turn) {
    this.turns.push(turn);
    if (turn.answer && !turn.failed) {
      this.history.push({ role: "user", content: turn.question }, { role: "assistant", content: turn.answer });
      this.historyPages.push([], turn.madeFrom());
      turn.inHistory = true;
    }
  }

  /** Tools on every finished answer; Regenerate only on the last one. */
  offerTools() {
    this.turns.forEach((turn, index) => turn.showTools(this, index, index === this.turns.length - 1));
  }

  /** Ask the last question again, in place of its answer. */
  regenerate(turn) {
    if (this.controller || this.turns[this.turns.length - 1] !== turn) return;
    this.turns.pop();
    if (turn.inHistory) {
      this.history.splice(-2, 2);
      this.historyPages.splice(-2, 2);
    }
    turn.node.remove();
    this.ask(turn.question, { replace: true });
  }

  async vote(turn, index, kind) {
    await api.feedback({
      vote: kind, question: turn.question, answer: turn.answer.slice(0, 2000), mode: turn.mode,
      pages: turn.pagesRead, citations: turn.citations.map((c) => c.path),
    });
    turn.vote = kind;
    if (this.chatId) this.store.updateTurn(this.chatId, index, { vote: kind });
  }

  stop() {
    if (this.controller) this.controller.abort();
  }

  setBusy(busy) {
    this.send.textContent = busy ? "Stop" : "Ask";
    this.send.classList.toggle("stop", busy);
    this.send.setAttribute("aria-label", busy ? "Stop the answer" : "Ask the question");
  }

  showStarters(catalog) {
    const box = $("#starters");
    clear(box);
    const pages = catalog.topics.flatMap((t) => t.pages).slice(0, 40);
    const picks = [];
    for (const topic of catalog.topics) if (topic.pages.length && picks.length < 3) picks.push(topic.pages[0]);
    for (const page of picks.length ? picks : pages.slice(0, 3)) {
      const question = questionAbout(page.title);
      if (question) box.append(h("button.chip", { type: "button", onclick: () => this.ask(question) }, question));
    }
  }

  async ask(raw, { replace = false } = {}) {
    const question = raw.trim();
    if (!question || this.controller) return;
    this.empty.hidden = true;
    this.input.value = "";
    this.autosize();

    const earlierPages = [...new Set(this.historyPages.slice(-HISTORY_TURNS).flat())];
    const turn = new AnswerView(this.app, question, earlierPages);
    this.list.append(turn.node);
    turn.node.scrollIntoView({ block: "start", behavior: "smooth" });

    const body = {
      question,
      history: this.history.slice(-HISTORY_TURNS),
      rewrite: this.rewrite.checked,
      suggest: this.suggest.checked,
    };
    this.controller = new AbortController();
    this.setBusy(true);
    try {
      await streamChat(body, (name, data) => turn.event(name, data), this.controller.signal);
      turn.finish();
    } catch (error) {
      if (error.name === "AbortError") turn.stopped();
      else turn.event("error", { code: error.code || "network", message: error.message || String(error) });
    } finally {
      this.controller = null;
      this.setBusy(false);
      this.input.focus();
    }
    this.remember(turn);
    const record = turn.record();
    this.chatId = replace && this.chatId ? this.store.replaceLast(this.chatId, record) : this.store.addTurn(this.chatId, record);
    this.store.currentId = this.chatId;
    this.chatList.render(this.chatId);
    this.offerTools();
  }
}

