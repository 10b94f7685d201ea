// The wiki, kept current: GET /api/events streams the article paths of each batch of changes on
// disk (a hand edit, a git pull, a compile), only those this reader may read. On each batch the
// catalog is fetched again (tree, starters, home page) and an open article that changed is
// reloaded, unless it is being edited. The stream reconnects after a pause when it drops.

import { NO_PROMPT, streamEvents } from "./api.js";

const RETRY_MS = [1000, 2000, 5000, 10000, 30000];

export class LiveWiki {
  constructor({ app }) {
    this.app = app;
    this.failures = 0;
    this.changes = 0; // batches received (for tests and the console)
  }

  start() {
    this.connect();
  }

  async connect() {
    try {
      await streamEvents("GET", "/api/events", undefined, (name, data) => {
        if (name === "ready") this.failures = 0;
        else if (name === "wiki") this.onChange(data);
      }, undefined, NO_PROMPT); // in the background: the token dialog is for what the person asked for
    } catch { /* dropped or refused: try again later */ }
    const wait = RETRY_MS[Math.min(this.failures, RETRY_MS.length - 1)];
    this.failures += 1;
    setTimeout(() => this.connect(), wait);
  }

  async onChange(data) {
    this.changes += 1;
    const pages = new Set(data.pages || []);
    await this.app.loadCatalog();
    const wiki = this.app.wiki;
    if (document.body.dataset.view !== "wiki" || wiki.editor) return;
    if (!wiki.current) wiki.showHome();
    else if (data.resync || pages.has(wiki.current)) await wiki.show(wiki.current);
    document.body.dataset.wikiChanges = String(this.changes);
  }
}
