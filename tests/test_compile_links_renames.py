"""Issue 14, items 1, 4 and 6, through the compile service and ``kaas lint`` on real files:

* links between sources lead to the articles compiled from their targets (offline and with a
  model), anchors kept where the heading is, links to nothing compiled kept as text (a lint
  info); ``lint --fix`` repoints a dead link before it removes one;
* a renamed or moved source (the same text or revised), or one moved out of raw/ and back,
  keeps its article, its hand edits and the links to it; a pure rename costs no model call;
* sources with the same title in one folder make one article (a section each, or a trail for a
  later-dated revision), offline too, incrementally, hand edits kept.
"""

from __future__ import annotations

import posixpath
import shutil
from pathlib import Path

import pytest

from kb_ai.compile.pipeline import run_compile
from kb_ai.config import Settings
from kb_ai.quality.lint import lint_kb, run_lint
from kb_ai.store.articles import load_article
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.links import resolve_link
from kb_ai.store.markdown_text import find_links

from compile_checks import manifest
from fixtures.compile.fake_model import WRITE_MARKER, compile_responder
from helpers import llm_settings, write_files, write_page
from llm_fakes import FakeOpenAI, all_text, chat_json

INDEX = """# User guide

Start with the [compatibility notes](compatibility.md) and the [proxy settings](../ops/troubleshooting.md#proxies).
Deploy with the [deployment guide](./deploy/index.md) or the [Sphinx form](compatibility.html#python-versions),
the [folder form](deploy/) and a [gone section](../ops/troubleshooting.md#no-such-heading).
A [missing page](nothere.md), a [file outside raw](../../README.md) and an [archive](files/bundle.zip).
"""
COMPATIBILITY = """# Compatibility

This page lists the versions of Python the project supports today.

## Python versions

Python 3.9 and later versions of the interpreter are supported, see [the guide](index.md).
"""
DEPLOY = "# Deployment\n\nHow to deploy the service to production servers with care and a reverse proxy.\n"
TROUBLESHOOTING = """# Troubleshooting

Common problems and how to solve them in practice; back to the [user guide](../guide/index.md).

## Proxies

Set HTTP_PROXY when you sit behind a corporate proxy server or a firewall.
"""
SOURCES = {"guide/index.md": INDEX, "guide/compatibility.md": COMPATIBILITY, "guide/deploy/index.md": DEPLOY,
           "ops/troubleshooting.md": TROUBLESHOOTING}
HAND = "Dana: the proxy at the Berlin office needs a password."


def compile_offline(root: Path):
    return run_compile(Settings(kb=root), progress=False)


def compile_model(root: Path, responder=compile_responder):
    with FakeOpenAI() as fake:
        fake.add(responder, repeat=True)
        report = run_compile(llm_settings(root), progress=False)
        return report, fake.call_count


def linked_kb(root: Path) -> Path:
    write_files(root / "raw", SOURCES)
    return root


def links_of(root: Path, page: str) -> dict[str, tuple[str | None, str]]:
    """Link text -> (the page it leads to, anchor), for the links of ``page``."""
    wiki = root / "wiki"
    body = load_article(wiki, page).body
    found = {}
    for link in find_links(body):
        target = resolve_link(page, link.target, lambda rel: (wiki / rel).is_file())
        found[link.text] = (target.page if target.page and (wiki / target.page).is_file() else None, target.fragment)
    return found


def articles(root: Path) -> list[str]:
    wiki = root / "wiki"
    return sorted(p.relative_to(wiki).as_posix() for p in wiki.rglob("*.md")
                  if p.name not in ("master-index.md", "log.md", "topics.md"))


def broken(root: Path) -> list[str]:
    return [f.message for f in lint_kb(KnowledgeBase(root)).findings if f.check == "broken-link"]


def article_of(root: Path, source: str) -> str:
    return manifest(root)["sources"][source]["articles"][0]


# -- item 1: links survive the compile ---------------------------------------------------------------


