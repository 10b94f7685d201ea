"""Saved answers never carry what a reader may not read into what they may: a saved answer is at
least as restricted as every page read for it (cited or not), now and after those pages change.
And neither saving nor editing widens who may read anything."""

from __future__ import annotations

import json

import frontmatter
import pytest
from click.testing import CliRunner
from mcp import Client
from starlette.testclient import TestClient

from kb_ai.cli import cli
from kb_ai.config import Settings
from kb_ai.navigate.records import AskResult
from kb_ai.navigate.save import save_answer
from kb_ai.server.app import create_app
from kb_ai.server.mcp import build_mcp_server
from kb_ai.store.access import OWNER, Reader
from kb_ai.store.catalog import Catalog, CatalogEntry, parse_master_index, render_master_index
from kb_ai.store.kb import KnowledgeBase

from access_twins import ALICE, BOB, OPS, USERS_TOML
from helpers import SAMPLE_PAGES, llm_settings, write_page
from llm_fakes import API_BASE, MODEL, FakeOpenAI

ALICE_READER = Reader("alice", frozenset({"payroll"}))
BOB_READER = Reader("bob", frozenset({"eng"}))
PUBLIC = "retrieval/citations.md"
HIDDEN = "hr/salaries.md"


@pytest.fixture
def kb(make_kb) -> KnowledgeBase:
    return make_kb((HIDDEN, "Salary bands", "Pay bands.", "# Salary bands\n\nThe top band pays 91,000 a year.",
                    {"topic": "hr", "access": ["payroll"]}), toml=USERS_TOML)


def client(kb: KnowledgeBase, token: str) -> TestClient:
    return TestClient(create_app(Settings(kb=kb.root), mcp=False), headers={"Authorization": f"Bearer {token}"})


def sees(kb: KnowledgeBase, token: str, path: str) -> bool:
    """Whether the reader of ``token`` finds ``path`` anywhere: listed, counted, readable."""
    with client(kb, token) as c:
        listed = path in c.get("/api/index").text or path in c.get("/wiki/").text
        readable = c.get(f"/api/pages/{path}").status_code == 200
    assert listed == readable, (path, listed, readable)
    return readable


def _model_reads_hidden_cites_public(fake: FakeOpenAI) -> None:
    # The model reads both pages it is given and cites only the public one.
    fake.reply_stream(["Citations are validated [Citations](retrieval/citations.md)."],
                      when="You answer questions", repeat=True)


# -- pages read, not only cited ------------------------------------------------------------------


def test_an_answer_that_read_a_hidden_page_is_hidden_whatever_it_cites(kb, monkeypatch):
    for name, value in {"KAAS_MODEL": MODEL, "KAAS_API_BASE": API_BASE, "KAAS_API_KEY": "k",
                        "KAAS_CACHE": "false", "KAAS_MAX_RETRIES": "0"}.items():
        monkeypatch.setenv(name, value)
    saved = []
    with FakeOpenAI() as fake:
        _model_reads_hidden_cites_public(fake)
        out = CliRunner().invoke(cli, ["--kb", str(kb.root), "ask", "How are the bands validated?", "--page", HIDDEN,
                                       "--page", PUBLIC, "--user", "alice", "--save", "--json"])
        assert out.exit_code == 0, out.output
        data = json.loads(out.stdout)
        assert [c["path"] for c in data["citations"]] == [PUBLIC] and {p["path"] for p in data["pages"]} == {HIDDEN, PUBLIC}
        saved.append(data["saved_path"])

    with client(kb, ALICE) as alice:  # the chat UI's Save button: the pages read come with it
        response = alice.post("/api/answers", json={
            "question": "How are the bands validated?", "answer": "Validated [Citations](retrieval/citations.md).",
            "citations": [PUBLIC], "pages": [HIDDEN, PUBLIC], "mode": "llm"})
        assert response.status_code == 201, response.text
        saved.append(response.json()["path"])

    assert len(set(saved)) == 2
    for path in saved:
        assert sees(kb, ALICE, path) and not sees(kb, BOB, path)
        post = frontmatter.load(kb.wiki_dir / path)
        assert post["citations"] == [PUBLIC] and HIDDEN in post["read"]
        assert post["access"] == ["payroll"]


async def test_mcp_ask_and_save_derives_access_from_the_pages_it_read(kb):
    settings = llm_settings(kb.root)
    with FakeOpenAI() as fake:
        _model_reads_hidden_cites_public(fake)
        async with Client(build_mcp_server(settings, stdio_reader=ALICE_READER)) as alice:
            result = await alice.call_tool("ask_and_save", {"question": "How are the bands validated?",
                                                            "paths": [HIDDEN, PUBLIC]})
    path = result.structured_content["saved_path"]
    assert path and [c["path"] for c in result.structured_content["citations"]] == [PUBLIC]
    assert sees(kb, ALICE, path) and not sees(kb, BOB, path)


# -- later changes of the pages an answer was made from --------------------------------------------


