"""A fault (disk full) on an error path releases what it took: the wiki lock, file descriptors,
temp folders, half-written log lines. After the fault, saves, answers, compiles and the watcher
work again without a restart, and the wiki is consistent.

ENOSPC is injected at the system calls, as in ``test_disk_faults.py``: ``os.pwrite`` and
``os.ftruncate`` on ``.kaas/compile.lock`` (recording the lock's holder), ``os.fchmod`` on a temp
file, ``os.replace`` under ``.kaas/``; and a real kernel limit (``RLIMIT_FSIZE``) for a log append.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from kb_ai.cli import cli
from kb_ai.config import Settings
from kb_ai.server import create_app
from kb_ai.server.watch import WikiWatcher
from kb_ai.files import TEMP_PREFIX, atomic_write_text

from compile_checks import temp_files
from helpers import write_page
from compile_checks import assert_consistent
from disk_fault import DiskFault

NO_SPACE = os.strerror(errno.ENOSPC)
EDITED = ("---\ntitle: Deployment\nsummary: Running the server behind a proxy, edited.\ntopic: ops\n---\n"
          "# Deployment\n\nEdited: use Caddy or nginx in front of it.\n")
ANSWER = {"question": "How are citations checked?", "answer": "Checked [Citations](retrieval/citations.md).",
          "citations": ["retrieval/citations.md"], "mode": "offline"}


class LockFileFull:
    """Disk full when the compile lock records its holder: ``os.pwrite`` (and, with
    ``truncate=True``, ``os.ftruncate``) fail with ENOSPC on ``.kaas/compile.lock``."""

    def __init__(self, monkeypatch, *, truncate: bool = False):
        self.monkeypatch, self.truncate, self.hits = monkeypatch, truncate, 0
        self.real_pwrite, self.real_ftruncate = os.pwrite, os.ftruncate

    def _is_lock(self, fd: int) -> bool:
        try:
            return os.readlink(f"/proc/self/fd/{fd}").endswith("/.kaas/compile.lock")
        except OSError:
            return False

    def _pwrite(self, fd, data, offset):
        if self._is_lock(fd):
            self.hits += 1
            raise OSError(errno.ENOSPC, NO_SPACE)
        return self.real_pwrite(fd, data, offset)

    def _ftruncate(self, fd, length):
        if self.truncate and self._is_lock(fd):
            self.hits += 1
            raise OSError(errno.ENOSPC, NO_SPACE)
        return self.real_ftruncate(fd, length)

    def __enter__(self):
        self.monkeypatch.setattr(os, "pwrite", self._pwrite)
        self.monkeypatch.setattr(os, "ftruncate", self._ftruncate)
        return self

    def __exit__(self, *exc):
        self.monkeypatch.setattr(os, "pwrite", self.real_pwrite)
        self.monkeypatch.setattr(os, "ftruncate", self.real_ftruncate)


@pytest.fixture
def client(sample_kb):
    with TestClient(create_app(Settings(kb=sample_kb.root), mcp=False), raise_server_exceptions=False) as test_client:
        yield test_client


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("truncate", [False, True], ids=["pwrite", "ftruncate"])
def test_a_full_disk_while_taking_the_lock_does_not_leak_it(client, sample_kb, monkeypatch, truncate):
    version = client.get("/api/pages/ops/deployment.md").json()["version"]
    fds = open_fds()
    with LockFileFull(monkeypatch, truncate=truncate) as fault:
        saved = client.put("/api/pages/ops/deployment.md", json={"markdown": EDITED, "version": version})
        answered = client.post("/api/answers", json=ANSWER)
    assert fault.hits >= 2
    for response in (saved, answered):
        assert response.status_code == 507, response.text
        error = response.json()["error"]
        assert error["code"] == "storage_error" and NO_SPACE in error["message"] and "compile.lock" in error["message"]
    assert "Deployment\n\nThe server binds" in (sample_kb.wiki_dir / "ops/deployment.md").read_text()  # unchanged
    assert open_fds() <= fds  # the lock file's descriptor was closed
    # Space is back: everything that takes the lock works, without a restart.
    assert client.put("/api/pages/ops/deployment.md", json={"markdown": EDITED, "version": version}).status_code == 200
    assert client.post("/api/answers", json=ANSWER).status_code == 201
    (sample_kb.root / "raw").mkdir()
    (sample_kb.root / "raw" / "alpha.md").write_text("# Alpha\n\nAlpha is the first project and ships in May.\n")
    compiled = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "compile", "--offline"])
    assert compiled.exit_code == 0, compiled.output
    assert_consistent(sample_kb.root)


def test_compile_on_a_full_disk_at_the_lock_is_one_line_and_the_next_runs(sample_kb, monkeypatch):
    (sample_kb.root / "raw").mkdir()
    (sample_kb.root / "raw" / "alpha.md").write_text("# Alpha\n\nAlpha is the first project and ships in May.\n")
    with LockFileFull(monkeypatch):
        failed = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "compile", "--offline"])
        again = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "compile", "--offline"])
    for result in (failed, again):  # the second is refused for the disk, not as "locked"
        assert result.exit_code != 0 and "Traceback" not in result.output
        errors = [line for line in result.stderr.splitlines() if line.startswith("kaas: error:")]
        assert len(errors) == 1 and NO_SPACE in errors[0] and "locked" not in errors[0], result.stderr
    ok = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "compile", "--offline"])
    assert ok.exit_code == 0, ok.output
    assert "Alpha" in sample_kb.master_index.read_text()


def test_the_watcher_keeps_reindexing_after_a_lock_fault(sample_kb, monkeypatch):
    app = create_app(Settings(kb=sample_kb.root), mcp=False)
    watcher = WikiWatcher(sample_kb, 60, lambda: app.state.kaas.save_lock)

    async def scenario() -> list[bool]:
        seen = [await watcher.check()]
        write_page(sample_kb.wiki_dir, "ops/new.md", "Written in an editor", "By hand.", "# Written\n\ntext")
        with LockFileFull(monkeypatch):
            seen.append(await watcher.check())  # cannot take the lock now: tries again next poll
        seen.append(await watcher.check())
        return seen

    assert asyncio.run(scenario()) == [False, False, True]
    assert "Written in an editor" in sample_kb.master_index.read_text()


def test_an_atomic_write_closes_its_temp_file_when_permissions_cannot_be_set(tmp_path, monkeypatch):
    def refuse(fd, mode):
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    fds = open_fds()
    monkeypatch.setattr(os, "fchmod", refuse)
    for _ in range(3):
        with pytest.raises(PermissionError) as info:
            atomic_write_text(tmp_path / "page.md", "text")
        assert info.value.filename == str(tmp_path / "page.md")
    monkeypatch.undo()
    assert open_fds() <= fds
    assert not list(tmp_path.glob(f"{TEMP_PREFIX}*")) and not (tmp_path / "page.md").exists()


def test_a_failed_log_append_leaves_no_torn_line(sample_kb):
    """A real short write: RLIMIT_FSIZE lets the kernel write part of the line, then refuses."""
    log = sample_kb.wiki_dir / "log.md"
    before = log.read_text()
    code = f"""
        import errno, resource, signal
        from pathlib import Path
        from kb_ai.store.catalog import append_log
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        wiki = Path({str(sample_kb.wiki_dir)!r})
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, ((wiki / "log.md").stat().st_size + 12, hard))
        try:
            append_log(wiki, "index", "a line that does not fit in the space that is left")
        except OSError as exc:
            print("refused", errno.errorcode[exc.errno])
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        append_log(wiki, "index", "the next line, with space again")
    """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "refused EFBIG"
    after = log.read_text()
    assert after.startswith(before)
    added = after[len(before):].splitlines()
    assert len(added) == 1
    assert re.fullmatch(r"- \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ index: the next line, with space again", added[0]), added


def test_a_lexical_index_save_that_fails_leaves_no_temp_folder(sample_kb, monkeypatch):
    with DiskFault(monkeypatch, sample_kb.root, errno.ENOSPC, which="/.kaas/"):
        result = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "ask", "--json", "How are citations validated?"])
    assert result.exit_code == 0, result.output  # answered; the index is rebuilt next time
    assert temp_files(sample_kb.root) == []
    again = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "ask", "--json", "How are citations validated?"])
    assert again.exit_code == 0 and temp_files(sample_kb.root) == []