def _assert_links_lead_to_articles(root: Path) -> None:
    guide, compat = article_of(root, "raw/guide/index.md"), article_of(root, "raw/guide/compatibility.md")
    trouble, deploy = article_of(root, "raw/ops/troubleshooting.md"), article_of(root, "raw/guide/deploy/index.md")
    links = links_of(root, guide)
    assert links["compatibility notes"] == (compat, "")
    assert links["proxy settings"] == (trouble, "proxies")  # across folders, the anchor kept
    assert links["deployment guide"] == (deploy, "") and links["folder form"] == (deploy, "")
    assert links["Sphinx form"] == (compat, "python-versions")  # a .html link to the .md source
    assert links["gone section"] == (trouble, "")  # no such heading: to the page
    for text in ("missing page", "file outside raw", "archive"):
        assert text not in links  # plain text now ...
        assert text in load_article(root / "wiki", guide).body  # ... and the text is kept
    assert links_of(root, trouble)["user guide"] == (guide, "")
    assert links_of(root, compat)["the guide"] == (guide, "")
    assert broken(root) == []


def test_links_between_sources_lead_to_the_articles_compiled_from_them_offline(tmp_path):
    root = linked_kb(tmp_path)
    report = compile_offline(root)
    assert report.failed == []
    _assert_links_lead_to_articles(root)
    infos = sorted(f.message for f in lint_kb(KnowledgeBase(root)).findings if f.check == "unlinked")
    assert infos == [
        "raw/guide/index.md links to ../../README.md ('file outside raw'), which was not compiled: kept as plain text",
        "raw/guide/index.md links to files/bundle.zip ('archive'), which was not compiled: kept as plain text",
        "raw/guide/index.md links to nothere.md ('missing page'), which was not compiled: kept as plain text"]
    assert all(f.severity == "info" for f in lint_kb(KnowledgeBase(root)).findings if f.check == "unlinked")


def test_links_between_sources_lead_to_their_articles_with_a_model_that_copies_or_invents_links(tmp_path):
    """The model is given the repointed text; what it writes on top (a source's own relative
    path, a raw/ path, a page it made up) is settled the same way before the file is written."""
    root = linked_kb(tmp_path)

    def inventive(body):
        reply = compile_responder({**body, "stream": False})  # (FakeOpenAI serves it as the stream asked for)
        if WRITE_MARKER in all_text(body) and "title=\"Troubleshooting\"" in all_text(body):
            import json

            data = json.loads(reply.json()["choices"][0]["message"]["content"])
            data["body"] += ("\n\nSee also [the guide, as the source wrote it](../guide/index.md), "
                             "[as a raw path](raw/guide/compatibility.md) and [a page it made up](made-up.md).\n")
            return chat_json(json.dumps(data))
        return reply

    report, _calls = compile_model(root, inventive)
    assert report.failed == [] and report.held == []
    _assert_links_lead_to_articles(root)
    trouble = article_of(root, "raw/ops/troubleshooting.md")
    links = links_of(root, trouble)
    assert links["the guide, as the source wrote it"] == (article_of(root, "raw/guide/index.md"), "")
    assert links["as a raw path"] == (article_of(root, "raw/guide/compatibility.md"), "")
    assert "a page it made up" not in links and "a page it made up" in load_article(root / "wiki", trouble).body


def test_lint_fix_points_a_dead_link_at_the_article_that_holds_its_target_before_removing_one(tmp_path):
    """A wiki compiled before links were repointed (source-relative links), with an article
    moved by hand since: ``--fix`` repoints what it can find and removes only the rest."""
    wiki = tmp_path / "wiki"
    write_files(tmp_path / "raw", {"guide/index.md": "# Guide\n\nSome text here.\n",
                                   "guide/deploy.md": DEPLOY, "ops/faq.md": "# FAQ\n\nQuestions.\n"})
    write_page(wiki, "guide/guide.md", "Guide", "The guide.",
               "# Guide\n\nSee [deploying](deploy.md), [the FAQ](../ops/faq.md#top), [Troubleshooting](trouble.md) "
               "and [nothing](nowhere.md).\n", topic="guide", sources=["raw/guide/index.md"])
    write_page(wiki, "help/deployment.md", "Deployment", "Deploying.", DEPLOY, topic="help",
               sources=["raw/guide/deploy.md"])  # moved here by hand from guide/deployment.md
    write_page(wiki, "ops/frequently-asked.md", "FAQ", "Questions.", "# FAQ\n\n## Top\n\nQuestions.\n",
               topic="ops", sources=["raw/ops/faq.md"])
    write_page(wiki, "ops/troubleshooting-notes.md", "Troubleshooting", "Problems.", "# Troubleshooting\n\nText.\n",
               topic="ops")
    KnowledgeBase(tmp_path).reindex()
    assert len(broken(tmp_path)) == 4
    report = run_lint(Settings(kb=tmp_path), fix=True)
    assert [f for f in report.findings if f.check == "broken-link"] == []
    links = links_of(tmp_path, "guide/guide.md")
    assert links["deploying"] == ("help/deployment.md", "")  # by the source it names (sources:)
    assert links["the FAQ"] == ("ops/frequently-asked.md", "top")
    assert links["Troubleshooting"] == ("ops/troubleshooting-notes.md", "")  # the one article of that title
    assert "nothing" not in links and "and nothing." in load_article(wiki, "guide/guide.md").body
    assert any("pointed 3 dead links" in line for line in report.fixed), report.fixed