def test_restricting_a_page_later_hides_the_answers_made_from_it(kb):
    result = AskResult(answer="Only pages read count [Citations](retrieval/citations.md).",
                       citations=[{"path": PUBLIC, "title": "Citations"}], pages=[{"path": PUBLIC, "title": "Citations"}],
                       mode="offline")
    path = save_answer(kb, "How are citations validated?", result, reader=OWNER)
    assert "access" not in frontmatter.load(kb.wiki_dir / path).metadata  # made from public pages: public
    assert sees(kb, BOB, path)

    page = kb.wiki_dir / PUBLIC
    with client(kb, BOB) as bob:
        assert bob.get("/api/index").json()["articles"] == len(SAMPLE_PAGES) + 1  # the catalog is loaded now
        page.write_text(page.read_text().replace("title: Citations", "title: Citations\naccess: [payroll]"))
        # No re-index yet, the server's catalog is stale: the saved copy's text is refused at once,
        # exactly like the page it was made from.
        assert bob.get(f"/api/pages/{path}").json() == bob.get("/api/pages/answers/nowhere.md").json() | {
            "error": {"code": "page_not_found", "message": f"no page {path!r} in the wiki"}}
        assert bob.get(f"/api/pages/{path}").status_code == 404
        asked = bob.post("/api/chat", json={"question": "How are citations validated?"}).text
        assert "Only pages read count" not in asked
    # A fresh load of the catalog (any new process; the server's watcher re-indexes) lists it no more.
    assert not sees(kb, BOB, path) and sees(kb, ALICE, path)
    bob_cli = CliRunner().invoke(cli, ["--kb", str(kb.root), "ask", "How are citations validated?", "--user", "bob", "--json"])
    assert bob_cli.exit_code == 0, bob_cli.output
    assert path not in bob_cli.stdout and "Only pages read count" not in bob_cli.stdout
    kb.reindex()
    assert not sees(kb, BOB, path) and sees(kb, ALICE, path)


def test_an_answer_made_from_a_page_that_is_gone_is_for_admins_only(kb):
    result = AskResult(answer="x [Citations](retrieval/citations.md)", citations=[{"path": PUBLIC, "title": "Citations"}],
                       pages=[{"path": PUBLIC, "title": "Citations"}, {"path": "ops/deployment.md", "title": "Deployment"}])
    path = save_answer(kb, "Where is it deployed?", result, reader=OWNER)
    assert sees(kb, BOB, path)
    (kb.wiki_dir / "ops" / "deployment.md").unlink()
    kb.reindex()
    assert not sees(kb, BOB, path) and not sees(kb, ALICE, path) and sees(kb, OPS, path)


def test_an_answer_made_from_a_hidden_answer_is_hidden(kb):
    # An earlier answer, with no access of its own, made from the hidden page (as saved before
    # answers recorded an access floor, or written by hand).
    write_page(kb.wiki_dir, "answers/earlier.md", "Earlier answer", "An earlier answer.", "The top band is high.",
               topic="answers", kind="answer", citations=[PUBLIC], read=[HIDDEN, PUBLIC])
    kb.reindex()
    assert not sees(kb, BOB, "answers/earlier.md")
    result = AskResult(answer="As found before [Citations](retrieval/citations.md).",
                       citations=[{"path": PUBLIC, "title": "Citations"}],
                       pages=[{"path": "answers/earlier.md", "title": "Earlier answer", "kind": "answer"},
                              {"path": PUBLIC, "title": "Citations"}])
    path = save_answer(kb, "What did we find before?", result, reader=OWNER)
    assert frontmatter.load(kb.wiki_dir / path)["read"] == ["answers/earlier.md", PUBLIC]
    assert not sees(kb, BOB, path) and sees(kb, ALICE, path)
    # Bob cannot file an answer made from a page he cannot read: refused exactly as a missing page.
    with client(kb, BOB) as bob:
        body = {"question": "q", "answer": "a [Citations](retrieval/citations.md)", "citations": [PUBLIC]}
        hidden = bob.post("/api/answers", json={**body, "pages": ["answers/earlier.md"]})
        missing = bob.post("/api/answers", json={**body, "pages": ["answers/nowhere.md"]})
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["error"]["message"].replace("earlier", "X") == missing.json()["error"]["message"].replace("nowhere", "X")


# -- editing cannot widen ------------------------------------------------------------------------


