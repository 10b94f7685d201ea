"""Keyword ranking is no oracle on hidden words: the statistics a reader's ranking uses (document
frequencies, average length, vocabulary) come only from the pages that reader may read.

Two wikis hold the same public pages and the same number of hidden pages; in one the hidden
pages are full of the words bob asks about (and of the probe word he planted in a public page he
may edit), in the other they are not. Which pages bob gets, in which order, with which scores,
the offline answer and its "No page of the wiki mentions" notice, and what the model is shown
must be identical in both.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from kb_ai.config import Settings
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.records import AskRequest
from kb_ai.offline.lexical import LexicalIndex
from kb_ai.server.app import create_app
from kb_ai.store.access import OWNER, Reader
from kb_ai.store.kb import KnowledgeBase

from access_twins import BOB, USERS_TOML
from helpers import build_kb, llm_settings
from llm_fakes import FakeOpenAI, all_text

BOB_READER = Reader("bob", frozenset({"eng"}))
PROBE = "quibblesnatch"
QUESTIONS = (f"{PROBE} server", f"{PROBE} reverse proxy", f"{PROBE}", "reverse proxy deployment",
             "citations validated model", "zorbulent proxy", "zorbulent salary", "offline mode variable",
             # a word no page of bob's holds, whose longer form ("zorbulent") only hidden pages hold:
             # the abstention verdict's word-form check reads bob's best matches, never those
             "zorbul proxy deployment")
HIDDEN_PAGES = 12


def _wiki(root: Path, hidden_words: str) -> KnowledgeBase:
    return build_kb(root, *[(f"hr/page-{n}.md", f"Payroll note {n}", f"Payroll note {n}.", f"# Note {n}\n\n{hidden_words}",
                             {"topic": "hr", "access": ["payroll"]}) for n in range(HIDDEN_PAGES)], toml=USERS_TOML)


@pytest.fixture
def twins(tmp_path):
    """(hidden pages full of bob's query words, hidden pages without them)."""
    loud = f"{PROBE} {PROBE} {PROBE}. The reverse proxy, deployment, citations, model, zorbulent salary, offline mode."
    quiet = "Ledger entries and invoices. Nothing else is written here at all."
    return _wiki(tmp_path / "loud", loud), _wiki(tmp_path / "quiet", quiet)


def _plant_probe(kb: KnowledgeBase) -> None:
    """Bob may edit public pages: he plants the probe word in one, through the API."""
    with TestClient(create_app(Settings(kb=kb.root), mcp=False), headers={"Authorization": f"Bearer {BOB}"}) as bob:
        page = bob.get("/api/pages/ops/configuration.md").json()
        edited = page["markdown"].replace("selects the language model.", f"selects the language model. {PROBE}.")
        edited = edited.replace("title: Configuration", f"title: Configuration {PROBE}")
        assert bob.put("/api/pages/ops/configuration.md", json={"markdown": edited, "version": page["version"]}).status_code == 200


async def _what_bob_gets(kb: KnowledgeBase) -> list:
    service = build_service(Settings(kb=kb.root))
    view = service.kb.catalog().visible_to(BOB_READER)
    index = service.navigator.lexical.get(view)
    seen = []
    for question in QUESTIONS:
        hits = [(h.path, h.score) for h in index.search(question, 10)]
        result = await ask(service, AskRequest(question=question, suggest=True, reader=BOB_READER))
        seen.append((question, hits, index.known_terms(question), result.pages, result.answer, result.citations,
                     result.suggestions, result.notices))
    return seen


async def test_what_bob_gets_back_does_not_depend_on_words_in_pages_he_cannot_read(twins):
    for kb in twins:
        _plant_probe(kb)
    loud, quiet = [await _what_bob_gets(kb) for kb in twins]
    for got_loud, got_quiet in zip(loud, quiet, strict=True):
        assert got_loud == got_quiet, got_loud[0]
    by_question = {item[0]: item for item in loud}
    assert by_question[PROBE][1][0][0] == "ops/configuration.md"  # the planted word is found where bob put it
    assert "No page of the wiki mentions: zorbulent." in by_question["zorbulent proxy"][7]
    # The owner ranks over everything: the hidden pages do count there.
    owner = build_service(Settings(kb=twins[0].root))
    assert any(h.path.startswith("hr/") for h in owner.navigator.lexical.get(owner.kb.catalog()).search(PROBE, 20))


async def test_the_page_set_does_not_change_when_hidden_pages_hold_the_probe_word(twins):
    """The yes/no oracle: bob plants a word and watches whether his result set changes."""
    for kb in twins:
        _plant_probe(kb)
    sets = []
    for kb in twins:
        result = await ask(build_service(Settings(kb=kb.root)), AskRequest(question=f"{PROBE} server",
                                                                           reader=BOB_READER))
        # Read, or (no page holds both words: the wiki does not cover it) named as related.
        sets.append([p["path"] for p in result.pages + result.related])
    assert sets[0] == sets[1]
    assert "ops/configuration.md" in sets[0] and "ops/deployment.md" in sets[0]


@pytest.mark.parametrize("navigation", ["shortlist", "topics"])
async def test_the_model_is_shown_the_same_for_bob_whatever_hidden_pages_say(twins, navigation):
    prompts = []
    for kb in twins:
        _plant_probe(kb)
        settings = llm_settings(kb.root, select_budget=40, navigation=navigation)
        with FakeOpenAI() as fake:
            fake.reply_json({"topics": ["ops", "retrieval"]}, when="topic", repeat=True)
            fake.reply_json({"paths": ["ops/deployment.md"]}, when="navigator of a wiki", repeat=True)
            fake.reply_stream(["Behind a proxy [Deployment](ops/deployment.md)."], when="You answer questions", repeat=True)
            result = await ask(build_service(settings), AskRequest(question=f"{PROBE} server", reader=BOB_READER))
        assert not result.error, result.error
        prompts.append([all_text(body) for body in fake.requests])
    assert prompts[0] == prompts[1]
    assert any("shortlisted from" in text for text in prompts[0])  # bob's catalog was cut by keyword rank


async def test_each_kind_of_reader_ranks_as_an_index_of_their_own_view_would(twins):
    """A view scores with the full catalog's index, counted over the view's pages: exactly what
    an index built over those pages alone returns (pages, order, scores, known words); no second
    index is built or saved per kind of reader."""
    kb = twins[0]
    await ask(build_service(Settings(kb=kb.root)), AskRequest(question="proxy", reader=BOB_READER))
    await ask(build_service(Settings(kb=kb.root)), AskRequest(question="proxy", reader=OWNER))
    assert not (kb.state_dir / "lexical-index-views").exists()
    assert len((kb.state_dir / "lexical-index" / "kaas-paths.txt").read_text().split("\0")) == len(kb.catalog())
    again = build_service(Settings(kb=kb.root))  # a new process
    view = again.kb.catalog().visible_to(BOB_READER)
    index = again.navigator.lexical.get(view)
    own = LexicalIndex.build(kb.wiki_dir, view)  # an index of bob's pages and nothing else
    for question in (*QUESTIONS, "payroll note ledger", "reverse proxy server deployment citations"):
        got, want = index.search(question, 20), own.search(question, 20)
        assert [h.path for h in got] == [h.path for h in want], question
        assert all(abs(g.score - w.score) < 1e-9 for g, w in zip(got, want, strict=True)), question
        assert index.known_terms(question) == own.known_terms(question), question
    assert index.page_count() == len(view) < len(again.kb.catalog())
    # A topic's pages within bob's view rank with bob's statistics: a mask of his view's index.
    ops = view.subset([e for e in view.entries if e.topic == "ops"])
    assert ops.root is view
    full = dict((h.path, h.score) for h in index.search("proxy deployment", 10))
    part = dict((h.path, h.score) for h in again.navigator.lexical.get(ops).search("proxy deployment", 10))
    assert part and all(full[p] == s for p, s in part.items()) and all(p.startswith("ops/") for p in part)


def test_a_page_restricted_by_a_hand_edit_ranks_by_nothing_of_its_new_text(twins):
    """Between a hand edit and the next re-index the server's catalog is stale; an index built in
    that window must not take in the text of a page that is no longer bob's to read."""
    answers = []
    for kb, secret in zip(twins, ("Frambulox", ""), strict=True):
        with TestClient(create_app(Settings(kb=kb.root), mcp=False), headers={"Authorization": f"Bearer {BOB}"}) as bob:
            assert bob.get("/api/index").status_code == 200  # the catalog is loaded (no index built yet)
            page = kb.wiki_dir / "ops" / "deployment.md"
            page.write_text(page.read_text().replace("title: Deployment", "title: Deployment\naccess: [payroll]")
                            + f"\n{secret} pays the reverse proxy bills.\n")
            events = bob.post("/api/chat", json={"question": "Frambulox"}).text
        answers.append(events.replace("Frambulox", "X"))
    assert answers[0] == answers[1]
    assert "No page of the wiki mentions" in answers[0] or "Nothing in the wiki matches" in answers[0]
