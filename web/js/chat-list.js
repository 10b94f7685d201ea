// The list of earlier chats (kept in this browser by history.js): open one, rename it, delete it.

import { $, clear, h } from "./dom.js";

function when(ms) {
  const date = new Date(ms);
  const today = new Date();
  return date.toDateString() === today.toDateString()
    ? date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
    : date.toLocaleDateString();
}

export class ChatList {
  constructor({ store, onOpen, onDeleted }) {
    this.store = store;
    this.onOpen = onOpen;
    this.onDeleted = onDeleted;
    this.node = $("#chat-list");
    this.open = false;
  }

  render(currentId) {
    const chats = [...this.store.chats].sort((a, b) => b.updated - a.updated);
    clear(this.node);
    this.node.hidden = !chats.length;
    if (!chats.length) return;
    const details = h("details", { open: this.open },
      h("summary", {}, `Chats (${chats.length})`),
      h("ul", {}, chats.map((chat) => h("li", { "aria-current": chat.id === currentId ? "true" : undefined, dataset: { chat: chat.id } },
        h("button.chat-open", { type: "button", title: chat.title, onclick: () => this.onOpen(chat.id) }, chat.title),
        h("span.chat-when", {}, when(chat.updated)),
        h("button.tool-button.chat-rename", { type: "button", "aria-label": `Rename “${chat.title}”`, onclick: () => this.rename(chat) }, "Rename"),
        h("button.tool-button.chat-delete", { type: "button", "aria-label": `Delete “${chat.title}”`, onclick: () => this.remove(chat) }, "Delete")))));
    details.addEventListener("toggle", () => { this.open = details.open; });
    this.node.append(details);
  }

  rename(chat) {
    const title = window.prompt("Name this chat", chat.title);
    if (title === null || !title.trim()) return;
    this.store.rename(chat.id, title);
    this.render(this.store.currentId);
  }

  remove(chat) {
    if (!window.confirm(`Delete the chat “${chat.title}”? It is kept only in this browser.`)) return;
    this.store.remove(chat.id);
    this.onDeleted(chat.id);
    this.render(this.store.currentId);
  }
}
