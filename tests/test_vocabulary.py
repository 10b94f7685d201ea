"""Different words for the same thing (issue 26): an offline question in the reader's own words
finds the page that says it in the wiki's words, through pseudo-relevance feedback (RM3,
``offline/feedback.py``) and through the questions a page says it answers (frontmatter
``questions:``, a keyword field of the page). Both work on the reader's view only: a page the
reader may not read lends no word to their query and is never found through its questions."""

from __future__ import annotations

from pathlib import Path

import pytest

from kb_ai.config import Settings
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.records import AskRequest
from kb_ai.store.access import OWNER, Reader
from kb_ai.store.kb import KnowledgeBase

from access_twins import USERS_TOML
from helpers import build_kb

BOB = Reader("bob", frozenset({"eng"}))
ALICE = Reader("alice", frozenset({"payroll"}))

# The question's words are on the hub page only; the page that answers says it in its own words,
# which the hub shares ("TestFlight", "store review").
HUB = ("mobile/mobile-client.md", "Mobile client", "How the mobile client is published.",
       "# Mobile client\n\nThe mobile client is published through the app stores. Every build goes "
       "through TestFlight first, then the store review; the TestFlight and store review notes have the details.",
       {"topic": "mobile"})
REVIEW = ("stores/store-review.md", "TestFlight and the store review", "TestFlight builds and the store review.",
          "# Store review\n\nTestFlight builds wait for the store review. The store review takes one to "
          "three days; a rejected TestFlight build goes back to the review queue.", {"topic": "stores"})
QUESTION = "When does the mobile client get published?"


@pytest.fixture
def rm3(monkeypatch):
    """Pseudo-relevance feedback on, as measured (it ships off: docs/benchmarks.md)."""
    from kb_ai.offline import feedback

    pages, terms, weight = feedback.MEASURED
    monkeypatch.setattr(feedback, "FEEDBACK_PAGES", pages)
    monkeypatch.setattr(feedback, "EXPANSION_TERMS", terms)
    monkeypatch.setattr(feedback, "FEEDBACK_WEIGHT", weight)


def _reader_index(kb: KnowledgeBase, reader: Reader):
    """The keyword index a reader's questions are ranked with, and their view of the catalog."""
    service = build_service(Settings(kb=kb.root))
    view = service.kb.catalog().visible_to(reader)
    return service.navigator.lexical.get(view), view


def _expanded(kb: KnowledgeBase, reader: Reader, question: str):
    from kb_ai.offline import feedback
    from kb_ai.offline.lexical import page_terms

    index, view = _reader_index(kb, reader)
    query = feedback.expanded_query(index, question, lambda path: page_terms(kb.wiki_dir, view.by_path[path]))
    return index, query


async def _ask(kb: KnowledgeBase, question: str, reader: Reader | None = None, pages: int | None = None):
    service = build_service(Settings(kb=kb.root))
    request = AskRequest(question=question, max_pages=pages)
    if reader is not None:
        request = AskRequest(question=question, max_pages=pages, reader=reader)
    return await ask(service, request)


def _paths(result) -> list[str]:
    return [p["path"] for p in result.pages]


def test_a_question_in_other_words_finds_its_page_through_the_words_of_its_best_match(tmp_path, rm3):
    kb = build_kb(tmp_path, HUB, REVIEW)
    index, query = _expanded(kb, OWNER, QUESTION)
    assert "stores/store-review.md" not in [h.path for h in index.search(QUESTION, 5)]  # no word of the question
    assert {"testflight", "review", "store"} <= {term for term, _weight in query}
    assert "stores/store-review.md" in [h.path for h in index.search(query, 5)]


async def test_questions_frontmatter_finds_a_page_for_a_question_only_that_field_words(tmp_path):
    asked = "How long until Apple approves an update?"
    review = (*REVIEW[:4], {"topic": "stores", "questions": [asked, "Why was my build rejected?"]})
    kb = build_kb(tmp_path, review)
    result = await _ask(kb, asked)
    assert not result.abstained
    assert _paths(result)[0] == "stores/store-review.md"
    # a keyword field of the page, not a line of the catalog
    catalog = (kb.wiki_dir / "master-index.md").read_text(encoding="utf-8")
    assert "Apple" not in catalog and "approves" not in catalog


def _hidden_questions_kb(root: Path) -> KnowledgeBase:
    hidden = ("hr/quota.md", "Payroll quota", "Payroll limits.", "# Payroll quota\n\nThe limit is 40 per month.",
              {"topic": "hr", "access": ["payroll"], "questions": ["What is the zorbulent allowance for contractors?"]})
    public = ("ops/contractors.md", "Contractors", "Working with contractors.",
              "# Contractors\n\nContractors sign the agreement before their first week.", {"topic": "ops"})
    return build_kb(root, hidden, public, toml=USERS_TOML)


