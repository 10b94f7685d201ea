// The list of chats kept in this browser (history.js), beside the conversation: searchable by
// title, opened with a click, renamed in place (Enter keeps, Escape cancels), deleted with an
// Undo in a toast for a few seconds. On a phone it is a drawer the "Chats" button opens.
// No native prompt or confirm.

import { $, clear, h } from "./dom.js";
import { toast } from "./notify.js";

const UNDO_MS = 8000;

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
    this.items = $("#chat-items");
    this.search = $("#chat-search");
    this.toggle = $("#chats-toggle");
    this.backdrop = $("#chat-backdrop");
    this.currentId = null;
    this.editing = null; // id of the chat being renamed
    this.search.addEventListener("input", () => this.render(this.currentId));
    this.toggle.addEventListener("click", () => this.setDrawer(!document.body.classList.contains("drawer-open")));
    this.backdrop.addEventListener("click", () => this.setDrawer(false));
    $("#chats-close").addEventListener("click", () => this.setDrawer(false));
    this.node.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && document.body.classList.contains("drawer-open") && !this.editing) {
        e.stopPropagation();
        this.setDrawer(false);
      }
    });
  }

  /** The drawer (phones): open, focus in the search; closed, focus back on its button. */
  setDrawer(open) {
    const was = document.body.classList.contains("drawer-open");
    document.body.classList.toggle("drawer-open", open);
    this.toggle.setAttribute("aria-expanded", String(open));
    this.backdrop.hidden = !open;
    if (open) this.search.focus();
    else if (was) this.toggle.focus();
  }

  render(currentId) {
    this.currentId = currentId;
    const needle = this.search.value.trim().toLowerCase();
    const all = [...this.store.chats].sort((a, b) => b.updated - a.updated);
    const chats = needle ? all.filter((c) => c.title.toLowerCase().includes(needle)) : all;
    this.toggle.replaceChildren("Chats", all.length ? h("span.count", {}, String(all.length)) : null);
    clear(this.items);
    if (!chats.length) {
      this.items.append(h("li.chat-none.muted.small", {}, needle ? "No chat matches." : "No chats yet. Your questions are kept in this browser."));
      return;
    }
    for (const chat of chats) this.items.append(this.item(chat, chat.id === currentId));
  }

  item(chat, current) {
    const name = this.editing === chat.id
      ? this.renameField(chat)
      : h("button.chat-open", { type: "button", title: chat.title, onclick: () => { this.setDrawer(false); this.onOpen(chat.id); } },
        h("span.chat-title", {}, chat.title), h("span.chat-when", {}, when(chat.updated)));
    return h("li", { "aria-current": current ? "true" : undefined, dataset: { chat: chat.id } }, name,
      h("span.chat-actions", {},
        h("button.icon-button.chat-rename", { type: "button", title: "Rename", "aria-label": `Rename “${chat.title}”`, onclick: () => this.startRename(chat) },
          h("span", { "aria-hidden": "true" }, "✎")),
        h("button.icon-button.chat-delete", { type: "button", title: "Delete", "aria-label": `Delete “${chat.title}”`, onclick: () => this.remove(chat) },
          h("span", { "aria-hidden": "true" }, "×"))));
  }

  renameField(chat) {
    const input = h("input.chat-rename-input", { type: "text", value: chat.title, "aria-label": "Chat name", maxlength: "120" });
    let done = false;
    const finish = (keep) => {
      if (done) return;
      done = true;
      this.editing = null;
      if (keep && input.value.trim()) this.store.rename(chat.id, input.value);
      this.render(this.currentId);
      const again = this.items.querySelector(`li[data-chat="${CSS.escape(chat.id)}"] .chat-open`);
      if (again) again.focus();
    };
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter") { e.preventDefault(); finish(true); }
      else if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); finish(false); }
    });
    input.addEventListener("blur", () => finish(true));
    return input;
  }

  startRename(chat) {
    this.editing = chat.id;
    this.render(this.currentId);
    const input = this.items.querySelector(".chat-rename-input");
    if (input) { input.focus(); input.select(); }
  }

  remove(chat) {
    const kept = this.store.get(chat.id);
    const wasOpen = chat.id === this.currentId;
    this.store.remove(chat.id);
    this.onDeleted(chat.id);
    this.render(this.store.currentId);
    toast(`Deleted “${chat.title}”.`, {
      timeout: UNDO_MS,
      action: {
        label: "Undo",
        run: () => {
          this.store.restore(kept);
          if (wasOpen) this.onOpen(chat.id);
          else this.render(this.currentId);
        },
      },
    });
  }
}