# -- item 4: renames and moves are not new documents ------------------------------------------------


def _compiled_with_hand_edit(tmp_path: Path) -> tuple[Path, Path]:
    root = linked_kb(tmp_path)
    compile_offline(root)
    page = root / "wiki" / article_of(root, "raw/ops/troubleshooting.md")
    page.write_text(page.read_text() + f"\n{HAND}\n")
    return root, page


def _same_wiki(root: Path, before: list[str], page: Path) -> None:
    assert articles(root) == before, "no -2 copy, no article lost"
    assert not any(p.endswith("-2.md") for p in articles(root))
    assert HAND in page.read_text()
    report = lint_kb(KnowledgeBase(root))
    assert [f.message for f in report.findings if f.severity == "error"] == []
    assert [f for f in report.findings if f.check == "no-sources"] == []
    guide = article_of(root, "raw/guide/index.md")
    assert links_of(root, guide)["proxy settings"][0] == page.relative_to(root / "wiki").as_posix()


@pytest.mark.parametrize("new", ["ops/trouble.md", "help/troubleshooting.md", "help/faq/trouble-shooting.md"])
def test_a_renamed_or_moved_source_keeps_its_article_and_hand_edits(tmp_path, new):
    root, page = _compiled_with_hand_edit(tmp_path)
    before = articles(root)
    target = root / "raw" / new
    target.parent.mkdir(parents=True, exist_ok=True)
    (root / "raw" / "ops" / "troubleshooting.md").rename(target)
    report = compile_offline(root)
    assert report.created == [] and report.orphaned == []
    assert load_article(root / "wiki", page.relative_to(root / "wiki").as_posix()).sources == [f"raw/{new}"]
    _same_wiki(root, before, page)
    # the guide's source now links to the new name, as a documentation site's would: the same article
    index = root / "raw" / "guide" / "index.md"
    index.write_text(index.read_text().replace("../ops/troubleshooting.md", posixpath.relpath(new, "guide")))
    report = compile_offline(root)
    assert report.created == [] and articles(root) == before
    assert links_of(root, article_of(root, "raw/guide/index.md"))["proxy settings"] == (
        page.relative_to(root / "wiki").as_posix(), "proxies")


def test_a_renamed_and_revised_source_keeps_its_article(tmp_path):
    root = linked_kb(tmp_path)
    compile_offline(root)
    page = root / "wiki" / article_of(root, "raw/ops/troubleshooting.md")
    before = articles(root)
    old = root / "raw" / "ops" / "troubleshooting.md"
    (root / "raw" / "ops" / "network-problems.md").write_text(
        old.read_text().replace("or a firewall", "or a firewall that inspects TLS"))
    old.unlink()
    index = root / "raw" / "guide" / "index.md"  # changed in the same run, its link to the old name kept
    index.write_text(index.read_text().replace("Start with", "Begin with"))
    report = compile_offline(root)
    assert report.created == [] and report.orphaned == []
    assert sorted(report.updated) == sorted([page.relative_to(root / "wiki").as_posix(), article_of(root, "raw/guide/index.md")])
    assert "firewall that inspects TLS" in page.read_text()
    assert load_article(root / "wiki", page.relative_to(root / "wiki").as_posix()).sources == ["raw/ops/network-problems.md"]
    assert articles(root) == before
    assert links_of(root, article_of(root, "raw/guide/index.md"))["proxy settings"] == (
        page.relative_to(root / "wiki").as_posix(), "proxies")  # the link to the old name follows
    assert broken(root) == []


