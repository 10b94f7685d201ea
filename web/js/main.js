// KaaS in the browser: routing between the chat and the wiki, the side panel, the token
// dialog and keyboard shortcuts. No build step; ES modules served as they are.
//
// Routes (in the URL fragment): #/chat, #/wiki, #/wiki/<path>, #/edit/<path>, #/sources

import { api, onTokenNeeded, setToken } from "./api.js";
import { Chat } from "./chat.js";
import { $, h } from "./dom.js";
import { normalizeWikiPath } from "./markdown.js";
import { LiveWiki } from "./live.js";
import { SourcesView } from "./sources.js";
import { Panel, WikiView } from "./wiki.js";

class App {
  constructor() {
    this.catalog = null;
    this.titles = new Map();
    this.chat = new Chat({ app: this });
    this.panel = new Panel({ app: this });
    this.wiki = new WikiView({ app: this });
    this.sources = new SourcesView({ app: this });
    this.live = new LiveWiki({ app: this });
    this.lastRoute = null;
    this.tokenDialog = $("#token-dialog");
    // Cancel is no submit button: Enter in the field submits the form's default button (its
    // first submit button), which must be "Continue".
    $("#token-cancel").addEventListener("click", () => this.tokenDialog.close("cancel"));
    this.tokenPrompt = null;
    onTokenNeeded((why) => this.askToken(why));
  }

  titleOf(path) { return this.titles.get(path) || path; }

  async loadCatalog() {
    try {
      this.catalog = await api.index();
    } catch (error) {
      this.showBanner(`The wiki could not be loaded: ${error.message}`, "error");
      return;
    }
    this.titles = new Map(this.catalog.topics.flatMap((t) => t.pages.map((p) => [p.path, p.title])));
    this.showMode();
    this.wiki.renderTree();
    this.chat.showStarters(this.catalog);
    if (!this.catalog.articles) {
      this.showBanner("This wiki has no articles yet: add Markdown files under wiki/ or run kaas compile.", "warn");
      this.emptyBanner = true;
    } else if (this.emptyBanner) {
      $("#banner").hidden = true;
      this.emptyBanner = false;
    }
  }

  showMode() {
    const badge = $("#mode-badge");
    badge.hidden = false;
    const offline = this.catalog.mode === "offline";
    badge.className = "badge" + (offline ? " offline" : "");
    // A long and a short form: on a phone the short one shows (app.css), so the badge is never
    // cut to "O…" beside three tabs. The full text is in the title too.
    const full = offline ? "Offline mode" : this.catalog.model || "Model";
    const short = offline ? "Offline" : full.split("/").pop() || full;
    badge.replaceChildren(h("span.badge-full", {}, full), h("span.badge-short", {}, short));
    badge.title = offline
      ? "Offline mode. No language model is configured: pages are chosen by keyword search and answers quote the best sentences."
      : `Answers are written by ${full}.`;
    $("#offline-note").hidden = !offline;
  }

  showBanner(message, kind) {
    const banner = $("#banner");
    banner.hidden = false;
    banner.className = "banner " + (kind || "");
    banner.textContent = message;
  }

  async route() {
    const hash = decodeURI(location.hash.replace(/^#\/?/, ""));
    const [view, ...rest] = hash.split("/");
    const path = rest.length ? normalizeWikiPath(rest.join("/")) : null;
    let ok = true;
    if (view === "wiki") {
      this.switchView("wiki");
      ok = await this.wiki.show(path);
    } else if (view === "sources" && this.sources.info?.can_add) {
      if (!(await this.wiki.leaveEditor())) ok = false;
      else { this.switchView("sources"); this.sources.show(); }
    } else if (view === "edit" && path) {
      this.switchView("wiki");
      await this.wiki.edit(path);
    } else {
      if (!(await this.wiki.leaveEditor())) ok = false;
      else this.switchView("chat");
    }
    if (!ok && this.lastRoute) history.replaceState(null, "", this.lastRoute);
    else this.lastRoute = location.hash || "#/chat";
  }

  switchView(name) {
    this.panel.close();
    for (const view of ["chat", "wiki", "sources"]) {
      $("#view-" + view).hidden = view !== name;
      const link = document.querySelector(`[data-view-link="${view}"]`);
      if (view === name) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
    document.body.dataset.view = name;
    if (name === "chat") this.chat.focus();
  }

  /** Clicks on links to /wiki/<path>: in the chat they open the side panel, in the wiki they navigate. */
  onClick(event) {
    if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    const anchor = event.target.closest("a[href]");
    if (!anchor || anchor.target === "_blank") return;
    const href = anchor.getAttribute("href");
    if (!href.startsWith("/wiki/")) return;
    const path = anchor.dataset.path || normalizeWikiPath(href.split("#")[0]);
    if (!path) return;
    event.preventDefault();
    if (anchor.closest("#view-wiki")) location.hash = "#/wiki/" + path;
    else this.panel.open(path);
  }

  onKey(event) {
    const typing = event.target.closest("input, textarea, [contenteditable]");
    if (event.key === "Escape") {
      if (this.panel.isOpen) { event.preventDefault(); this.panel.close(); return; }
      if (this.chat.controller) { this.chat.stop(); return; }
    }
    if (typing || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "/") {
      event.preventDefault();
      if (document.body.dataset.view === "wiki") $("#wiki-filter").focus();
      else this.chat.focus();
    }
  }

  /** The token dialog; `refused`: the token this browser sent was refused (say so, not "needs
   *  a token"). Requests that get a 401 while it is open share its answer. */
  askToken({ refused = false } = {}) {
    if (this.tokenPrompt) return this.tokenPrompt;
    const dialog = this.tokenDialog;
    const input = $("#token-input");
    input.value = "";
    $("#token-refused").hidden = !refused;
    $("#token-needed").hidden = refused;
    this.tokenPrompt = new Promise((resolve) => {
      dialog.addEventListener("close", () => {
        const token = dialog.returnValue === "ok" ? input.value.trim() : "";
        if (token) setToken(token);
        this.tokenPrompt = null;
        resolve(token || null);
      }, { once: true });
      dialog.returnValue = "";
      dialog.showModal();
      input.focus();
    });
    return this.tokenPrompt;
  }

  async start() {
    document.addEventListener("click", (e) => this.onClick(e));
    document.addEventListener("keydown", (e) => this.onKey(e));
    window.addEventListener("hashchange", () => this.route());
    window.addEventListener("beforeunload", (event) => {
      if (this.wiki.editor?.dirty) { event.preventDefault(); event.returnValue = ""; }
    });
    await this.loadCatalog();
    this.chat.restore();
    await this.sources.load();
    await this.route();
    this.live.start();
    document.body.classList.add("ready");
  }
}

const app = new App();
window.kaas = app; // for debugging in the console; nothing depends on it
app.start();
