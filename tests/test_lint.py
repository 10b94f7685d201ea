"""kaas lint: a wiki built to contain every defect is reported finding by finding; a clean wiki
(and this repository's own wiki) has none; --fix repairs only the mechanical ones, in place."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb_ai.cli import cli
from kb_ai.compile.state import ArticleRecord, CompileState
from kb_ai.config import Settings
from kb_ai.quality.lint import LintConfig, lint_kb, run_lint
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.links import resolve_link
from kb_ai.store.markdown_text import find_links, replace_links

from helpers import llm_settings, write_page
from llm_fakes import FakeOpenAI

REPO = Path(__file__).resolve().parents[1]
CONTRADICTIONS = "You review two pages of the same wiki for contradictions"


def page(wiki: Path, path: str, title: str, body: str, *, summary: str | None = "A page.", **meta) -> Path:
    return write_page(wiki, path, title, summary, body, topic=path.split("/")[0], **meta)


@pytest.fixture
def clean_kb(tmp_path) -> KnowledgeBase:
    """Three articles that link to each other and cite sources that exist: nothing to report."""
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "notes.md").write_text("# Notes\n\nValves open at 40 bar.\n")
    wiki = tmp_path / "wiki"
    page(wiki, "valves/zebra-valve.md", "Zebra valve", "# Zebra valve\n\nThe zebra valve opens at 40 bar; see "
         "[pressure ratings](../ratings/pressure-ratings.md) and [the pump](pump.md#inlet).",
         sources=["raw/notes.md"], updated=time.strftime("%Y-%m-%d"))  # today: the source was just written
    page(wiki, "valves/pump.md", "Pump", "# Pump\n\nThe pump feeds the [zebra valve](zebra-valve.md). "
         "External: [docs](https://example.org/pump). Raw: [notes](../../raw/notes.md).\n\n"
         "```\n[not a link](missing.md)\n```\n\nInline `[code](missing.md)` is not a link either.",
         sources=["raw/notes.md"])
    page(wiki, "ratings/pressure-ratings.md", "Pressure ratings", "# Pressure ratings\n\n"
         "Ratings for the [pump](../valves/pump.md) and the [valve](/wiki/valves/zebra-valve.md).",
         sources=["raw/notes.md"])
    kb = KnowledgeBase(tmp_path)
    kb.reindex()
    return kb


@pytest.fixture
def defect_kb(clean_kb) -> KnowledgeBase:
    """The clean wiki plus one instance of every defect lint knows."""
    root, wiki = clean_kb.root, clean_kb.wiki_dir
    (root / "raw" / "changed.md").write_text("new text\n")
    (root / "raw" / "old.md").write_text("old text\n")
    page(wiki, "valves/dead-links.md", "Dead links",
         "# Dead links\n\nSee [the gone page](../valves/gone.md) and ![a diagram](img/missing.png), "
         "or the [missing source](../../raw/nowhere.pdf). The [pump](pump.md) and the [hub](../ratings/hub.md) are fine.",
         sources=["raw/notes.md"])
    page(wiki, "valves/bad-sources.md", "Bad sources", "# Bad sources\n\nLinks to the [pump](pump.md).",
         sources=["raw/missing.pdf", "../outside.txt", "https://example.org/ok"])
    page(wiki, "valves/no-summary.md", "No summary", "# No summary\n\nThe first sentence stands in. [Pump](pump.md).",
         summary=None, sources=["raw/notes.md"])
    page(wiki, "valves/long-summary.md", "Long summary", "# Long summary\n\n[Pump](pump.md).",
         summary="word " * 60, sources=["raw/notes.md"])
    page(wiki, "valves/orphan.md", "Lonely page", "# Lonely\n\nNobody links here. [Pump](pump.md).", sources=["raw/notes.md"])
    page(wiki, "ratings/duplicate.md", "Pump", "# Pump\n\nA second page called Pump. [Pump](../valves/pump.md).",
         sources=["raw/notes.md"])
    page(wiki, "ratings/near-duplicate.md", "Pressure rating", "# Pressure rating\n\nAlmost the same title. "
         "[Pump](../valves/pump.md).", sources=["raw/notes.md"])
    page(wiki, "valves/stale-compiled.md", "Stale compiled", "# Stale\n\n[Pump](pump.md).", sources=["raw/changed.md"])
    page(wiki, "valves/stale-by-date.md", "Stale by date", "# Stale by date\n\n[Pump](pump.md).",
         sources=["raw/old.md"], updated="2020-01-01")
    page(wiki, "valves/hand-written.md", "Hand written", "# Hand written\n\nNo sources here. [Pump](pump.md).")
    page(wiki, "valves/compiled-no-sources.md", "Compiled without sources", "# C\n\n[Pump](pump.md).")
    page(wiki, "valves/oversized.md", "Oversized", "# Oversized\n\n[Pump](pump.md).\n\n" + "Filler text. " * 4_000,
         sources=["raw/notes.md"])
    # Every other page links to each page that must not be an orphan.
    hub_links = " ".join(f"[{p}](../{p})" for p in [
        "valves/dead-links.md", "valves/bad-sources.md", "valves/no-summary.md", "valves/long-summary.md",
        "ratings/duplicate.md", "ratings/near-duplicate.md", "valves/stale-compiled.md", "valves/stale-by-date.md",
        "valves/hand-written.md", "valves/compiled-no-sources.md", "valves/oversized.md", "valves/not-indexed.md",
        "broken/malformed.md", "broken/unclosed.md", "broken/untitled.md"])
    page(wiki, "ratings/hub.md", "Hub", f"# Hub\n\n{hub_links}", sources=["raw/notes.md"])
    # Everything above (and nothing below) is in the catalog.
    clean_kb.reindex()
    page(wiki, "valves/not-indexed.md", "Not indexed", "# Not indexed\n\n[Pump](pump.md).", sources=["raw/notes.md"])
    (wiki / "broken").mkdir()
    (wiki / "broken" / "malformed.md").write_text("---\ntitle: [unclosed\nsummary: x\n---\n# Malformed\n")
    (wiki / "broken" / "unclosed.md").write_text("---\ntitle: Unclosed\n# Unclosed\n\nNo closing line.\n")
    (wiki / "broken" / "untitled.md").write_text("---\nsummary: No title here.\ntopic: broken\nsources: [raw/notes.md]\n"
                                                 "updated: not-a-date\n---\nJust text. [Pump](../valves/pump.md).\n")
    # Catalog drift: a line for a deleted file, a line whose title differs from the article's.
    index = clean_kb.master_index.read_text()
    index = index.replace("- [Pressure ratings](ratings/pressure-ratings.md)", "- [Old ratings](ratings/pressure-ratings.md)")
    index += "- [Deleted page](valves/deleted.md) — Gone.\n"
    clean_kb.master_index.write_text(index)
    # Compile manifest: stale-compiled merged an older raw/changed.md; compiled-no-sources was compiled.
    state = CompileState(root / ".kaas")
    state.articles["valves/stale-compiled.md"] = ArticleRecord(
        "valves/stale-compiled.md", merged={"raw/changed.md": hashlib.sha256(b"old text\n").hexdigest()})
    state.articles["valves/compiled-no-sources.md"] = ArticleRecord("valves/compiled-no-sources.md")
    state.save({"mode": "offline"})
    return clean_kb


def by_key(report) -> dict[tuple[str, str], list]:
    found: dict[tuple[str, str], list] = {}
    for f in report.findings:
        found.setdefault((f.check, f.path), []).append(f)
    return found


def test_clean_wiki_has_no_findings(clean_kb):
    report = lint_kb(clean_kb)
    assert report.findings == [], report.render_text()
    assert report.exit_code == 0 and report.articles == 3


def test_repository_wiki_lints_clean():
    report = lint_kb(KnowledgeBase(REPO))
    # Staleness by mtime depends on the checkout (a fresh clone dates every file today); the rest must be clean.
    assert [f for f in report.findings if f.check != "stale"] == [], report.render_text()


def test_each_defect_is_found(defect_kb):
    report = lint_kb(defect_kb, LintConfig(max_article_tokens=12_000))
    found = by_key(report)

    def one(check, path, severity, *words, fixable=None):
        items = found.get((check, path), [])
        matching = [f for f in items if all(w in f.message for w in words)]
        assert matching, f"no {check} finding for {path} with {words}:\n{report.render_text()}"
        item = matching[0]
        items.remove(item)
        if not items:
            del found[(check, path)]
        assert item.severity == severity, item
        for word in words:
            assert word in item.message, item
        if fixable is not None:
            assert item.fixable is fixable, item
        return item

    one("frontmatter", "broken/malformed.md", "error", "malformed frontmatter")
    # Frontmatter never closed is frontmatter kaas cannot read, not body text: the page is hidden
    # (as by the server), so the one finding about it is that, not a missing summary or source.
    one("frontmatter", "broken/unclosed.md", "error", "not closed", "hidden from everyone")
    one("frontmatter", "broken/untitled.md", "warning", "no title")
    one("frontmatter", "broken/untitled.md", "warning", "not-a-date")
    one("index-drift", "valves/not-indexed.md", "error", "not in master-index.md", fixable=True)
    one("index-drift", "ratings/pressure-ratings.md", "error", "'Old ratings' in the catalog", fixable=True)
    one("index-drift", "master-index.md", "error", "valves/deleted.md, which does not exist", fixable=True)
    one("index-drift", "broken/untitled.md", "error", "not in master-index.md")
    link = one("broken-link", "valves/dead-links.md", "error", "../valves/gone.md", "no such article", fixable=True)
    assert link.line == 9  # in the file: 6 lines of frontmatter, the heading, a blank line
    one("broken-link", "valves/dead-links.md", "error", "image to img/missing.png", "no such file")
    one("broken-link", "valves/dead-links.md", "error", "raw/nowhere.pdf", "no such file")
    one("broken-source", "valves/bad-sources.md", "error", "raw/missing.pdf does not exist", fixable=False)
    one("broken-source", "valves/bad-sources.md", "warning", "outside the knowledge base")
    one("orphan", "valves/orphan.md", "warning", "no other article links here")
    one("summary", "valves/no-summary.md", "warning", "no summary")
    one("summary", "valves/long-summary.md", "warning", "299 characters, more than 200")
    one("duplicate-title", "valves/pump.md", "warning", "same title as ratings/duplicate.md")
    one("near-duplicate-title", "ratings/pressure-ratings.md", "info", "'Pressure rating'")
    one("stale", "valves/stale-compiled.md", "warning", "raw/changed.md (content changed since it was compiled in)")
    one("stale", "valves/stale-by-date.md", "warning", "raw/old.md (modified after the article)")
    one("no-sources", "valves/hand-written.md", "info")
    one("no-sources", "valves/compiled-no-sources.md", "warning", "compiled article")
    one("oversized", "valves/oversized.md", "warning", "reading budget of 12,000 tokens")
    assert found == {}, "unexpected findings:\n" + "\n".join(f.render() for fs in found.values() for f in fs)
    assert report.exit_code == 1
    # Errors first; the JSON form carries every field.
    assert report.findings[0].severity == "error"
    data = report.to_json()
    assert data["counts"]["error"] == sum(1 for f in report.findings if f.severity == "error")
    assert set(data["findings"][0]) >= {"check", "severity", "path", "message", "fixable"}


def test_sources_are_warnings_when_there_is_no_raw_folder(tmp_path):
    wiki = tmp_path / "wiki"
    page(wiki, "a/one.md", "One", "# One\n\n[Two](two.md)", sources=["raw/x.pdf"])
    page(wiki, "a/two.md", "Two", "# Two\n\n[One](one.md)", sources=["raw/x.pdf"])
    kb = KnowledgeBase(tmp_path)
    kb.reindex()
    report = lint_kb(kb)
    assert {(f.check, f.severity) for f in report.findings} == {("broken-source", "warning")}
    assert "no raw/ folder" in report.findings[0].message and report.exit_code == 0


def test_stale_by_mtime_without_updated_date(tmp_path):
    (tmp_path / "raw").mkdir()
    source = tmp_path / "raw" / "s.md"
    source.write_text("x")
    wiki = tmp_path / "wiki"
    article = page(wiki, "a/one.md", "One", "# One\n\n[Two](two.md)", sources=["raw/s.md"])
    page(wiki, "a/two.md", "Two", "# Two\n\n[One](one.md)", sources=["raw/s.md"])
    KnowledgeBase(tmp_path).reindex()
    assert lint_kb(KnowledgeBase(tmp_path)).findings == []
    later = time.time() + 3_600
    os.utime(source, (later, later))
    os.utime(wiki / "a" / "two.md", (later + 10, later + 10))  # two.md was rewritten after the change
    stale = [f for f in lint_kb(KnowledgeBase(tmp_path)).findings if f.check == "stale"]
    assert [f.path for f in stale] == ["a/one.md"] and article.exists()


def test_fix_removes_dead_links_and_reindexes_without_touching_anything_else(defect_kb):
    wiki = defect_kb.wiki_dir
    target = wiki / "valves" / "dead-links.md"
    original = target.read_text().replace("title: Dead links", "title: Dead links  # a comment that must survive")
    target.write_text(original)
    untouched = {p: p.read_bytes() for p in wiki.rglob("*.md") if p.name not in ("dead-links.md", "master-index.md", "log.md", "topics.md")}
    report = run_lint(Settings(kb=defect_kb.root), fix=True)
    assert report.fixed[0] == "wiki/valves/dead-links.md: removed 3 dead links, kept the text"
    assert report.fixed[1].startswith("wiki/master-index.md: re-indexed")
    assert target.read_text() == (
        original.replace("[the gone page](../valves/gone.md)", "the gone page")
        .replace("![a diagram](img/missing.png)", "a diagram")
        .replace("[missing source](../../raw/nowhere.pdf)", "missing source")
    )
    assert {p: p.read_bytes() for p in untouched} == untouched
    remaining = {f.check for f in report.findings}
    assert "broken-link" not in remaining and "index-drift" not in remaining
    assert {"frontmatter", "broken-source", "stale", "orphan"} <= remaining  # judgement calls stay
    assert report.exit_code == 1  # malformed frontmatter and a missing source are still errors
    assert run_lint(Settings(kb=defect_kb.root), fix=True).fixed == []  # idempotent


def test_links_parsing_and_resolution():
    body = ("See [a](../x/a.md#part) and [b](<b c.md> \"title\") and [film](Kiss_(1945_film).md).\n"
            "```\n[fenced](f.md)\n```\n[wrapped\ntext](w.md) `[code](c.md)`\n\n[ref]: ../../raw/s.pdf\n")
    links = find_links(body)
    assert [(l.text, l.target, l.line) for l in links] == [
        ("a", "../x/a.md#part", 1), ("b", "b c.md", 1), ("film", "Kiss_(1945_film).md", 1),
        ("wrapped\ntext", "w.md", 5), ("ref", "../../raw/s.pdf", 8)]
    assert resolve_link("t/p.md", "../x/a.md#part").wiki_path == "x/a.md"
    assert resolve_link("t/p.md", "../../raw/s.pdf").kb_path == "raw/s.pdf"
    assert resolve_link("t/p.md", "../../../etc/passwd").kind == "outside"
    assert resolve_link("t/p.md", "https://x.org").kind == "external"
    assert resolve_link("t/p.md", "#section").kind == "anchor"
    assert resolve_link("t/p.md", "/wiki/t/q.md").wiki_path == "t/q.md"
    assert replace_links(body, links[:1]) == body.replace("[a](../x/a.md#part)", "a")


def test_contradictions_are_reported_from_the_model(clean_kb):
    settings = llm_settings(clean_kb.root)
    with FakeOpenAI() as fake:
        fake.reply_json({"contradictions": [{"claim_a": "opens at 40 bar", "claim_b": "opens at 60 bar",
                                             "explanation": "Two opening pressures."}]}, when=CONTRADICTIONS)
        fake.reply_json({"contradictions": []}, when=CONTRADICTIONS, repeat=True)
        report = run_lint(settings, contradictions=True, max_pairs=2)
    assert fake.call_count == 2  # bounded: three pages share a source, only two pairs asked
    assert fake.requests[0]["response_format"]["type"] == "json_schema"
    found = [f for f in report.findings if f.check == "contradiction"]
    assert len(found) == 1 and found[0].severity == "warning"
    assert "'opens at 40 bar' vs 'opens at 60 bar'" in found[0].message and "shared source raw/notes.md" in found[0].message
    assert report.usage["llm_calls"] == 2 and report.usage["pairs_compared"] == 2


def test_contradictions_need_a_model(clean_kb):
    with pytest.raises(Exception, match="needs a model"):
        run_lint(Settings(kb=clean_kb.root), contradictions=True)


def test_cli_lint_json_exit_codes_and_fix(defect_kb):
    runner = CliRunner()
    result = runner.invoke(cli, ["--kb", str(defect_kb.root), "lint", "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert any(f["check"] == "broken-link" and f["fixable"] for f in data["findings"])
    result = runner.invoke(cli, ["--kb", str(defect_kb.root), "lint", "--fix"])
    assert "fixed: wiki/valves/dead-links.md" in result.stdout
    assert runner.invoke(cli, ["--kb", str(defect_kb.root / "nowhere"), "lint"]).exit_code == 2


def test_access_rules_are_linted_and_their_drift_is_an_error(tmp_path):
    wiki = tmp_path / "wiki"
    write_page(wiki, "hr/pay.md", "Pay", "Pay bands.", "# Pay\n\nBands.", access=["hr"])
    write_page(wiki, "hr/typo.md", "Typo", "A typo in a group.", "# Typo\n\nText.", access=["h-r"])
    write_page(wiki, "hr/bad.md", "Bad", "A malformed rule.", "# Bad\n\nText.", access={"hr": True})
    (tmp_path / "kaas.toml").write_text('[users.alice]\ntoken = "alice-token-0123456789"\ngroups = ["hr"]\n')
    kb = KnowledgeBase(tmp_path)
    kb.reindex()
    report = run_lint(Settings(kb=tmp_path))
    access = {(f.path, f.message.split(":")[0]) for f in report.findings if f.check == "access"}
    assert ("hr/typo.md", "access names groups no user of kaas.toml has") in access
    assert any(p == "hr/bad.md" for p, _ in access) and not any(p == "hr/pay.md" for p, _ in access)
    # A hand edit that changes who may read a page, not yet re-indexed, is index drift.
    page = wiki / "hr" / "pay.md"
    page.write_text(page.read_text().replace("access: [hr]", "access: [hr, eng]"))
    drift = [f for f in run_lint(Settings(kb=tmp_path)).findings if f.check == "index-drift" and f.path == "hr/pay.md"]
    assert drift and "access [hr] in the catalog, [eng, hr] in the article" in drift[0].message