def test_a_renamed_and_revised_source_with_a_hand_edited_article_is_merged_and_renamed(tmp_path):
    root, page = _compiled_with_hand_edit(tmp_path)
    before = articles(root)
    old = root / "raw" / "ops" / "troubleshooting.md"
    (root / "raw" / "ops" / "network-problems.md").write_text(old.read_text().replace("firewall", "firewall (TLS)"))
    old.unlink()
    report = compile_offline(root)
    assert report.created == [] and report.orphaned == []
    # Offline, the revision is merged around the hand edit (it used to be held, exit 1 forever).
    rel = page.relative_to(root / "wiki").as_posix()
    assert report.held == [] and report.updated == [rel] and "firewall (TLS)" in page.read_text()
    assert load_article(root / "wiki", rel).sources == ["raw/ops/network-problems.md"]
    _same_wiki(root, before, page)


@pytest.mark.parametrize("back", ["ops/troubleshooting.md", "archive/troubleshooting.md"])
def test_a_source_moved_out_of_raw_and_back_gets_its_article_again(tmp_path, back):
    root, page = _compiled_with_hand_edit(tmp_path)
    before = articles(root)
    outside = tmp_path.parent / f"{tmp_path.name}-outside.md"
    shutil.move(root / "raw" / "ops" / "troubleshooting.md", outside)
    report = compile_offline(root)
    assert report.orphaned == [page.relative_to(root / "wiki").as_posix()]
    target = root / "raw" / back
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(outside, target)
    report = compile_offline(root)
    assert report.created == [] and report.orphaned == []
    assert load_article(root / "wiki", page.relative_to(root / "wiki").as_posix()).sources == [f"raw/{back}"]
    _same_wiki(root, before, page)


def test_a_source_moved_out_and_back_revised_in_its_place_gets_its_article_again(tmp_path):
    root = linked_kb(tmp_path)
    compile_offline(root)
    page = root / "wiki" / article_of(root, "raw/ops/troubleshooting.md")
    source = root / "raw" / "ops" / "troubleshooting.md"
    text = source.read_text()
    source.unlink()
    compile_offline(root)
    source.write_text(text.replace("corporate proxy server", "corporate proxy server (squid)"))
    report = compile_offline(root)
    assert report.created == [] and report.orphaned == []
    assert "(squid)" in page.read_text() and articles(root) == sorted(set(articles(root)))
    assert not any(p.endswith("-2.md") for p in articles(root))


def test_a_pure_rename_costs_no_model_call_and_keeps_the_model_article(tmp_path):
    root = linked_kb(tmp_path)
    report, calls = compile_model(root)
    assert report.failed == [] and calls > 0
    page = article_of(root, "raw/ops/troubleshooting.md")
    before = articles(root)
    (root / "raw" / "ops" / "troubleshooting.md").rename(root / "raw" / "ops" / "trouble.md")
    report, calls = compile_model(root)
    assert calls == 0 and report.created == [] and report.orphaned == []
    assert articles(root) == before and article_of(root, "raw/ops/trouble.md") == page
    assert links_of(root, article_of(root, "raw/guide/index.md"))["proxy settings"][0] == page


# -- item 6: same subject, one article ---------------------------------------------------------------


def paragraph(n: int, words: str) -> str:
    return f"---\ntitle: 2018 Winter Olympics\n---\nParagraph {n}: {words}.\n"


OLYMPICS = {
    "olympics/games-1.md": paragraph(1, "the games were held in Pyeongchang, South Korea, in February"),
    "olympics/games-2.md": paragraph(2, "Norway won the most medals of all the competing nations"),
    "olympics/games-3.md": paragraph(3, "North and South Korea marched together at the opening ceremony"),
}


