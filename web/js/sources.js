// The Sources view: add files (uploaded one by one as the request body) and web pages (URLs) to
// raw/, and run a compile whose stages and counts stream in as Server-Sent Events. Shown only to
// readers the server lets add sources (GET /api/sources: can_add; admins once tokens are set).
// One compile runs at a time: a tab that finds one running (started in another tab or by another
// admin) follows it (GET /api/compile) instead of starting a second one, and says so when its
// Compile click was the one refused.

import { api, streamEvents } from "./api.js";
import { $, clear, h } from "./dom.js";

const STAGES = { ingest: "Reading sources", dedup: "Finding duplicates", plan: "Planning articles", write: "Writing articles" };

export class SourcesView {
  constructor({ app }) {
    this.app = app;
    this.info = null;
    this.results = $("#source-results");
    this.progress = $("#compile-progress");
    this.compileButton = $("#compile-start");
    this.controller = null;
    $("#source-files").addEventListener("change", (event) => this.uploadFiles(event.target));
    $("#add-urls").addEventListener("click", () => this.addUrls());
    this.compileButton.addEventListener("click", () => this.compile());
  }

  /** Ask the server whether this reader may add sources; show the tab when so. */
  async load() {
    try {
      this.info = await api.sourcesInfo();
    } catch {
      this.info = { can_add: false };
    }
    document.querySelector('[data-view-link="sources"]').hidden = !this.info.can_add;
    if (this.info.can_add && this.info.compiling) this.follow();
    return this.info.can_add;
  }

  /** The view is shown: follow a compile that started since the page loaded, if any. */
  async show() {
    if (this.controller) return;
    try {
      this.info = await api.sourcesInfo();
    } catch {
      return;
    }
    if (this.info.compiling) this.follow();
  }

  result(kind, text, detail) {
    const item = h("li." + kind, {}, h("span.result-text", {}, text), detail ? h("span.muted", {}, " " + detail) : null);
    this.results.prepend(item);
    return item;
  }

  async uploadFiles(input) {
    const files = [...input.files];
    input.value = "";
    for (const file of files) {
      if (this.info?.max_upload_bytes && file.size > this.info.max_upload_bytes) {
        this.result("error", `${file.name}: larger than ${Math.round(this.info.max_upload_bytes / 1e6)} MB`);
        continue;
      }
      const line = this.result("pending", `${file.name}: uploading…`);
      try {
        const added = await api.upload(file);
        line.replaceWith(this.describe(added));
      } catch (error) {
        line.remove();
        this.result("error", `${file.name}: ${error.message}`);
      }
    }
  }

  describe(added) {
    const what = { added: "added", updated: "updated", unchanged: "already there, unchanged" }[added.status] || added.status;
    const item = h("li.ok", {}, h("code", {}, added.path), ` ${what}`,
      added.title ? h("span.muted", {}, ` · ${added.title}`) : null,
      added.note ? h("span.muted", {}, ` (${added.note})`) : null);
    return item;
  }

  async addUrls() {
    const box = $("#source-urls");
    const urls = box.value.split(/\s+/).map((u) => u.trim()).filter(Boolean);
    if (!urls.length) { box.focus(); return; }
    const max = this.info?.max_urls || 10;
    if (urls.length > max) { this.result("error", `At most ${max} URLs at a time.`); return; }
    const button = $("#add-urls");
    button.disabled = true;
    const line = this.result("pending", `Fetching ${urls.length} page${urls.length === 1 ? "" : "s"}…`);
    try {
      const { results } = await api.addUrls(urls);
      line.remove();
      const failed = [];
      for (const r of results) {
        if (r.error) { this.result("error", `${r.url}: ${r.error.message}`); failed.push(r.url); }
        else this.results.prepend(this.describe(r));
      }
      box.value = failed.join("\n"); // keep what did not work, to fix and retry
    } catch (error) {
      line.remove();
      this.result("error", error.message);
    } finally {
      button.disabled = false;
    }
  }

  async compile() {
    if (this.controller) return;
    clear(this.progress);
    await this.watch("POST");
  }

  /** Follow the compile that runs on the server (nothing happens when none runs). */
  async follow() {
    if (!this.controller) await this.watch("GET");
  }

  /** Start a compile (POST) or follow the running one (GET), showing its stages as they come. */
  async watch(method) {
    this.controller = new AbortController();
    this.compileButton.disabled = true;
    this.compileButton.textContent = "Compiling…";
    const stages = new Map();
    const bar = (data) => {
      let row = stages.get(data.stage);
      if (!row) {
        row = { label: h("span.stage-label", {}, STAGES[data.stage] || data.stage), meter: h("progress", { max: 1, value: 0 }), count: h("span.stage-count") };
        row.node = h("div.stage", { dataset: { stage: data.stage } }, row.label, row.meter, row.count);
        stages.set(data.stage, row);
        this.progress.append(row.node);
      }
      row.meter.max = Math.max(data.total, 1);
      row.meter.value = data.done ? row.meter.max : data.count;
      // Model calls the model is working on now (a slow model may hold a stage at one count).
      const flying = !data.done && data.in_flight ? ` · ${data.in_flight} call${data.in_flight === 1 ? "" : "s"} in flight` : "";
      row.count.textContent = `${data.count}/${data.total}` + (data.done ? " ✓" : flying);
      row.node.classList.toggle("done", Boolean(data.done));
    };
    let reported = false;
    let ran = false; // a compile was shown (not just "none is running")
    let refused = false;
    try {
      await streamEvents(method, "/api/compile", undefined, (name, data) => {
        if (name === "idle") return;
        if (!ran && method === "GET" && !this.progress.querySelector(".compile-busy")) clear(this.progress);
        ran = true;
        if (name === "stage") bar(data);
        else if (name === "report") { reported = true; this.showReport(data); }
        else if (name === "error") this.progress.append(h("p.error", { role: "alert" }, "Compile failed: " + data.message));
        else if (name === "done" && reported) this.progress.append(h("p.compile-done", {}, "Done."));
      }, this.controller.signal);
    } catch (error) {
      if (error.code === "compile_running") {
        // Another tab or admin started one a moment ago: no second compile; follow that one.
        refused = true;
        this.progress.append(h("p.compile-busy", { role: "status" },
          "A compile is already running (started in another tab or by another admin), so no second compile was started. Its progress is shown below."));
      } else {
        this.progress.append(h("p.error", { role: "alert" }, error.message));
      }
    } finally {
      this.controller = null;
      this.compileButton.disabled = false;
      this.compileButton.textContent = "Compile";
      if (ran || method === "POST") this.app.loadCatalog();
    }
    if (refused) await this.follow();
  }

  showReport(report) {
    const s = report.sources || {};
    const n = (count, word) => `${count} ${word}${count === 1 ? "" : "s"}`;
    const lines = [
      `${n(s.total || 0, "source")} in raw/: ${s.new || 0} new, ${s.changed || 0} changed, ${s.deleted || 0} deleted, ${s.skipped || 0} skipped`
        + (s.left_out ? `, ${s.left_out} left out (not documents)` : ""),
      `${n(report.created, "article")} created, ${report.updated} updated` + (report.mode === "llm" ? `, ${n(report.usage.llm_calls, "model call")}` : " (offline)"),
    ];
    this.progress.append(h("div.compile-report", {},
      lines.map((line) => h("p", {}, line)),
      (report.failed || []).map((f) => h("p.error", {}, "Failed: " + f)),
      (report.skipped || []).map((f) => h("p.muted", {}, "Skipped: " + f)),
      (report.notes || []).map((n) => h("p.notice", {}, n))));
  }
}
