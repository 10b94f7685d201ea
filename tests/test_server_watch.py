"""The server's wiki watcher runs on file events (watchfiles), not on a poll of every article:
an idle server scans nothing, and an edit, a new page or a topic folder moved away is re-indexed."""

from __future__ import annotations

import shutil
import time

import httpx

from kb_ai.config import Settings
from kb_ai.server import watch
from kb_ai.server.app import create_app

from helpers import write_page
from server_fakes import ServerThread


def _wait(predicate, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    return predicate()


def _titles(client: httpx.Client) -> set[str]:
    return {p["title"] for t in client.get("/api/index").json()["topics"] for p in t["pages"]}


def test_the_watcher_reindexes_on_events_and_scans_nothing_while_idle(sample_kb, tmp_path, monkeypatch):
    scans = []
    real = watch.wiki_fingerprint
    monkeypatch.setattr(watch, "wiki_fingerprint", lambda wiki_dir: scans.append(time.monotonic()) or real(wiki_dir))
    app = create_app(Settings(kb=sample_kb.root), mcp=False, watch_interval=0.1)
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        watcher = app.state.kaas.watcher
        assert _wait(lambda: len(scans) >= 1), "the watcher never looked at the wiki"
        time.sleep(1.0)  # ten of the old poll intervals
        idle = len(scans)
        time.sleep(1.0)
        assert len(scans) == idle, "an idle wiki was scanned again"

        write_page(sample_kb.wiki_dir, "ops/backups.md", "Backups", "How the wiki is backed up.", "# Backups\n\ntext")
        assert _wait(lambda: watcher.reindexed >= 1), "a new article was not re-indexed"
        assert "Backups" in _titles(client)

        shutil.move(str(sample_kb.wiki_dir / "ops"), str(tmp_path / "ops-elsewhere"))  # a whole topic goes
        assert _wait(lambda: watcher.reindexed >= 2), "a topic folder moved away was not re-indexed"
        assert not {"Backups", "Configuration", "Deployment"} & _titles(client)


def test_a_save_through_the_api_is_not_reindexed_twice(sample_kb):
    app = create_app(Settings(kb=sample_kb.root), mcp=False, watch_interval=0.1)
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        watcher = app.state.kaas.watcher
        page = client.get("/api/pages/ops/deployment.md").json()
        text = page["markdown"].replace("terminates TLS", "terminates TLS and HTTP/2")
        saved = client.put("/api/pages/ops/deployment.md", json={"markdown": text, "version": page["version"]})
        assert saved.status_code == 200, saved.text
        time.sleep(1.0)  # the save's file events have long been delivered
        assert watcher.reindexed == 0
