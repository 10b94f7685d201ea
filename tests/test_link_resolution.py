"""One link resolver (``store.links.resolve_link``): ``kaas lint``, ``lint --fix`` and the page
view agree on every link, so lint never reports (and ``--fix`` never deletes) a link that works
on the page, nor passes one the page shows as broken."""

from __future__ import annotations

from pathlib import Path

import pytest

from kb_ai.config import Settings
from kb_ai.navigate.citations import validate_citations
from kb_ai.navigate.records import AskResult, ReadPage
from kb_ai.navigate.save import save_answer
from kb_ai.quality.lint import LintConfig, LintContext, lint_kb, run_lint
from kb_ai.server.render import render_markdown
from kb_ai.store.articles import parse_article
from kb_ai.store.kb import KnowledgeBase

from helpers import write_page

REPO = Path(__file__).resolve().parents[1]

CONFIGURATION = """# Configuration

Settings come from kaas.toml and the environment. See [citations](../retrieval/citations.md) and
[the catalog form](retrieval/citations.md). A [missing page](gone.md), a [raw file](../../raw/ops/configuration.md)
and a [missing file](../../raw/nowhere.pdf).

Calcium: [Ca(2+)](i) rises when [Na+](o) falls; [H+](aq) too.
"""

CITATIONS = """# Citations

Answers cite pages. See [Configuration](ops/configuration.md), [again](../ops/configuration.md#settings),
[here](citations.md), [the wiki form](wiki/ops/configuration.md), [absolute](/wiki/ops/configuration.md),
[nowhere](ops/nowhere.md) and [elsewhere](https://example.org/a).
"""


@pytest.fixture
def generated_kb(tmp_path) -> KnowledgeBase:
    """A wiki whose pages link to each other every way (written as pages: a compile points the
    links of its sources at their articles, ``compile.source_links``), with raw/ beside it."""
    (tmp_path / "raw" / "ops").mkdir(parents=True)
    (tmp_path / "raw" / "retrieval").mkdir()
    (tmp_path / "raw" / "ops" / "configuration.md").write_text(CONFIGURATION)
    (tmp_path / "raw" / "retrieval" / "citations.md").write_text(CITATIONS)
    write_page(tmp_path / "wiki", "ops/configuration.md", "Configuration", "Settings.", CONFIGURATION, topic="ops")
    write_page(tmp_path / "wiki", "retrieval/citations.md", "Citations", "Answers cite pages.", CITATIONS,
               topic="retrieval")
    kb = KnowledgeBase(tmp_path)
    kb.reindex()
    assert {"ops/configuration.md", "retrieval/citations.md"} <= set(kb.catalog().by_path)
    return kb


def _body(wiki: Path, path: str) -> str:
    return parse_article((wiki / path).read_text(), path).body


def _lint_and_render_agree(kb: KnowledgeBase) -> int:
    """For every article: the pages lint resolves its links to, split into present and missing,
    are the pages the renderer links and marks broken. Returns how many page links were compared."""
    ctx = LintContext(kb, LintConfig())
    compared = 0
    for path, article in ctx.articles.items():
        rendered = render_markdown(article.body, from_path=path, exists=lambda p: p in ctx.articles)
        present, missing = set(), set()
        for _link, target in ctx.links[path]:
            if target.kind == "wiki" and target.wiki_path.endswith(".md"):
                (present if target.wiki_path in ctx.articles else missing).add(target.wiki_path)
                compared += 1
        assert set(rendered.links) == present, path
        assert set(rendered.broken_links) == missing, path
    return compared


def test_lint_and_render_agree_on_every_link_of_the_repository_wiki():
    assert _lint_and_render_agree(KnowledgeBase(REPO)) > 50


def test_lint_and_render_agree_on_every_link_of_a_generated_wiki(generated_kb):
    assert _lint_and_render_agree(generated_kb) >= 9


def test_lint_reports_only_the_links_that_are_broken_on_the_page(generated_kb):
    report = lint_kb(generated_kb)
    broken = sorted((f.path, f.message.split(" ", 3)[2]) for f in report.findings if f.check == "broken-link")
    assert broken == [("ops/configuration.md", "../../raw/nowhere.pdf"), ("ops/configuration.md", "gone.md"),
                      ("retrieval/citations.md", "ops/nowhere.md")], report.render_text()


