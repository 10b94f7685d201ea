"""Everything in raw/ that is not compiled is reported, with its reason, in the report (text and
--json) as well as the manifest; symlinks never make kaas read outside raw/; a compile with
nothing to do writes nothing, not even a log line."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner

from kb_ai.cli import cli

from compile_checks import compile_offline, manifest
from fixtures.compile.make import zip_bytes


def kb_with_links(root: Path) -> None:
    (root / "raw" / "notes").mkdir(parents=True)
    (root / "raw" / "notes" / "a.md").write_text("# Alpha\n\nAlpha is the first project and ships in May.\n")
    outside = root / "elsewhere"
    outside.mkdir()
    (outside / "secret.md").write_text("# Secret\n\nWords that live outside raw and must never be compiled.\n")
    os.symlink(outside, root / "raw" / "linked-out")  # a folder outside raw/
    os.symlink(root / "raw" / "notes", root / "raw" / "linked-in")  # a folder inside raw/
    os.symlink(root / "raw" / "loop-b", root / "raw" / "loop-a")
    os.symlink(root / "raw" / "loop-a", root / "raw" / "loop-b")


def test_symlinked_folders_and_loops_are_reported_never_followed(tmp_path):
    kb_with_links(tmp_path)
    report = compile_offline(tmp_path)
    reasons = {s["path"]: s["reason"] for s in report.skipped}
    assert reasons["raw/linked-out/"] == "symlinked folder pointing outside raw/: not followed"
    assert reasons["raw/linked-in/"].startswith("symlinked folder: not followed")
    assert reasons["raw/loop-a"] == reasons["raw/loop-b"] == "symlink loop: not followed"
    assert report.created == ["notes/alpha.md"]
    wiki_text = "".join(p.read_text() for p in (tmp_path / "wiki").rglob("*.md"))
    assert "outside raw" not in wiki_text
    sources = manifest(tmp_path)["sources"]
    assert sources["raw/linked-out/"]["status"] == "skipped"
    assert "symlinked folder" in report.render_text()
    # Unchanged on the next run: still reported, still not followed.
    again = compile_offline(tmp_path)
    assert {s["path"] for s in again.skipped} == set(reasons)


def test_refused_archive_members_are_in_the_report_and_its_json(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "bundle.zip").write_bytes(zip_bytes({
        "docs/a.md": "# Alpha\n\nAlpha text with enough words to compile.",
        "../evil.md": "# Evil\n\nescape attempt text",
        "/abs.md": "# Abs\n\nabsolute path text",
    }))
    result = CliRunner().invoke(cli, ["--kb", str(tmp_path), "compile", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    parts = {p["reason"] for p in data["partial"] if p["path"] == "raw/bundle.zip"}
    assert "'../evil.md': '..' in path refused" in parts and "'/abs.md': absolute path refused" in parts
    text = CliRunner().invoke(cli, ["--kb", str(tmp_path), "compile"]).stdout  # the next, no-op run too
    assert "compiled in part" in text and "raw/bundle.zip: '../evil.md': '..' in path refused" in text


def test_a_no_op_compile_writes_nothing_not_even_the_log(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.md").write_text("# Alpha\n\nAlpha is the first project and ships in May.\n")
    compile_offline(tmp_path)
    log = tmp_path / "wiki" / "log.md"
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "wiki").rglob("*")}
    log_text = log.read_text()
    report = compile_offline(tmp_path)
    assert log.read_text() == log_text
    assert report.created == report.updated == [] and report.exit_code == 0
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "wiki").rglob("*")} == before
    (tmp_path / "raw" / "b.md").write_text("# Beta\n\nBeta is the second project and ships in June.\n")
    compile_offline(tmp_path)
    assert log.read_text().count(" compile: ") == 2  # a run that did something is logged
