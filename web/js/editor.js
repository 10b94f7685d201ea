// The editor of an article's Markdown: the text and its preview (the server's renderer, the same
// as the page view's: POST /api/render), side by side on a wide screen, as Write / Preview tabs
// on a narrow one; a state that says whether there are unsaved changes, and "Saved" when the
// save went through. Leaving with unsaved changes asks first (wiki.js: leaveEditor; the browser's
// own warning on closing the tab, main.js).

import { api } from "./api.js";
import { h, setSanitizedHtml } from "./dom.js";
import { toast } from "./notify.js";

const PREVIEW_DELAY = 350; // ms after the last keystroke

export class Editor {
  constructor(view, page) {
    this.view = view;
    this.page = page;
    this.saving = false;
    this.previewTimer = 0;
    this.previewed = null; // the text the preview shows
    this.previewSeq = 0;
    this.text = h("textarea.editor-text", {
      spellcheck: "true", "aria-label": `Markdown of ${page.title}`, autocapitalize: "off",
    });
    this.text.value = page.markdown;
    this.preview = h("div.editor-preview.prose", { "aria-label": "Preview", "aria-live": "off" });
    this.panes = h("div.editor-panes", { dataset: { pane: "write" } }, this.text, this.preview);
    this.tabs = ["write", "preview"].map((pane) => h("button", {
      type: "button", role: "tab", "aria-selected": String(pane === "write"), dataset: { pane },
      onclick: () => this.show(pane),
    }, pane === "write" ? "Write" : "Preview"));
    this.state = h("span.editor-state", { role: "status" });
    this.status = h("p.editor-status", { role: "status" });
    this.saveButton = h("button.primary", { type: "submit" }, "Save");
    this.node = h("form.editor", { onsubmit: (e) => { e.preventDefault(); this.save(); } },
      h("header.article-head", {},
        h("div", {}, h("p.crumbs", {}, h("a", { href: "#/wiki" }, "Wiki"), " / ", page.topic, " / editing"),
          h("h1", {}, page.title), h("p.muted.small", {}, h("code", {}, "wiki/" + page.path))),
        h("div.actions", {}, this.state,
          h("a.button.ghost", { href: "#/wiki/" + page.path }, "Cancel"),
          this.saveButton)),
      h("div.editor-bar", {},
        h("div.editor-tabs", { role: "tablist", "aria-label": "Edit or preview" }, this.tabs),
        h("p.hint", {}, "The frontmatter between the --- lines needs a ", h("code", {}, "title"),
          "; the catalog is rebuilt when you save. ", h("kbd", {}, "Ctrl"), "+", h("kbd", {}, "S"), " saves.")),
      this.panes,
      this.status,
    );
    this.text.addEventListener("keydown", (event) => {
      if ((event.ctrlKey || event.metaKey) && event.key.toLowerCase() === "s") { event.preventDefault(); this.save(); }
    });
    this.text.addEventListener("input", () => { this.showState(); this.schedulePreview(); });
    setSanitizedHtml(this.preview, page.html || ""); // the page as saved, until the text changes
    this.previewed = page.markdown;
    this.showState();
  }

  get dirty() { return this.text.value !== this.page.markdown; }

  focus(toStart = true) {
    this.show("write");
    this.text.focus();
    if (toStart) { this.text.setSelectionRange(0, 0); this.text.scrollTop = 0; }
  }

  /** Write or Preview (narrow screens; a wide one shows both). */
  show(pane) {
    this.panes.dataset.pane = pane;
    for (const tab of this.tabs) tab.setAttribute("aria-selected", String(tab.dataset.pane === pane));
    if (pane === "preview") this.renderPreview();
  }

  showState(saved = false) {
    const dirty = this.dirty;
    this.state.className = "editor-state" + (dirty ? " dirty" : saved ? " saved" : "");
    this.state.textContent = dirty ? "Unsaved changes" : saved ? "Saved" : "No changes";
  }

  schedulePreview() {
    clearTimeout(this.previewTimer);
    this.previewTimer = setTimeout(() => {
      if (getComputedStyle(this.preview).display !== "none") this.renderPreview();
    }, PREVIEW_DELAY);
  }

  async renderPreview() {
    clearTimeout(this.previewTimer);
    const markdown = this.text.value;
    if (markdown === this.previewed) return;
    const seq = ++this.previewSeq;
    try {
      const rendered = await api.render(this.page.path, markdown);
      if (seq !== this.previewSeq) return;
      setSanitizedHtml(this.preview, rendered.html);
      this.previewed = markdown;
    } catch (error) {
      if (seq !== this.previewSeq) return;
      this.preview.replaceChildren(h("p.error", { role: "alert" }, "No preview: " + (error.message || error)));
      this.previewed = null;
    }
  }

  async save() {
    if (this.saving) return;
    this.saving = true;
    this.saveButton.disabled = true;
    this.status.className = "editor-status";
    this.status.textContent = "Saving…";
    this.state.textContent = "Saving…";
    try {
      const saved = await api.save(this.page.path, this.text.value, this.page.version);
      this.page = saved;
      this.text.value = saved.markdown;
      this.status.textContent = "Saved. The catalog is up to date.";
      this.status.classList.add("ok");
      this.showState(true);
      toast(`Saved wiki/${saved.path}. The catalog is up to date.`, { timeout: 5000 });
      await this.view.app.loadCatalog();
      if (this.view.editor === this) this.view.editor = null;
      location.hash = "#/wiki/" + saved.path;
    } catch (error) {
      this.status.classList.add("error");
      this.status.textContent = `Not saved: ${error.message}`;
      this.showState();
    } finally {
      this.saving = false;
      this.saveButton.disabled = false;
    }
  }
}