async def test_a_hidden_pages_questions_find_it_for_its_readers_and_nothing_for_others(tmp_path):
    kb = _hidden_questions_kb(tmp_path)
    question = "What is the zorbulent allowance for contractors?"
    alice = await _ask(kb, question, ALICE)
    assert _paths(alice)[:1] == ["hr/quota.md"]
    bob = await _ask(kb, question, BOB)
    assert "hr/quota.md" not in _paths(bob) and "hr/quota.md" not in str(bob.related)
    assert "zorbulent" not in bob.answer.lower().replace("no page of the wiki mentions: zorbulent", "")
    index, _view = _reader_index(kb, BOB)
    assert "zorbulent" in index.known_terms(question)[1]
    assert all(hit.path != "hr/quota.md" for hit in index.search(question, 5))


def _feedback_twin(root: Path, hidden_words: str) -> KnowledgeBase:
    hidden = [(f"hr/mobile-{n}.md", f"Mobile client payroll {n}", "How the mobile client is published.",
               f"# Mobile client payroll {n}\n\nThe mobile client is published. {hidden_words}",
               {"topic": "hr", "access": ["payroll"]}) for n in range(4)]
    return build_kb(root, HUB, REVIEW, *hidden, toml=USERS_TOML)


async def test_expansion_takes_no_word_from_pages_the_reader_may_not_read(tmp_path, rm3):
    loud = _feedback_twin(tmp_path / "loud", "Zorbulent quibblesnatch zorbulent quibblesnatch store review.")
    quiet = _feedback_twin(tmp_path / "quiet", "Ledger entries only.")
    seen = []
    for kb in (loud, quiet):
        index, query = _expanded(kb, BOB, QUESTION)
        terms = {term for term, _weight in query}
        assert {"testflight", "review"} <= terms  # expanded, from the pages bob may read
        assert not terms & {"zorbul", "quibblesnatch", "payrol", "ledger"}
        result = await _ask(kb, QUESTION, BOB)
        seen.append((query, [(h.path, h.score) for h in index.search(query, 5)], _paths(result), result.answer))
    assert seen[0] == seen[1]  # what bob gets cannot depend on what he may not read


# -- compile: the model writes ``questions:``, an offline compile invents none ------------------


def test_the_compile_model_gives_each_article_the_questions_it_answers_and_offline_finds_it(tmp_path):
    from kb_ai.compile.pipeline import run_compile
    from kb_ai.store.articles import MAX_QUESTIONS, iter_article_paths, load_article

    from test_compile_model_output import ALPHA, compile_with, one_source, writing

    asked = [f"When is launch number {n}?" for n in range(MAX_QUESTIONS)]  # the schema's maxItems
    one_source(tmp_path, ALPHA)
    compile_with(tmp_path, writing(lambda r: {"summary": "Alpha.", "tags": [], "body": ALPHA, "questions": asked}))
    kb = KnowledgeBase(tmp_path)
    [path] = list(iter_article_paths(kb.wiki_dir))
    assert load_article(kb.wiki_dir, path).questions == asked
    assert "launch" not in (kb.wiki_dir / "master-index.md").read_text(encoding="utf-8")
    index, _view = _reader_index(kb, OWNER)
    assert [h.path for h in index.search("launch", 3)] == [path]  # found by the words of its questions

    offline = tmp_path / "offline"
    offline.mkdir()
    one_source(offline, ALPHA)
    run_compile(Settings(kb=offline), progress=False)
    for page in iter_article_paths(offline / "wiki"):
        assert "questions" not in load_article(offline / "wiki", page).meta


def test_questions_a_person_wrote_survive_a_recompile_with_the_model(tmp_path):
    from kb_ai.store.articles import iter_article_paths, load_article
    from kb_ai.store.frontmatter import render_article

    from test_compile_model_output import ALPHA, compile_with, one_source, writing

    source = one_source(tmp_path, ALPHA)
    reply = {"summary": "Alpha.", "tags": [], "body": ALPHA, "questions": ["What does the model ask?"]}
    compile_with(tmp_path, writing(lambda r: reply))
    wiki = tmp_path / "wiki"
    [path] = list(iter_article_paths(wiki))
    article = load_article(wiki, path)
    (wiki / path).write_text(render_article({**article.meta, "questions": ["Who made Alpha?"]}, article.body),
                             encoding="utf-8")
    source.write_text(ALPHA + "\nAlpha moved to June.\n")
    edit = {"heading": "Alpha", "action": "add", "text": "Alpha moved to June."}  # a hand-edited page: by section
    report, _ = compile_with(tmp_path, writing(lambda r: {**reply, "edits": [edit]}))
    assert report.updated == [path]
    assert load_article(wiki, path).questions == ["Who made Alpha?"]