def test_readers_cannot_change_what_a_saved_answer_was_made_from(kb):
    path = "answers/what-is-public.md"
    write_page(kb.wiki_dir, path, "What is public?", "Saved answer.", "# What is public?\n\nNavigation only.",
               topic="answers", kind="answer", citations=[PUBLIC], read=[PUBLIC, "ops/deployment.md"])
    kb.reindex()
    with client(kb, BOB) as bob, client(kb, OPS) as ops:
        page = bob.get(f"/api/pages/{path}").json()
        text, version = page["markdown"], page["version"]
        for widened in (text.replace("read: [retrieval/citations.md, ops/deployment.md]\n", ""),
                        text.replace("kind: answer", "kind: article"),
                        text.replace("citations: [retrieval/citations.md]", "citations: [ops/configuration.md]")):
            assert widened != text
            response = bob.put(f"/api/pages/{path}", json={"markdown": widened, "version": version})
            assert response.status_code == 403, response.text
        edited = text.replace("Navigation only", "Navigation only (checked)")
        assert bob.put(f"/api/pages/{path}", json={"markdown": edited, "version": version}).status_code == 200
        fresh = ops.get(f"/api/pages/{path}").json()
        assert ops.put(f"/api/pages/{path}", json={"markdown": fresh["markdown"].replace("kind: answer", "kind: article"),
                                                   "version": fresh["version"]}).status_code == 200


# -- the catalog's rules ------------------------------------------------------------------------------


def test_no_summary_can_bend_a_pages_rule_in_the_catalog(kb):
    # A summary (text from a source, through a model) that tries to widen a restricted page's rule.
    write_page(kb.wiki_dir, "hr/bent.md", "Bent", "Bands <!-- access: eng, ", "The top band pays 91,000.",
               topic="hr", access=["payroll"])
    kb.reindex()
    assert not sees(kb, BOB, "hr/bent.md") and sees(kb, ALICE, "hr/bent.md")
    assert kb.catalog().get("hr/bent.md").access == ("payroll",)


def test_the_catalog_keeps_what_answers_were_made_from(kb):
    hostile = ("a b.md", "x-->y.md", "50%.md", "c,d.md", "e;f.md", "g>h.md")
    entries = [CatalogEntry("answers/a.md", "A", "s", "answers", depends=("ops/x.md", *hostile)),
               CatalogEntry("answers/b.md", "B", "s <!-- access: eng, ", "answers", ("payroll",), depends=("ops/x.md",)),
               CatalogEntry("hr/c.md", "C", "Bands <!-- access: eng, ", "hr", ("payroll",)),
               CatalogEntry("hr/d.md", "D", "x --> <!-- depends: -->", "hr", None)]
    parsed = parse_master_index(render_master_index(Catalog(entries))).entries
    assert {e.path: (e.access, e.depends) for e in parsed} == {e.path: (e.access, e.depends) for e in entries}
    # Who may read them: answers/a.md was made from pages that do not exist: admins only.
    catalog = Catalog(parsed)
    assert catalog.visible_to(BOB_READER).by_path.keys() == {"hr/d.md"}
    assert catalog.visible_to(OWNER) is catalog


def test_saving_a_page_returns_only_its_own_warnings(kb):
    write_page(kb.wiki_dir, "faq.md", "FAQ", None, "# FAQ\n\nQuestions people ask.")
    write_page(kb.wiki_dir, "finance/faq.md", None, None, "# Fizzbang finance FAQ\n\nSecret questions.",
               access=["payroll"])
    kb.reindex()
    with client(kb, BOB) as bob:
        page = bob.get("/api/pages/faq.md").json()
        response = bob.put("/api/pages/faq.md", json={"markdown": page["markdown"].replace("people", "readers"),
                                                      "version": page["version"]})
    assert response.status_code == 200
    data = response.json()
    assert "Fizzbang" not in response.text and "finance" not in response.text
    assert data["index_warnings"] == ["faq.md: no summary in frontmatter; using the first sentence"]


def test_answers_made_from_each_other_in_a_cycle_are_for_admins_only(kb):
    for name, other in (("a", "b"), ("b", "a")):
        write_page(kb.wiki_dir, f"answers/{name}.md", f"Answer {name}", "An answer.", "Text.", topic="answers",
                   kind="answer", citations=[PUBLIC], read=[f"answers/{other}.md", PUBLIC])
    kb.reindex()
    for name in ("a", "b"):
        assert not sees(kb, BOB, f"answers/{name}.md") and not sees(kb, ALICE, f"answers/{name}.md")
        assert sees(kb, OPS, f"answers/{name}.md")


def test_lint_reports_a_catalog_that_misstates_what_an_answer_was_made_from(kb):
    from kb_ai.quality.lint import run_lint

    write_page(kb.wiki_dir, "answers/x.md", "X", "An answer.", "Text.", topic="answers", kind="answer",
               citations=[PUBLIC], read=[HIDDEN, PUBLIC])
    kb.reindex()
    index = kb.master_index.read_text()
    assert f"<!-- depends: {HIDDEN} {PUBLIC} -->" in index
    kb.master_index.write_text(index.replace(f"<!-- depends: {HIDDEN} {PUBLIC} -->", f"<!-- depends: {PUBLIC} -->"))
    drift = [f for f in run_lint(Settings(kb=kb.root)).findings if f.check == "index-drift" and f.path == "answers/x.md"]
    assert drift and "made from ['retrieval/citations.md'] in the catalog" in drift[0].message
