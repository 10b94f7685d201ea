"""Multi-hop reading (issue 16): after the first pages, further rounds read the pages they lead
to — offline by bridge expansion (title mentions, wiki links), with a model by a second selection
(here a stub that judges relevance by title). Through the ask service, the CLI, HTTP (SSE) and MCP;
rounds stop when they add nothing, stay within the page, token and call budgets, and never read
or name a page the reader may not read."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner
from mcp import Client
from starlette.testclient import TestClient

from kb_ai.cli import cli
from kb_ai.config import Settings
from kb_ai.llm.tokens import estimate_tokens
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.records import AskRequest
from kb_ai.quality.eval import run_eval
from kb_ai.quality.eval_questions import EvalQuestion
from kb_ai.server.app import create_app
from kb_ai.server.mcp import build_mcp_server
from kb_ai.store.access import Reader

from helpers import build_kb, llm_settings
from llm_fakes import FakeOpenAI, all_text, chat_json, chat_sse
from server_fakes import parse_sse

OPERA = "operas/lumen-vesper.md"
COMPOSER = "people/orla-brandt.md"
TOWN = "places/kestrel-harbour.md"
COMPOSER_SUMMARY = "An organist from the north coast, trained in the cathedral school."

# A chain: the question names the opera; the opera's page names the composer; the composer's page
# names the town; the town's page names the river. The question never names the composer or town.
CHAIN = [
    (OPERA, "Lumen Vesper", "An opera in three acts, first staged in 1911.",
     "# Lumen Vesper\n\nLumen Vesper is an opera in three acts, first staged in 1911. "
     "Its music was written by Orla Brandt."),
    (COMPOSER, "Orla Brandt", COMPOSER_SUMMARY,
     "# Orla Brandt\n\nOrla Brandt (1870-1932) was born in Kestrel Harbour and trained as an organist."),
    (TOWN, "Kestrel Harbour", "A port on the north coast.",
     "# Kestrel Harbour\n\nKestrel Harbour is a port town at the mouth of the river Sell."),
]
# Pages that share the question's words and outrank the composer's page on keywords alone.
DISTRACTORS = [
    ("music/city-opera.md", "City Opera", "The opera company of the capital: every composer of the town.",
     "# City Opera\n\nThe City Opera stages the work of every opera composer born in the town or nearby. "
     "A composer born in the town is honoured each year."),
    ("music/opera-composers.md", "Opera composers", "Composers of opera and the towns where each was born.",
     "# Opera composers\n\nAn opera composer writes music for the stage. Which town a composer was born in "
     "is listed for each opera composer."),
    ("music/town-band.md", "Town band", "The band of the town, founded by an opera composer.",
     "# Town band\n\nThe town band was founded by an opera composer who was born in the town."),
    ("music/river-songs.md", "River songs", "Songs about a river and a town.",
     "# River songs\n\nSongs about the river and the town by the river, which river each song is about."),
]
QUESTION = "In which town was the composer of the opera Lumen Vesper born?"
THREE_HOPS = "On which river is the town where the composer of the opera Lumen Vesper was born?"


def chain_kb(tmp_path, *, hidden_composer: bool = False, extra: list | None = None, toml: str | None = None):
    pages = [(*page, {"access": ["staff"]}) if hidden_composer and page[0] == COMPOSER else page for page in CHAIN]
    return build_kb(tmp_path, *pages, *DISTRACTORS, *(extra or []), sample=False, toml=toml)


def offline(kb, **overrides) -> Settings:
    return Settings(kb=kb.root, **overrides)


def rounds_of(result) -> list[tuple[int, list[str]]]:
    return [(r["round"], r["added"]) for r in result.rounds]


# -- a stub model that judges relevance by title ---------------------------------------------------

_LINE = re.compile(r"^(?:- |\d+\. )\[(?P<title>[^\]]+)\]\((?P<path>[^)]+)\)", re.MULTILINE)


def _catalog(text: str) -> list[tuple[str, str]]:
    block = text[text.index("<catalog"):text.index("</catalog>")]
    return [(m["title"], m["path"]) for m in _LINE.finditer(block)]


def title_judge(body: dict):
    """Select: the catalog pages whose title the question names. A further round: the catalog
    pages whose title the pages read name. The answer cites every page it was given."""
    text = all_text(body)
    if body.get("stream"):
        pages = re.findall(r'<page path="([^"]+)" title="([^"]+)">', text)
        return chat_sse(["From the pages read: "] + [f"[{t}]({p}) " for p, t in pages], usage=(100, 20))
    question = re.search(r"^Question: (.*)$", text, re.MULTILINE)[1]
    catalog = _catalog(text)
    if "You look for more pages" in text:
        read = " ".join(re.findall(r"<page [^>]*>\n(.*?)\n</page>", text, re.DOTALL))
        chosen = [p for t, p in catalog if t in read]
        return chat_json(json.dumps({"paths": chosen, "why": "the pages read name " + ", ".join(
            t for t, p in catalog if p in chosen)}), prompt_tokens=len(text) // 4, completion_tokens=15)
    chosen = [p for t, p in catalog if t in question]
    return chat_json(json.dumps({"paths": chosen}), prompt_tokens=len(text) // 4, completion_tokens=10)


def judged(fake: FakeOpenAI) -> FakeOpenAI:
    return fake.add(title_judge, when=None, repeat=True)


def follow_up_requests(fake: FakeOpenAI) -> list[dict]:
    return [r for r in fake.requests if "You look for more pages" in all_text(r)]


# -- offline: bridge expansion ---------------------------------------------------------------------

async def test_offline_a_second_round_reads_the_page_only_the_first_page_names(tmp_path):
    kb = chain_kb(tmp_path)
    one_round = await ask(build_service(offline(kb, max_rounds=1)), AskRequest(question=QUESTION, max_pages=3))
    assert COMPOSER not in [p["path"] for p in one_round.pages]  # keywords alone do not find it

    result = await ask(build_service(offline(kb)), AskRequest(question=QUESTION, max_pages=3))
    assert result.error is None, result.error
    assert [r for r, _ in rounds_of(result)] == [1, 2]
    assert OPERA in result.rounds[0]["added"]
    assert result.rounds[1]["added"] == [COMPOSER]
    assert "Orla Brandt" in result.rounds[1]["why"]
    assert [p["path"] for p in result.pages][-1] == COMPOSER and len(result.pages) <= 3
    assert "Kestrel Harbour" in result.answer  # the sentence that answers came from round 2's page
    assert COMPOSER in [c["path"] for c in result.citations]


async def test_offline_three_rounds_follow_a_three_page_chain(tmp_path):
    kb = chain_kb(tmp_path)
    two = await ask(build_service(offline(kb)), AskRequest(question=THREE_HOPS, max_pages=4))
    assert TOWN not in [p["path"] for p in two.pages]
    result = await ask(build_service(offline(kb, max_rounds=3)), AskRequest(question=THREE_HOPS, max_pages=4))
    assert rounds_of(result)[1:] == [(2, [COMPOSER]), (3, [TOWN])]
    assert "river Sell" in result.answer and len(result.pages) <= 4


async def test_offline_wiki_links_out_of_a_page_are_followed(tmp_path):
    # The opera's page links to the composer's page under another name: no title mention, a link.
    linked = [(OPERA, "Lumen Vesper", "An opera in three acts, first staged in 1911.",
               "# Lumen Vesper\n\nLumen Vesper is an opera in three acts. Its music was written by "
               "[its composer](../people/orla-brandt.md).")]
    kb = build_kb(tmp_path, *linked, *CHAIN[1:], *DISTRACTORS, sample=False)
    result = await ask(build_service(offline(kb)), AskRequest(question=QUESTION, max_pages=3))
    assert rounds_of(result)[1] == (2, [COMPOSER])


async def test_offline_a_round_that_adds_nothing_ends_the_rounds(tmp_path):
    kb = build_kb(tmp_path, *DISTRACTORS, sample=False)  # no page names another page
    result = await ask(build_service(offline(kb, max_rounds=3)), AskRequest(question="Which river songs are there?"))
    assert [r for r, _ in rounds_of(result)] == [1]


# -- interfaces: SSE, --json, MCP ------------------------------------------------------------------

def test_http_chat_streams_a_pages_event_per_round_before_the_answer(tmp_path):
    kb = chain_kb(tmp_path)
    client = TestClient(create_app(offline(kb)))
    response = client.post("/api/chat", json={"question": QUESTION, "max_pages": 3})
    events = parse_sse(response.text)
    names = [n for n, _ in events]
    pages = [d for n, d in events if n == "pages"]
    assert [p["round"] for p in pages] == [1, 2]
    assert names.index("token") > max(i for i, n in enumerate(names) if n == "pages")
    assert pages[1]["added"] == [COMPOSER] and "Orla Brandt" in pages[1]["why"]
    assert [p["path"] for p in pages[1]["pages"]][-1] == COMPOSER  # every page read so far
    assert pages[1]["usage"] == {"llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0}


def test_cli_ask_json_lists_the_rounds(tmp_path):
    kb = chain_kb(tmp_path)
    out = CliRunner().invoke(cli, ["--kb", str(kb.root), "ask", QUESTION, "--json", "--pages", "3"], env={"KAAS_MODEL": ""})
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert [r["round"] for r in data["rounds"]] == [1, 2]
    assert data["rounds"][1]["added"] == [COMPOSER]
    assert COMPOSER in [p["path"] for p in data["pages"]]


async def test_mcp_ask_reports_the_rounds(tmp_path):
    kb = chain_kb(tmp_path, toml="max_pages = 3\n")
    async with Client(build_mcp_server(Settings(kb=kb.root, max_pages=3))) as client:
        result = await client.call_tool("ask", {"question": QUESTION})
    rounds = result.structured_content["rounds"]
    assert [r["round"] for r in rounds] == [1, 2] and rounds[1]["added"] == [COMPOSER]
    assert "round 2:" in result.content[0].text


# -- with a model (a stub that judges relevance by title) -----------------------------------------

async def test_the_model_reads_the_bridge_page_in_a_second_round(tmp_path):
    kb = chain_kb(tmp_path)
    with judged(FakeOpenAI()) as fake:
        result = await ask(build_service(llm_settings(kb)), AskRequest(question=QUESTION))
    assert result.error is None, result.error
    assert rounds_of(result) == [(1, [OPERA]), (2, [COMPOSER])]
    assert result.rounds[1]["why"] == "the pages read name Orla Brandt"
    assert result.rounds[1]["usage"]["llm_calls"] == 1 and result.rounds[1]["usage"]["prompt_tokens"] > 0
    prompt = all_text(follow_up_requests(fake)[0])
    assert "Its music was written by Orla Brandt." in prompt  # conditioned on what it read
    assert f"[Lumen Vesper]({OPERA})" not in prompt  # a page read is not offered again
    assert COMPOSER in [c["path"] for c in result.citations]
    assert result.usage["llm_calls"] == 3  # select, select more, answer


async def test_the_model_loop_stops_when_a_round_adds_nothing(tmp_path):
    kb = chain_kb(tmp_path)
    with FakeOpenAI() as fake:
        fake.reply_json({"paths": [OPERA]}, when="You are the navigator of a wiki")
        fake.reply_json({"paths": [OPERA], "why": "that is all"}, when="You look for more pages", repeat=True)
        fake.add(title_judge, when=lambda body: bool(body.get("stream")), repeat=True)
        result = await ask(build_service(llm_settings(kb, max_rounds=4)), AskRequest(question=QUESTION))
    assert rounds_of(result) == [(1, [OPERA])]
    assert len(follow_up_requests(fake)) == 1  # no third round after one that added nothing


async def test_the_model_is_not_asked_again_when_the_pages_read_lead_nowhere(tmp_path):
    kb = build_kb(tmp_path, *DISTRACTORS, sample=False)
    with judged(FakeOpenAI()) as fake:
        result = await ask(build_service(llm_settings(kb)), AskRequest(question="What are River songs?"))
    assert rounds_of(result) == [(1, ["music/river-songs.md"])]
    assert follow_up_requests(fake) == [] and result.usage["llm_calls"] == 2


async def test_the_model_follows_three_hops_with_three_rounds(tmp_path):
    kb = chain_kb(tmp_path)
    with judged(FakeOpenAI()):
        result = await ask(build_service(llm_settings(kb, max_rounds=3)), AskRequest(question=THREE_HOPS))
    assert rounds_of(result) == [(1, [OPERA]), (2, [COMPOSER]), (3, [TOWN])]


async def test_the_second_shortlist_is_built_from_what_was_read(tmp_path):
    # A catalog over the selection budget: the first shortlist (from the question) cannot show the
    # composer's page; the second one, built from the question and the pages read, does.
    filler = [(f"music/opera-{i}.md", f"Opera house {i}", f"An opera house in the town, home of composer {i}.",
               f"# Opera house {i}\n\nAn opera house where composer {i} was born in the town.") for i in range(60)]
    kb = chain_kb(tmp_path, extra=filler)
    with judged(FakeOpenAI()) as fake:
        result = await ask(build_service(llm_settings(kb, select_budget=400)), AskRequest(question=QUESTION))
    first = all_text(fake.requests[0])
    assert "(people/orla-brandt.md)" not in first and "shortlisted" in first
    assert f"[Orla Brandt]({COMPOSER})" in all_text(follow_up_requests(fake)[0])
    assert rounds_of(result)[1] == (2, [COMPOSER])


# -- budgets ---------------------------------------------------------------------------------------

async def test_rounds_stay_within_the_page_budget(tmp_path):
    kb = chain_kb(tmp_path)
    for max_pages in (1, 2):
        result = await ask(build_service(offline(kb, max_rounds=3)), AskRequest(question=THREE_HOPS, max_pages=max_pages))
        assert len(result.pages) <= max_pages
    with judged(FakeOpenAI()):
        result = await ask(build_service(llm_settings(kb, max_rounds=3, max_pages=2)), AskRequest(question=THREE_HOPS))
    assert rounds_of(result) == [(1, [OPERA]), (2, [COMPOSER])]  # the third page does not fit


async def test_rounds_stay_within_the_reading_budget(tmp_path):
    long_town = (TOWN, "Kestrel Harbour", "A port on the north coast.",
                 "# Kestrel Harbour\n\nKestrel Harbour is a port town at the mouth of the river Sell. "
                 + "The harbour wall is old. " * 400)
    kb = build_kb(tmp_path, *CHAIN[:2], long_town, *DISTRACTORS, sample=False)
    budget = 300
    result = await ask(build_service(offline(kb, max_rounds=3, read_budget=budget)),
                       AskRequest(question=THREE_HOPS, max_pages=4))
    assert result.error is None
    read = [p["path"] for p in result.pages]
    assert COMPOSER in read
    # The town's page is far over what is left: trimmed to fit or not read, and the reader is told.
    assert TOWN not in read or any(p.get("truncated") for p in result.pages if p["path"] == TOWN)
    assert any(TOWN in n or "Kestrel Harbour" in n for n in result.notices)
    with judged(FakeOpenAI()) as fake:
        result = await ask(build_service(llm_settings(kb, max_rounds=3, read_budget=budget)),
                           AskRequest(question=THREE_HOPS))
    assert COMPOSER in [p["path"] for p in result.pages]
    answer_prompt = all_text([r for r in fake.requests if r.get("stream")][0])
    page_texts = re.findall(r"<page [^>]*>\n(.*?)\n</page>", answer_prompt, re.DOTALL)
    assert sum(estimate_tokens(t) for t in page_texts) <= budget


async def test_rounds_stay_within_the_call_budget(tmp_path):
    kb = chain_kb(tmp_path)
    with judged(FakeOpenAI()) as fake:
        result = await ask(build_service(llm_settings(kb, max_calls=1)), AskRequest(question=QUESTION))
    assert follow_up_requests(fake) == [] and rounds_of(result) == [(1, [OPERA])]
    assert any("model calls" in n for n in result.notices)
    with judged(FakeOpenAI()) as fake:
        result = await ask(build_service(llm_settings(kb, max_calls=2, max_rounds=3)), AskRequest(question=THREE_HOPS))
    assert len(follow_up_requests(fake)) == 1 and len(result.rounds) == 2


# -- access: a page the reader may not read is never read or named ---------------------------------

BOB = Reader("bob", frozenset({"eng"}))


def _everything(result, fake: FakeOpenAI | None = None) -> str:
    shown = json.dumps(result.to_json()) + json.dumps(result.rounds)
    return shown + ("".join(all_text(r) for r in fake.requests) if fake else "")


async def test_a_hidden_bridge_page_is_not_read_or_named_offline(tmp_path):
    kb = chain_kb(tmp_path, hidden_composer=True)
    owner = await ask(build_service(offline(kb)), AskRequest(question=QUESTION, max_pages=3))
    assert rounds_of(owner)[1] == (2, [COMPOSER])  # the owner may read it: the bridge exists
    result = await ask(build_service(offline(kb)), AskRequest(question=QUESTION, max_pages=3, reader=BOB))
    assert result.error is None
    assert [r for r, _ in rounds_of(result)] == [1]
    everything = _everything(result)
    assert COMPOSER not in everything and "orla-brandt" not in everything and COMPOSER_SUMMARY not in everything
    assert "1870" not in everything and "organist" not in everything  # nor its text


async def test_a_hidden_bridge_page_is_not_read_or_named_with_a_model(tmp_path):
    kb = chain_kb(tmp_path, hidden_composer=True)
    with judged(FakeOpenAI()):
        owner = await ask(build_service(llm_settings(kb)), AskRequest(question=QUESTION))
    assert rounds_of(owner)[1] == (2, [COMPOSER])
    with judged(FakeOpenAI()) as fake:
        result = await ask(build_service(llm_settings(kb)), AskRequest(question=QUESTION, reader=BOB))
    assert result.error is None
    everything = _everything(result, fake)
    assert COMPOSER not in everything and "orla-brandt" not in everything and COMPOSER_SUMMARY not in everything
    assert "organist" not in everything
    # The opera's page names "Orla Brandt" in its own text (bob may read that); no page of that
    # title is offered to the model or listed among the pages the pages read name.
    assert all("Catalog pages it names" not in all_text(r) for r in fake.requests)


async def test_a_model_naming_a_hidden_page_in_a_later_round_gets_nothing(tmp_path):
    kb = chain_kb(tmp_path, hidden_composer=True, extra=[
        ("music/notes.md", "Notes", "Programme notes.", "# Notes\n\nProgramme notes for Lumen Vesper.")])
    with FakeOpenAI() as fake:
        fake.reply_json({"paths": [OPERA]}, when="You are the navigator of a wiki")
        fake.reply_json({"paths": [COMPOSER, "Orla Brandt"], "why": "guessing"}, when="You look for more pages")
        fake.add(title_judge, when=lambda body: bool(body.get("stream")), repeat=True)
        result = await ask(build_service(llm_settings(kb)), AskRequest(question=QUESTION, reader=BOB))
    assert COMPOSER not in [p["path"] for p in result.pages]
    assert COMPOSER_SUMMARY not in _everything(result, fake) and "organist" not in _everything(result, fake)


# -- kaas eval: gold pages and cost per round ------------------------------------------------------

async def test_eval_reports_gold_pages_and_cost_per_round(tmp_path):
    kb = chain_kb(tmp_path)
    question = EvalQuestion(question=QUESTION, gold_pages=["Lumen Vesper", "Orla Brandt"], answer="Kestrel Harbour")
    report = await run_eval(build_service(offline(kb, max_pages=3)), [question])
    (q,) = report.results
    assert [(r["round"], r["gold_read"]) for r in q.rounds] == [(1, 1), (2, 1)]
    summary = report.summary()
    assert summary["rounds"]["2"]["gold_read_per_question"] == 1.0 and summary["all_gold_read"] == 1.0
    assert "round 2" in report.render_table()
    with judged(FakeOpenAI()):
        report = await run_eval(build_service(llm_settings(kb)), [question])
    (q,) = report.results
    assert [(r["round"], r["gold_read"], r["llm_calls"]) for r in q.rounds] == [(1, 1, 1), (2, 1, 1)]
    assert report.summary()["rounds"]["2"]["llm_calls_per_question"] == 1.0
