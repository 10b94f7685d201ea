"""Builders shared by the tests, imported normally (``from helpers import ...``; tests/ is on
sys.path). One home each: a knowledge base (``build_kb``, also the ``make_kb`` / ``sample_kb``
fixtures of conftest.py), settings for the fake model (``llm_settings``), and the names of the
crash points kill trials use (``FAULT_POINTS``, ``fault_spec``)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kb_ai.config import Settings
from kb_ai.store.articles import render_article
from kb_ai.store.kb import KnowledgeBase

from llm_fakes import API_BASE, MODEL

REAL_LLM_BASE = os.environ.get("KAAS_REAL_LLM_BASE", "http://127.0.0.1:8765/v1")


# -- knowledge bases -------------------------------------------------------------------------------


def write_page(wiki: Path, path: str, title: str | None, summary: str | None, body: str, **extra) -> Path:
    """One article file: frontmatter (title, summary when not None, then ``extra``) and body."""
    meta = {}
    if title is not None:
        meta["title"] = title
    if summary is not None:
        meta["summary"] = summary
    meta.update(extra)
    file = wiki / path
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(render_article(meta, body), encoding="utf-8")
    return file


SAMPLE_PAGES = [
    ("retrieval/page-selection.md", "Page selection", "How the navigator picks pages from the catalog with one model call.",
     "# Page selection\n\nThe navigator sends the catalog to the model and asks for a JSON list of paths. "
     "Invented paths are dropped before any page is read.\n\n## Repair\n\nA near miss is repaired by title or slug."),
    ("retrieval/citations.md", "Citations", "How answers cite pages and how citations are validated.",
     "# Citations\n\nEvery claim in an answer cites a page as a Markdown link. "
     "Only pages that were actually read count as valid citations."),
    ("ops/configuration.md", "Configuration", "Settings, environment variables and kaas.toml.",
     "# Configuration\n\nThe KAAS_MODEL variable selects the language model. "
     "Without a model kaas runs in offline mode."),
    ("ops/deployment.md", "Deployment", "Running the chat server behind a reverse proxy.",
     "# Deployment\n\nThe server binds to the loopback address by default. "
     "A reverse proxy such as nginx terminates TLS in front of it."),
]


def build_kb(root: Path, *pages: tuple, sample: bool = True, toml: str | None = None, raw: dict[str, str] | None = None,
             reindex: bool = True, **sample_meta: Any) -> KnowledgeBase:
    """A knowledge base at ``root``: the four ``SAMPLE_PAGES`` (topic = their folder, plus
    ``sample_meta``) unless ``sample=False``, then each of ``pages`` as ``(path, title, summary,
    body)`` or ``(path, title, summary, body, {frontmatter})`` exactly as given, ``kaas.toml``
    when ``toml`` is given, sources ``raw`` ({path under raw/: text}); indexed unless ``reindex=False``."""
    wiki = Path(root) / "wiki"
    if sample:
        for path, title, summary, body in SAMPLE_PAGES:
            write_page(wiki, path, title, summary, body, topic=path.split("/")[0], **sample_meta)
    for page in pages:
        path, title, summary, body, *meta = page
        write_page(wiki, path, title, summary, body, **(meta[0] if meta else {}))
    if toml is not None:
        Path(root).mkdir(parents=True, exist_ok=True)
        (Path(root) / "kaas.toml").write_text(toml, encoding="utf-8")
    write_files(Path(root) / "raw", raw or {})
    kb = KnowledgeBase(Path(root))
    if reindex:
        kb.reindex()
    return kb


def write_files(folder: Path, files: dict[str, str]) -> None:
    """Write ``{relative path: text}`` under ``folder`` (parents made)."""
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text, encoding="utf-8")


# -- settings for the fake model ------------------------------------------------------------------


def llm_settings(kb: Path | KnowledgeBase, **overrides: Any) -> Settings:
    """Settings that send every model call to the fakes of llm_fakes.py (``FakeOpenAI``): no
    retries, no reply cache (the fake sees every request), 5 s timeouts (a stuck fake fails fast);
    ``overrides`` replace or add fields (e.g. ``cache=True`` to run with the cache kaas uses by default)."""
    root = kb.root if isinstance(kb, KnowledgeBase) else Path(kb)
    values: dict[str, Any] = dict(kb=root, model=MODEL, api_base=API_BASE, api_key="sk-test", max_retries=0,
                                  cache=False, timeout=5.0)
    values.update(overrides)
    return Settings(**values)


# -- crash points ----------------------------------------------------------------------------------

# Every fault point the kill trials use (kb_ai/faults.py). test_faults.py fails when one of them is
# no longer called in py/src (a rename would otherwise silently turn a trial into a clean run).
FAULT_POINTS = frozenset({
    "compile.ingest.after_scan",    # raw/ is scanned, no file read yet
    "compile.plan.after_record",    # a source's plan is journaled
    "compile.write.before_file",    # an article's record is journaled, its file not replaced yet
    "compile.write.after_file",     # the file is replaced, its source not marked compiled yet
    "compile.journal.before_line",  # a journal line is about to be written
    "store.reindex.before",         # the catalog is about to be rebuilt
})


def fault_spec(point: str, nth: int = 1, action: str = "kill") -> str:
    """The ``KAAS_FAULT`` value that does ``action`` the ``nth`` time ``point`` is passed."""
    assert point in FAULT_POINTS, f"{point!r} is not in helpers.FAULT_POINTS"
    return f"{point}@{nth}:{action}"


# -- kaas mcp over stdio ----------------------------------------------------------------------------

KAAS = str(Path(sys.executable).with_name("kaas"))


class McpStdio:
    """A raw JSON-RPC conversation with a ``kaas mcp`` child process: byte lines in, JSON lines out,
    initialized. Only PATH (and PYTHONPATH) reach the child, so no KAAS_* setting of the caller does."""

    def __init__(self, kb_root: Path):
        self._pending = b""
        env = {"PATH": "/usr/bin:/bin", **({"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {})}
        self.process = subprocess.Popen([KAAS, "--kb", str(kb_root), "mcp"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}})
        assert self.receive()["id"] == 0
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict | str | bytes) -> None:
        line = message if isinstance(message, (str, bytes)) else json.dumps(message)
        self.process.stdin.write((line if isinstance(line, bytes) else line.encode("utf-8")) + b"\n")
        self.process.stdin.flush()

    def receive(self, timeout: float = 60) -> dict | None:
        """The next JSON line, or None after ``timeout`` seconds without one. Reads the pipe's file
        descriptor itself: two answers written at once (a batch) arrive in one read, and a
        buffered ``readline`` would keep the second where ``select`` cannot see it."""
        deadline = time.monotonic() + timeout
        fd = self.process.stdout.fileno()
        while b"\n" not in self._pending:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                return None
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)

    @staticmethod
    def call(request_id: int, tool: str, arguments_json: str) -> str:
        return ('{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": "%s", "arguments": %s}}'
                % (request_id, tool, arguments_json))

    def close(self) -> str:
        """Close stdin, wait for the child to end, and return what it wrote on stderr."""
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        return self.process.stderr.read().decode()


def page_refs(citations: list[dict]) -> list[dict]:
    """Citations as page references (``path``, ``title``), without where in the page they point."""
    return [{"path": c["path"], "title": c["title"]} for c in citations]


def assert_weak_match(out: dict) -> None:
    """An offline ``ask --json`` result that is answered, with its match shown as weak (issue 26:
    a question some page shares an informative word with is answered with the closest passages,
    labelled, never "not covered"): ``match`` is "weak" and the notice says so."""
    from kb_ai.navigate.offline_navigator import WEAK_MATCH
    assert out["abstained"] is False and out["match"] == "weak", out["answer"]
    assert WEAK_MATCH in out["notices"], out["notices"]


# A kaas.toml with an admin (boss) and a reader (rita, group staff): the tests of the Sources tab,
# of what a reader learns of compiles and of includes.
ADMIN = "admin-token-0123456789abcdef"
READER = "reader-token-0123456789abcdef"
USERS = f"""
[users.boss]
token = "{ADMIN}"
admin = true

[users.rita]
token = "{READER}"
groups = ["staff"]
"""
