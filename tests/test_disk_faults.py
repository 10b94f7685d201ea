"""Disk full (ENOSPC) and permission denied (EACCES) while kaas writes: `kaas compile`,
`kaas index`, saving an answer (CLI and HTTP), and the HTTP page edit.

Expected every time: a clear one-line error (CLI: non-zero exit; HTTP: a JSON error naming the
problem), no temp file left in wiki/, the previous article text intact, and once the fault is
gone the next run completes and the wiki is consistent (every catalog line resolves to an
article that parses).

Faults are injected at the system calls every atomic write goes through (``os.replace`` for the
rename, ``os.fsync`` for the data reaching the disk), only for files under the test's KB, so a
fault can hit the first write of a run or only a later one (just the catalog). Real read-only
folders (chmod) are used too where that means something: not as root.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from kb_ai.cli import cli
from kb_ai.config import Settings
from kb_ai.store.articles import parse_article
from kb_ai.files import TEMP_PREFIX
from kb_ai.store.kb import KnowledgeBase

from compile_checks import assert_consistent, temp_files
from disk_fault import DiskFault
from helpers import write_page

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
ROOT_SKIP = "running as root: chmod cannot make a folder read-only for root (EACCES is covered by injection)"
MESSAGES = {errno.ENOSPC: "No space left on device", errno.EACCES: "Permission denied"}


def run_cli(*args: str):
    return CliRunner().invoke(cli, list(args))


def assert_one_line_error(result, *fragments: str) -> None:
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, OSError), repr(result.exception)
    errors = [line for line in result.stderr.splitlines() if line.startswith("kaas: error:")]
    assert len(errors) == 1, result.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


def snapshot(wiki: Path) -> dict[str, str]:
    return {p.relative_to(wiki).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(wiki.rglob("*")) if p.is_file() and p.name != "log.md"}


# -- kaas compile (offline) -----------------------------------------------------------------------


@pytest.fixture
def compiled_kb(tmp_path):
    root = tmp_path / "kb"
    (root / "raw" / "eng").mkdir(parents=True)
    (root / "raw" / "eng" / "alpha.md").write_text("# Alpha\n\nAlpha is the first project of the team and ships in May.\n")
    (root / "raw" / "eng" / "beta.md").write_text("# Beta\n\nBeta is the second project and it ships in July.\n")
    first = run_cli("--kb", str(root), "compile", "--offline")
    assert first.exit_code == 0, first.output
    # The next compile has work to do: one changed source, one new one.
    (root / "raw" / "eng" / "alpha.md").write_text("# Alpha\n\nAlpha is the first project of the team and ships in June now.\n")
    (root / "raw" / "eng" / "gamma.md").write_text("# Gamma\n\nGamma is the third project, a research prototype.\n")
    return root


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EACCES])
@pytest.mark.parametrize("scope, at", [
    (None, "replace"),                   # every write of the run fails (the state in .kaas/ first)
    ("/wiki/", "replace"),               # the state is written, the articles are not
    ("/wiki/", "fsync"),                 # the data never reaches the disk
    ("/wiki/master-index.md", "replace"),  # articles written, the catalog is not
])
def test_compile_fault_is_one_line_and_the_next_compile_recovers(compiled_kb, monkeypatch, err, scope, at):
    root, wiki = compiled_kb, compiled_kb / "wiki"
    before = snapshot(wiki)
    with DiskFault(monkeypatch, root, err, which=scope, at=at) as fault:
        result = run_cli("--kb", str(root), "compile", "--offline")
    assert fault.hits, "the fault was never hit: the test tests nothing"
    assert_one_line_error(result, MESSAGES[err])
    assert not temp_files(root)
    after = snapshot(wiki)
    for path, text in before.items():  # every file is its old text or a complete new one
        if path.endswith(".md") and path != "master-index.md" and after.get(path) != text:
            assert parse_article(after[path], path).title
    if scope != "/wiki/master-index.md":
        assert after["eng/alpha.md"] == before["eng/alpha.md"]  # the previous text, intact
    assert after["master-index.md"] == before["master-index.md"]

    again = run_cli("--kb", str(root), "compile", "--offline")
    assert again.exit_code == 0, again.output
    assert_consistent(wiki.parent)
    assert "ships in June now" in (wiki / "eng" / "alpha.md").read_text()  # the change did land
    assert (wiki / "eng" / "gamma.md").is_file()
    assert "eng/gamma.md" in (wiki / "master-index.md").read_text()


@pytest.mark.skipif(IS_ROOT, reason=ROOT_SKIP)
def test_compile_into_a_read_only_topic_folder(compiled_kb):
    root, wiki = compiled_kb, compiled_kb / "wiki"
    before = (wiki / "eng" / "alpha.md").read_text()
    os.chmod(wiki / "eng", 0o555)
    try:
        result = run_cli("--kb", str(root), "compile", "--offline")
    finally:
        os.chmod(wiki / "eng", 0o755)
    assert result.exit_code != 0 or "Permission denied" in result.output
    assert "Traceback" not in result.output
    assert (wiki / "eng" / "alpha.md").read_text() == before
    assert not temp_files(root)
    assert run_cli("--kb", str(root), "compile", "--offline").exit_code == 0
    assert_consistent(wiki.parent)


# -- kaas index -----------------------------------------------------------------------------------


@pytest.mark.parametrize("err, at", [(errno.ENOSPC, "replace"), (errno.ENOSPC, "fsync"), (errno.EACCES, "replace")])
def test_index_fault_keeps_the_old_catalog_and_the_next_index_recovers(sample_kb, monkeypatch, err, at):
    wiki = sample_kb.wiki_dir
    write_page(wiki, "ops/backups.md", "Backups", "How to back up a knowledge base.", "# Backups\n\nCopy the folder.")
    before = (wiki / "master-index.md").read_text()
    with DiskFault(monkeypatch, sample_kb.root, err, which="/wiki/", at=at) as fault:
        result = run_cli("--kb", str(sample_kb.root), "index")
    assert fault.hits
    assert_one_line_error(result, MESSAGES[err], "master-index.md")
    assert (wiki / "master-index.md").read_text() == before
    assert not temp_files(sample_kb.root)

    again = run_cli("--kb", str(sample_kb.root), "index")
    assert again.exit_code == 0, again.output
    assert_consistent(wiki.parent)
    assert "ops/backups.md" in (wiki / "master-index.md").read_text()


@pytest.mark.skipif(IS_ROOT, reason=ROOT_SKIP)
def test_index_in_a_read_only_wiki(sample_kb):
    wiki = sample_kb.wiki_dir
    write_page(wiki, "ops/backups.md", "Backups", "How to back up.", "# Backups\n\nCopy it.")
    before = (wiki / "master-index.md").read_text()
    os.chmod(wiki, 0o555)
    try:
        result = run_cli("--kb", str(sample_kb.root), "index")
    finally:
        os.chmod(wiki, 0o755)
    assert_one_line_error(result, "Permission denied")
    assert (wiki / "master-index.md").read_text() == before
    assert run_cli("--kb", str(sample_kb.root), "index").exit_code == 0
    assert_consistent(wiki.parent)


# -- saving an answer -----------------------------------------------------------------------------

QUESTION = "How are citations validated?"
ANSWER_PATH = "answers/how-are-citations-validated.md"


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EACCES])
@pytest.mark.parametrize("scope", ["/wiki/answers/", "/wiki/master-index.md"])
def test_cli_save_fault_is_an_error_and_leaves_no_half_saved_answer(sample_kb, monkeypatch, err, scope):
    wiki = sample_kb.wiki_dir
    before = snapshot(wiki)
    with DiskFault(monkeypatch, sample_kb.root, err, which=scope) as fault:
        result = run_cli("--kb", str(sample_kb.root), "ask", QUESTION, "--save", "--json")
    assert fault.hits
    assert_one_line_error(result, "not saved", MESSAGES[err])
    data = json.loads(result.stdout)  # the answer itself is still printed
    assert data["answer"] and data.get("saved_path") is None
    assert snapshot(wiki) == before  # no answer page without its catalog line, no temp file
    assert not temp_files(sample_kb.root)

    again = run_cli("--kb", str(sample_kb.root), "ask", QUESTION, "--save", "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["saved_path"] == ANSWER_PATH
    assert_consistent(wiki.parent)


@pytest.fixture
def client(sample_kb):
    with TestClient(create_test_app(sample_kb)) as test_client:
        yield test_client


def create_test_app(kb: KnowledgeBase):
    from kb_ai.server.app import create_app

    return create_app(Settings(kb=kb.root), mcp=False)


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EACCES])
def test_http_save_answer_fault_is_a_json_error(client, sample_kb, monkeypatch, err):
    wiki = sample_kb.wiki_dir
    before = snapshot(wiki)
    payload = {"question": QUESTION, "answer": "Checked [Citations](retrieval/citations.md).",
               "citations": ["retrieval/citations.md"], "mode": "offline"}
    with DiskFault(monkeypatch, sample_kb.root, err, which="/wiki/"):
        response = client.post("/api/answers", json=payload)
    assert 500 <= response.status_code < 600
    error = response.json()["error"]
    assert error["code"] == "storage_error" and MESSAGES[err] in error["message"] and "not saved" in error["message"]
    assert snapshot(wiki) == before
    assert client.post("/api/answers", json=payload).status_code == 201
    assert_consistent(wiki.parent)


# -- HTTP page edit -------------------------------------------------------------------------------

EDITED = ("---\ntitle: Deployment\nsummary: Running the server behind a proxy, edited.\ntopic: ops\n---\n"
          "# Deployment\n\nEdited: use Caddy or nginx in front of it.\n")


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EACCES])
@pytest.mark.parametrize("at", ["replace", "fsync"])
def test_page_edit_fault_is_a_json_error_and_the_old_text_stays(client, sample_kb, monkeypatch, err, at):
    wiki = sample_kb.wiki_dir
    before = snapshot(wiki)
    version = client.get("/api/pages/ops/deployment.md").json()["version"]
    with DiskFault(monkeypatch, sample_kb.root, err, which="/wiki/ops/deployment.md", at=at) as fault:
        response = client.put("/api/pages/ops/deployment.md", json={"markdown": EDITED, "version": version})
    assert fault.hits
    assert 500 <= response.status_code < 600, response.text
    error = response.json()["error"]
    assert error["code"] == "storage_error"
    assert "ops/deployment.md" in error["message"] and "not saved" in error["message"]
    assert MESSAGES[err] in error["message"] and "\n" not in error["message"]
    assert snapshot(wiki) == before
    assert client.get("/api/pages/ops/deployment.md").json()["markdown"] == before["ops/deployment.md"]

    # The fault is gone: the same edit (same version: nothing changed) goes through.
    saved = client.put("/api/pages/ops/deployment.md", json={"markdown": EDITED, "version": version})
    assert saved.status_code == 200, saved.text
    assert (wiki / "ops" / "deployment.md").read_text() == EDITED
    assert_consistent(wiki.parent)
    assert "edited" in (wiki / "master-index.md").read_text()


def test_page_edit_saved_but_catalog_fault_says_so(client, sample_kb, monkeypatch):
    wiki = sample_kb.wiki_dir
    before_index = (wiki / "master-index.md").read_text()
    with DiskFault(monkeypatch, sample_kb.root, errno.ENOSPC, which="/wiki/master-index.md"):
        response = client.put("/api/pages/ops/deployment.md", json={"markdown": EDITED})
    assert 500 <= response.status_code < 600
    message = response.json()["error"]["message"]
    assert "was saved" in message and "kaas index" in message and MESSAGES[errno.ENOSPC] in message
    assert (wiki / "ops" / "deployment.md").read_text() == EDITED  # what the message says
    assert (wiki / "master-index.md").read_text() == before_index
    assert not temp_files(sample_kb.root)
    assert run_cli("--kb", str(sample_kb.root), "index").exit_code == 0
    assert_consistent(wiki.parent)


@pytest.mark.skipif(IS_ROOT, reason=ROOT_SKIP)
def test_page_edit_in_a_read_only_folder(client, sample_kb):
    wiki = sample_kb.wiki_dir
    before = (wiki / "ops" / "deployment.md").read_text()
    os.chmod(wiki / "ops", 0o555)
    try:
        response = client.put("/api/pages/ops/deployment.md", json={"markdown": EDITED})
    finally:
        os.chmod(wiki / "ops", 0o755)
    assert response.status_code >= 400 and "Permission denied" in response.json()["error"]["message"]
    assert (wiki / "ops" / "deployment.md").read_text() == before
    assert not temp_files(wiki)


def test_fault_injection_is_scoped_to_the_kb(tmp_path, monkeypatch):
    """The injector itself: it fails writes under the KB only (so pytest and the OS are untouched)."""
    from kb_ai.files import atomic_write_text

    inside, outside = tmp_path / "kb" / "wiki" / "a.md", tmp_path / "elsewhere" / "a.md"
    with DiskFault(monkeypatch, tmp_path / "kb", errno.ENOSPC):
        with pytest.raises(OSError) as info:
            atomic_write_text(inside, "x")
        atomic_write_text(outside, "x")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(inside)  # names the target
    assert not inside.exists() and outside.read_text() == "x"
    assert not list((tmp_path / "kb").rglob(f"{TEMP_PREFIX}*"))
