"""`kaas compile` end to end in offline mode: deterministic structuring of a mixed folder, and
the incremental properties (no-op, changed, deleted, hand edits, dry run, reproducibility)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from kb_ai.store.articles import load_article

from compile_checks import assert_consistent, compile_offline, make_source_kb, manifest, wiki_snapshot


def test_mixed_folder_compiles_offline(tmp_path):
    files = make_source_kb(tmp_path)
    report = compile_offline(tmp_path)
    assert report.mode == "offline" and report.llm_calls == 0
    assert_consistent(tmp_path)
    # Skipped with reasons, duplicates recorded, the revision compiled into the same article.
    skipped = {s["path"]: s["reason"] for s in report.skipped}
    assert skipped[files["corrupt"]].startswith("not a readable PDF")
    assert files["binary"] not in skipped  # an image is not a document: left out, counted by reason
    assert {"reason": "image", "count": 1, "examples": [files["binary"]]} in report.left_out
    dups = {d["path"]: d for d in report.duplicates}
    assert dups[files["duplicate"]]["of"] == files["duplicate_of"] and dups[files["duplicate"]]["kind"] == "exact"
    assert dups[files["revision_new"]]["kind"] == "revision"
    assert len(report.created) == 10
    pricing = load_article(tmp_path / "wiki", "product/pricing.md")
    assert pricing.sources == [files["revision_old"], files["revision_new"]]
    assert "$12 per month" in pricing.body and "30-day free trial" in pricing.body
    assert '[Superseded 2026-04-02 by raw/product/pricing-2026-04-02.md: earlier "The Solo plan costs $9' in pricing.body
    # Topic from the folder, title from the document, lead-sentence summary, sections kept.
    arch = load_article(tmp_path / "wiki", "engineering/architecture.md")
    assert (arch.title, arch.topic) == ("Architecture", "engineering")
    assert arch.summary.startswith("The backend is a FastAPI service")
    assert "## Bank sync" in arch.body and "Home" not in arch.body
    q1 = load_article(tmp_path / "wiki", "meetings/notes-q1.md")
    assert "## 2026-01-20-planning.md" in q1.body and "escape" not in q1.body.lower()
    # Boilerplate footer kept once, removed elsewhere.
    footer = "Do not share outside the company"
    holders = [p for p, text in wiki_snapshot(tmp_path).items() if footer in text and p.endswith(".md")
               and p != "master-index.md"]
    assert len(holders) == 1
    # Coverage manifest: every source accounted for.
    data = manifest(tmp_path)
    assert set(data["sources"]) == {f"raw/{p.relative_to(tmp_path / 'raw').as_posix()}"
                                    for p in (tmp_path / "raw").rglob("*") if p.is_file()}
    assert data["sources"][files["pdf"]]["articles"] == ["team/onboarding-checklist.md"]
    assert data["sources"][files["duplicate"]]["status"] == "duplicate"
    assert data["sources"][files["duplicate"]]["articles"] == ["support/support-faq.md"]
    assert data["sources"][files["corrupt"]]["status"] == "skipped"
    for path, record in data["articles"].items():
        assert len(record["written_hash"]) == 64
    log = (tmp_path / "wiki" / "log.md").read_text()
    assert "compile: 14 sources" in log and "offline mode" in log
    text = report.render_text()
    assert "offline mode" in text and "skipped:" in text and "revision of" in text


def test_noop_rerun_reads_and_writes_nothing(tmp_path):
    make_source_kb(tmp_path)
    compile_offline(tmp_path)
    before = {p: os.stat(tmp_path / "wiki" / p).st_mtime_ns for p in wiki_snapshot(tmp_path)}
    report = compile_offline(tmp_path)
    assert report.stage("ingest").counts["read"] == 0
    assert report.created == report.updated == [] and report.llm_calls == 0
    after = {p: os.stat(tmp_path / "wiki" / p).st_mtime_ns for p in wiki_snapshot(tmp_path)}
    assert before == after


def test_touched_but_unchanged_file_is_not_recompiled(tmp_path):
    make_source_kb(tmp_path)
    compile_offline(tmp_path)
    os.utime(tmp_path / "raw" / "engineering" / "release-process.txt", None)
    report = compile_offline(tmp_path)
    assert report.stage("ingest").counts["read"] == 1
    assert report.sources["changed"] == 0 and report.updated == []


def test_changed_source_supersedes_and_touches_only_its_article(tmp_path):
    make_source_kb(tmp_path)
    compile_offline(tmp_path)
    before = wiki_snapshot(tmp_path)
    raw = tmp_path / "raw" / "engineering" / "release-process.txt"
    raw.write_text(raw.read_text().replace("every Tuesday", "every Wednesday"))
    report = compile_offline(tmp_path)
    assert report.sources["changed"] == 1 and report.updated == ["engineering/release-process.md"]
    after = wiki_snapshot(tmp_path)
    changed = {p for p in after if after[p] != before.get(p)}
    assert changed == {"engineering/release-process.md", "master-index.md"}  # its summary changed
    body = after["engineering/release-process.md"]
    assert "every Wednesday" in body
    assert "by raw/engineering/release-process.txt: earlier \"We release the web app every Tuesday" in body
    assert_consistent(tmp_path)


def test_deleted_source_is_removed_from_sources_and_orphan_flagged(tmp_path):
    files = make_source_kb(tmp_path)
    compile_offline(tmp_path)
    (tmp_path / files["tar"]).unlink()
    (tmp_path / files["revision_new"]).unlink()
    report = compile_offline(tmp_path)
    assert report.sources["deleted"] == 2
    assert report.orphaned == ["meetings/notes-q2.md"]
    orphan = load_article(tmp_path / "wiki", "meetings/notes-q2.md")
    assert orphan.sources == [] and "Q2 focus" in orphan.body  # flagged, not deleted
    pricing = load_article(tmp_path / "wiki", "product/pricing.md")
    assert pricing.sources == [files["revision_old"]]
    data = manifest(tmp_path)
    assert files["tar"] not in data["sources"] and data["articles"]["meetings/notes-q2.md"]["orphaned"]
    assert "orphaned" in report.render_text()
    assert_consistent(tmp_path)


def test_hand_edit_is_never_overwritten_offline(tmp_path):
    make_source_kb(tmp_path)
    compile_offline(tmp_path)
    article = tmp_path / "wiki" / "engineering" / "release-process.md"
    edited = article.read_text() + "\nA note Dana added by hand.\n"
    article.write_text(edited)
    raw = tmp_path / "raw" / "engineering" / "release-process.txt"
    raw.write_text(raw.read_text().replace("every Tuesday", "every Wednesday"))
    report = compile_offline(tmp_path)
    # (It used to be left alone, exit 1 on every run: the revision never landed.) The source's
    # change is merged around the hand edit, which stays word for word.
    merged = article.read_text()
    assert "A note Dana added by hand." in merged and "every Wednesday" in merged
    assert report.updated == ["engineering/release-process.md"] and not report.held and report.exit_code == 0
    # Nothing left to merge on the next run: silent, the text as it is.
    again = compile_offline(tmp_path)
    assert not again.held and not again.updated and not again.warnings and article.read_text() == merged
    edited = merged
    # A hand-written article the catalog did not know is indexed, never overwritten.
    manual = tmp_path / "wiki" / "team" / "manual-page.md"
    manual.write_text("---\ntitle: Manual page\nsummary: Written by a person.\n---\n# Manual page\n\nHello.\n")
    compile_offline(tmp_path, full=True)
    assert "team/manual-page.md" in (tmp_path / "wiki" / "master-index.md").read_text()
    assert article.read_text() == edited


def test_dry_run_writes_nothing(tmp_path):
    make_source_kb(tmp_path)
    report = compile_offline(tmp_path, dry_run=True)
    assert not (tmp_path / ".kaas").exists() and not (tmp_path / "wiki").exists()
    assert report.dry_run and report.estimate["llm_calls"] == 0
    planned = {item["source"]: item for item in report.plan}
    assert planned["raw/product/overview.md"]["articles"] == ["product/ledgerly-product-overview.md (new)"]
    assert "DRY RUN" in report.render_text()
    compile_offline(tmp_path)
    before = wiki_snapshot(tmp_path)
    log = (tmp_path / "wiki" / "log.md").read_text()
    state = (tmp_path / ".kaas" / "manifest.json").read_text()
    (tmp_path / "raw" / "product" / "overview.md").write_text("# Overview\n\nChanged entirely to new words here.")
    report = compile_offline(tmp_path, dry_run=True)
    assert any(i["action"].startswith("re-plan") for i in report.plan)
    assert wiki_snapshot(tmp_path) == before and (tmp_path / "wiki" / "log.md").read_text() == log
    assert (tmp_path / ".kaas" / "manifest.json").read_text() == state


def test_compile_is_reproducible(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    make_source_kb(one)
    shutil.copytree(one / "raw", two / "raw")
    compile_offline(one)
    compile_offline(two)
    assert wiki_snapshot(one) == wiki_snapshot(two)
    compile_offline(one, full=True)
    assert wiki_snapshot(one) == wiki_snapshot(two)


def test_missing_raw_folder_is_a_clear_error(tmp_path):
    import pytest

    from kb_ai.errors import NoWikiError

    with pytest.raises(NoWikiError, match="no raw/ folder"):
        compile_offline(tmp_path)


def test_bundled_demo_compiles_offline(tmp_path):
    demo = Path(__file__).resolve().parents[1] / "examples" / "demo" / "raw"
    shutil.copytree(demo, tmp_path / "raw")
    report = compile_offline(tmp_path)
    assert not report.failed and not report.skipped
    assert_consistent(tmp_path)
    dups = {d["path"]: d["kind"] for d in report.duplicates}
    assert dups == {"raw/support/faq (copy).html": "exact", "raw/product/pricing-2026-04-02.md": "revision"}
    pricing = load_article(tmp_path / "wiki", "product/pricing.md")
    assert "$12 per month" in pricing.body and "[Superseded 2026-04-02" in pricing.body
    assert len(report.created) == 9


def test_progress_bar_only_on_a_terminal():
    import io

    from kb_ai.compile.progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    quiet = io.StringIO()
    bar = Progress(None, quiet)
    bar.start("write", 3)
    bar.advance("a")
    bar.done()
    assert quiet.getvalue() == ""
    tty = Tty()
    bar = Progress(None, tty)
    bar.start("write", 2)
    bar.advance("topic/a.md")
    bar.advance("topic/b.md")
    bar.done()
    assert "write" in tty.getvalue() and "2/2" in tty.getvalue() and tty.getvalue().endswith("\r")


def test_a_fixed_corrupt_file_is_compiled_and_report_serializes(tmp_path):
    import json

    from fixtures.compile.make import pdf_bytes

    files = make_source_kb(tmp_path)
    compile_offline(tmp_path)
    (tmp_path / files["corrupt"]).write_bytes(pdf_bytes(["Scanned receipt policy", "Receipts older than "
                                                         "seven years are deleted every January."]))
    report = compile_offline(tmp_path)
    assert report.sources["new"] == 1 and report.created == ["misc/scanned-receipt-policy.md"]
    assert files["corrupt"] not in {s["path"] for s in report.skipped}
    data = json.loads(json.dumps(report.to_dict()))
    assert data["usage"]["llm_calls"] == 0 and data["created"] == ["misc/scanned-receipt-policy.md"]
    assert {s["name"] for s in data["stages"]} == {"ingest", "dedup", "plan", "write", "autolink", "index"}


def test_a_skipped_file_is_said_up_front_not_only_in_the_list(tmp_path):
    """Exit status 0 means every source that could be compiled was; a damaged file is skipped,
    and the report's summary says that not everything compiled (issue 28 item 11)."""
    from click.testing import CliRunner

    from kb_ai.cli import cli

    (tmp_path / "raw").mkdir()
    (tmp_path / "wiki").mkdir()
    (tmp_path / "raw" / "broken.pdf").write_bytes(b"%PDF-1.4\ngarbage")
    (tmp_path / "raw" / "note.md").write_text("# Note\n\nA real note about the depot.\n")
    result = CliRunner().invoke(cli, ["--kb", str(tmp_path), "compile", "--offline"])
    assert result.exit_code == 0, result.output
    head = result.output.split("\n\n", 1)[0]
    assert "not everything compiled: 1 file skipped" in head, result.output
    assert "raw/broken.pdf" in result.output