def test_sources_with_one_title_in_one_folder_make_one_article_offline(tmp_path):
    write_files(tmp_path / "raw", OLYMPICS)
    write_files(tmp_path / "raw", {  # the same title in two folders: two subjects, two articles
        "docs/api/overview.md": "# Overview\n\nThe HTTP API takes JSON requests and answers with JSON documents.\n",
        "docs/cli/overview.md": "# Overview\n\nThe command line tool reads a config file and prints tables.\n",
    })
    report = compile_offline(tmp_path)
    assert sorted(report.created) == ["docs/cli-overview.md", "docs/overview.md", "olympics/2018-winter-olympics.md"]
    article = load_article(tmp_path / "wiki", "olympics/2018-winter-olympics.md")
    assert article.sources == sorted(f"raw/{p}" for p in OLYMPICS)
    for words in ("Pyeongchang", "Norway won", "marched together"):
        assert article.body.count(words) == 1
    assert article.body.count("\n## ") == 2  # a section for each source after the first
    # incremental: nothing changed, nothing rewritten
    text = (tmp_path / "wiki" / "olympics" / "2018-winter-olympics.md").read_text()
    again = compile_offline(tmp_path)
    assert again.created == [] and again.updated == []
    assert (tmp_path / "wiki" / "olympics" / "2018-winter-olympics.md").read_text() == text
    # one source revised: only its section changes (with a trail line); a new one joins; a hand edit stays
    file = tmp_path / "wiki" / "olympics" / "2018-winter-olympics.md"
    file.write_text(file.read_text() + f"\n{HAND}\n")
    write_files(tmp_path / "raw", {"olympics/games-4.md": paragraph(4, "the closing ceremony was on the 25th")})
    report = compile_offline(tmp_path)
    assert report.updated == ["olympics/2018-winter-olympics.md"] and report.created == [] and report.held == []
    body = load_article(tmp_path / "wiki", "olympics/2018-winter-olympics.md").body
    assert HAND in body and "closing ceremony" in body and body.count("Pyeongchang") == 1
    assert articles(tmp_path) == ["docs/cli-overview.md", "docs/overview.md", "olympics/2018-winter-olympics.md"]


def test_a_revised_source_of_a_shared_article_changes_its_own_section(tmp_path):
    write_files(tmp_path / "raw", OLYMPICS)
    compile_offline(tmp_path)
    write_files(tmp_path / "raw", {"olympics/games-2.md": paragraph(2, "Norway won 39 medals, the most of any nation")})
    report = compile_offline(tmp_path)
    assert report.updated == ["olympics/2018-winter-olympics.md"]
    body = load_article(tmp_path / "wiki", "olympics/2018-winter-olympics.md").body
    assert "Norway won 39 medals" in body and "Pyeongchang" in body and "marched together" in body
    assert body.index("Pyeongchang") < body.index("Norway won 39") < body.index("marched together")
    assert "[Superseded" in body and "Norway won the most medals" in body.split("[Superseded", 1)[1]


def test_a_later_dated_source_with_the_same_title_is_a_revision_whatever_its_similarity(tmp_path):
    write_files(tmp_path / "raw", {
        "plans/plan-v1.md": "---\ntitle: Release plan\ndate: 2024-01-10\n---\n# Release plan\n\n"
                            "We ship version one in March with four engineers.\n",
        "plans/plan-v2.md": "---\ntitle: Release plan\ndate: 2024-02-20\n---\n# Release plan\n\n"
                            "The launch moved to May after the beta; hiring doubled the team.\n",
    })
    report = compile_offline(tmp_path)
    assert report.created == ["plans/release-plan.md"]
    article = load_article(tmp_path / "wiki", "plans/release-plan.md")
    assert article.sources == ["raw/plans/plan-v1.md", "raw/plans/plan-v2.md"]
    lead = article.body.split("[Superseded", 1)[0]
    assert "moved to May" in lead and "March" not in lead  # the later one is what the article says
    assert '[Superseded 2024-02-20 by raw/plans/plan-v2.md: earlier "We ship version one in March' in article.body


def test_same_title_sources_make_one_article_with_a_model_and_keep_links(tmp_path):
    write_files(tmp_path / "raw", {**OLYMPICS, "olympics/medals.md": "# Medal table\n\nSee the "
                                   "[games](games-2.md) for who won what at the games in Korea.\n"})
    report, calls = compile_model(tmp_path)
    assert calls > 0 and report.failed == []
    assert articles(tmp_path) == ["olympics/2018-winter-olympics.md", "olympics/medal-table.md"]
    assert links_of(tmp_path, "olympics/medal-table.md")["games"] == ("olympics/2018-winter-olympics.md", "")
    assert load_article(tmp_path / "wiki", "olympics/2018-winter-olympics.md").sources == sorted(
        f"raw/{p}" for p in OLYMPICS)