def test_fix_keeps_a_working_catalog_form_link(generated_kb):
    """``[Configuration](ops/configuration.md)`` from ``retrieval/citations.md`` works on the page;
    lint reported it as a fixable broken link, and ``--fix`` deleted it."""
    rendered = render_markdown(_body(generated_kb.wiki_dir, "retrieval/citations.md"), from_path="retrieval/citations.md", exists=lambda p: p in generated_kb.catalog().by_path)
    assert '<a class="wiki-link" href="/wiki/ops/configuration.md" rel="noopener noreferrer">Configuration</a>' in rendered.html
    run_lint(Settings(kb=generated_kb.root), fix=True)
    citations = (generated_kb.wiki_dir / "retrieval" / "citations.md").read_text()
    assert "[Configuration](ops/configuration.md)" in citations
    assert "[the wiki form](wiki/ops/configuration.md)" in citations
    assert "[nowhere](ops/nowhere.md)" not in citations and "nowhere" in citations  # dead: its text stays
    configuration = (generated_kb.wiki_dir / "ops" / "configuration.md").read_text()
    assert "[the catalog form](retrieval/citations.md)" in configuration
    assert "[missing page](gone.md)" not in configuration


def test_scientific_notation_is_not_a_broken_link(tmp_path):
    wiki = tmp_path / "wiki"
    write_page(wiki, "bio/calcium.md", "Calcium", "A page.", "# Calcium\n\n[Ca(2+)](i) rises when "
               "[Na+](o) falls; [H+](aq) and [K+](e) too. See [sodium](sodium.md).", topic="bio")
    write_page(wiki, "bio/sodium.md", "Sodium", "A page.", "# Sodium\n\nSee [calcium](calcium.md).", topic="bio")
    kb = KnowledgeBase(tmp_path)
    kb.reindex()
    report = lint_kb(kb)
    assert [f for f in report.findings if f.severity != "info"] == [], report.render_text()
    assert report.exit_code == 0
    # ... and the page does not make it a link either.
    rendered = render_markdown(_body(wiki, "bio/calcium.md"), from_path="bio/calcium.md", exists=lambda p: p.startswith("bio/"))
    assert 'href="i"' not in rendered.html and rendered.links == ["bio/sodium.md"] and rendered.broken_links == []


def test_a_saved_answer_links_every_spelling_of_a_cited_page_so_lint_and_the_page_agree(sample_kb):
    """Citations accept ``./retrieval/citations.md`` and ``wiki/...#part`` (the one resolver); the
    saved answer rewrote only the exact catalog spelling, leaving links lint reported as broken."""
    answer = ("Citations are checked [Citations](./retrieval/citations.md#repair), see also "
              "[again](wiki/retrieval/citations.md) and [made up](retrieval/nowhere.md).")
    valid, invalid = validate_citations(answer, [ReadPage("retrieval/citations.md", "Citations", "text")])
    assert [c.path for c in valid] == ["retrieval/citations.md"] and invalid == ["retrieval/nowhere.md"]
    result = AskResult(answer=answer, citations=[c.as_dict() for c in valid],
                       pages=[{"path": "retrieval/citations.md", "title": "Citations"}])
    path = save_answer(sample_kb, "How are citations checked?", result)
    saved = (sample_kb.wiki_dir / path).read_text()
    assert "[Citations](../retrieval/citations.md#repair)" in saved
    assert "[again](../retrieval/citations.md)" in saved
    assert "[made up](retrieval/nowhere.md)" in saved  # not cited: left as the model wrote it
    broken = [f.message for f in lint_kb(sample_kb).findings if f.check == "broken-link" and f.path == path]
    assert broken == ["link to retrieval/nowhere.md (wiki/answers/retrieval/nowhere.md): no such article"]
    _lint_and_render_agree(sample_kb)


def test_a_selection_written_as_a_link_or_a_title_is_read_with_the_one_link_finder_and_title_identity(sample_kb):
    from kb_ai.navigate.select import resolve_paths

    catalog = sample_kb.catalog()
    selection = resolve_paths(["[Configuration](ops/configuration.md)", "[Citations](nowhere.md)",
                               "  configuration  ", "![Configuration](x.md)"], catalog, 5)
    assert selection.paths == ["ops/configuration.md", "retrieval/citations.md"]
    assert resolve_paths(["CONFIGURATION"], catalog, 5).paths == ["ops/configuration.md"]
