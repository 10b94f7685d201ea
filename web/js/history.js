// Chats kept in this browser (localStorage of this origin; no server state): each chat is a list
// of finished turns (question, answer, pages read, citations, mode, vote). Bounded: at most
// MAX_CHATS chats (the oldest go first) and about MAX_BYTES of JSON in all; a damaged entry
// is dropped, never fatal.

const KEY = "kaas-chats";
const CURRENT_KEY = "kaas-chat-current";
const MAX_CHATS = 50;
const MAX_TURNS = 100;
const MAX_BYTES = 2_000_000;

function newId() {
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
}

function titleFrom(question) {
  const text = question.replace(/\s+/g, " ").trim();
  return text.length > 60 ? text.slice(0, 57) + "…" : text;
}

export class ChatStore {
  constructor(storage = window.localStorage) {
    this.storage = storage;
    this.chats = this.read();
  }

  read() {
    try {
      const data = JSON.parse(this.storage.getItem(KEY) || "[]");
      if (!Array.isArray(data)) return [];
      return data.filter((c) => c && typeof c.id === "string" && Array.isArray(c.turns));
    } catch {
      return [];
    }
  }

  write() {
    this.chats.sort((a, b) => b.updated - a.updated);
    this.chats = this.chats.slice(0, MAX_CHATS);
    let text = JSON.stringify(this.chats);
    while (text.length > MAX_BYTES && this.chats.length > 1) { // the oldest chats make room
      this.chats.pop();
      text = JSON.stringify(this.chats);
    }
    try {
      this.storage.setItem(KEY, text);
    } catch { // storage full (or disabled): keep the newest half and try once more
      this.chats = this.chats.slice(0, Math.max(1, Math.floor(this.chats.length / 2)));
      try { this.storage.setItem(KEY, JSON.stringify(this.chats)); } catch { /* nothing more to do */ }
    }
  }

  get(id) { return this.chats.find((c) => c.id === id) || null; }

  get currentId() { return this.storage.getItem(CURRENT_KEY) || null; }

  set currentId(id) {
    if (id) this.storage.setItem(CURRENT_KEY, id);
    else this.storage.removeItem(CURRENT_KEY);
  }

  /** Add a finished turn to chat `id` (made when missing); returns the chat's id. */
  addTurn(id, turn) {
    let chat = id && this.get(id);
    if (!chat) {
      chat = { id: id || newId(), title: titleFrom(turn.question), created: Date.now(), updated: Date.now(), turns: [] };
      this.chats.push(chat);
    }
    chat.turns.push(turn);
    chat.turns = chat.turns.slice(-MAX_TURNS);
    chat.updated = Date.now();
    this.write();
    return chat.id;
  }

  /** Replace the last turn of chat `id` (a regenerated answer). */
  replaceLast(id, turn) {
    const chat = this.get(id);
    if (!chat || !chat.turns.length) return this.addTurn(id, turn);
    chat.turns[chat.turns.length - 1] = turn;
    chat.updated = Date.now();
    this.write();
    return id;
  }

  updateTurn(id, index, changes) {
    const chat = this.get(id);
    if (!chat || !chat.turns[index]) return;
    Object.assign(chat.turns[index], changes);
    this.write();
  }

  rename(id, title) {
    const chat = this.get(id);
    if (!chat) return;
    chat.title = titleFrom(title) || chat.title;
    this.write();
  }

  remove(id) {
    this.chats = this.chats.filter((c) => c.id !== id);
    if (this.currentId === id) this.currentId = null;
    this.write();
  }

  /** Put back a chat `remove` took out (an undone delete), as it was. */
  restore(chat) {
    if (!chat || this.get(chat.id)) return;
    this.chats.push(chat);
    this.write();
  }

  newId() { return newId(); }
}