# -- on real documentation ---------------------------------------------------------------------------

# ../shared/eval-data/realdocs-dev beside the repository (or beside the folder of its worktree)
REALDOCS = next((folder / "shared" / "eval-data" / "realdocs-dev" for folder in Path(__file__).resolve().parents
                 if (folder / "shared" / "eval-data" / "realdocs-dev").is_dir()), Path("/nonexistent"))


@pytest.mark.slow
@pytest.mark.skipif(not (REALDOCS / "uvicorn").is_dir(), reason="realdocs-dev is not here")
def test_real_mkdocs_links_lead_to_their_articles_and_survive_renames(tmp_path):
    shutil.copytree(REALDOCS / "uvicorn", tmp_path / "raw" / "uvicorn")
    for file in (tmp_path / "raw").rglob("*"):
        file.chmod(0o755 if file.is_dir() else 0o644)
    compile_offline(tmp_path)
    assert broken(tmp_path) == []
    quickstart = article_of(tmp_path, "raw/uvicorn/index.md") if "raw/uvicorn/index.md" in manifest(tmp_path)["sources"] else None
    links = {link.target for page in articles(tmp_path)
             for link in find_links(load_article(tmp_path / "wiki", page).body)}
    assert not any(t.endswith(("index.md", "settings.md#")) and t.startswith(("deployment/", "concepts/")) for t in links)
    before = articles(tmp_path)
    renamed = sorted(p for p in (tmp_path / "raw" / "uvicorn").rglob("*.md"))[:5]
    for i, file in enumerate(renamed):
        file.rename(file.with_name(f"renamed-{i}-{file.name}"))
    report = compile_offline(tmp_path)
    assert report.created == [] and report.orphaned == [] and articles(tmp_path) == before
    assert broken(tmp_path) == []
    assert quickstart is None or (tmp_path / "wiki" / quickstart).is_file()


def test_a_link_kept_as_text_becomes_a_link_again_when_its_target_is_compiled(tmp_path):
    """The guide links to a page that is not there yet (added later, or its plan failed): the
    link is kept as text; once the page is compiled, the link is made again, without the
    guide's source changing."""
    root = linked_kb(tmp_path)
    later = tmp_path.parent / f"{tmp_path.name}-compatibility.md"
    shutil.move(root / "raw" / "guide" / "compatibility.md", later)
    compile_offline(root)
    guide = article_of(root, "raw/guide/index.md")
    assert "compatibility notes" not in links_of(root, guide)
    page = root / "wiki" / guide
    page.write_text(page.read_text() + f"\n{HAND}\n")  # a hand edit elsewhere in it stays
    shutil.move(later, root / "raw" / "guide" / "compatibility.md")
    report = compile_offline(root)
    compat = article_of(root, "raw/guide/compatibility.md")
    assert report.created == [compat] and guide in report.updated
    links = links_of(root, guide)
    assert links["compatibility notes"] == (compat, "") and links["Sphinx form"] == (compat, "python-versions")
    assert HAND in page.read_text()
    infos = [f.message for f in lint_kb(KnowledgeBase(root)).findings if f.check == "unlinked"]
    assert len(infos) == 3 and not any("compatibility" in m for m in infos)
    again = compile_offline(root)
    assert again.updated == [] and again.created == []


def test_a_shared_article_is_stable_under_a_full_compile_and_without_compile_state(tmp_path):
    write_files(tmp_path / "raw", OLYMPICS)
    compile_offline(tmp_path)
    file = tmp_path / "wiki" / "olympics" / "2018-winter-olympics.md"
    assert load_article(tmp_path / "wiki", "olympics/2018-winter-olympics.md").sources == sorted(
        f"raw/{p}" for p in OLYMPICS)
    text = file.read_text()
    full = run_compile(Settings(kb=tmp_path), progress=False, full=True)
    assert full.updated == [] and full.held == [] and file.read_text() == text
    shutil.rmtree(tmp_path / ".kaas")  # the state lost: the article is found again, not rewritten
    report = compile_offline(tmp_path)
    assert report.created == [] and report.held == [] and file.read_text() == text
