"""Topic indexes (wiki/topics.md) and hierarchical navigation: topics first, then pages."""

from __future__ import annotations

import re

import json

import pytest

from kb_ai.config import load_settings
from kb_ai.errors import ConfigError
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.records import AskRequest
from kb_ai.store.catalog import Catalog, CatalogEntry
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.topics import SUBTOPIC_MIN, build_topic_index, membership_key, save_model_summaries, stored_summary

from helpers import llm_settings, write_page
from llm_fakes import ANSWER, API_BASE, MODEL, SELECT, FakeOpenAI, all_text
from wikigen import generate_wiki

TOPICS = "You are the navigator of a large wiki"


def _entry(path: str, title: str, summary: str, topic: str) -> CatalogEntry:
    return CatalogEntry(path=path, title=title, summary=summary, topic=topic)


def _big_topic(n: int = SUBTOPIC_MIN + 90) -> list[CatalogEntry]:
    kinds = ["glacier", "volcano", "river", "desert"]
    return [_entry(f"geo/p{i}.md", f"Place {i} {kinds[i % 4]}", f"A {kinds[i % 4]} somewhere notable.", "geo")
            for i in range(n)]


def test_every_topic_has_a_count_a_summary_and_large_topics_split_into_subtopics():
    entries = _big_topic() + [_entry(f"food/d{i}.md", f"Dish {i} soup", "A warming soup recipe.", "food") for i in range(5)]
    index = build_topic_index(Catalog(entries))
    geo, food = index.by_name["geo"], index.by_name["food"]
    assert (geo.count, food.count) == (SUBTOPIC_MIN + 90, 5)
    assert "soup" in food.summary and food.subtopics == ()
    names = {s.name for s in geo.subtopics}
    assert {"geo › glacier", "geo › volcano", "geo › river", "geo › desert"} <= names
    members = [p for s in geo.subtopics for p in s.paths]
    assert sorted(members) == sorted(geo.paths)  # every page in exactly one subtopic
    glacier = index.by_name["geo › glacier"]
    assert all("glacier" in next(e.title for e in entries if e.path == p) for p in glacier.paths)


def test_subfolders_of_a_large_topic_are_its_subtopics():
    entries = [_entry(f"geo/{'alps' if i % 2 else 'andes'}/p{i}.md", f"Peak {i}", "A mountain.", "geo")
               for i in range(SUBTOPIC_MIN + 10)]
    index = build_topic_index(Catalog(entries))
    assert [s.name for s in index.by_name["geo"].subtopics] == ["geo › alps", "geo › andes"]


def test_a_model_summary_is_used_only_for_the_membership_it_was_written_for():
    entries = [_entry(f"food/d{i}.md", f"Dish {i} soup", "A warming soup recipe.", "food") for i in range(5)]
    stored = {"food": stored_summary("food", [e.path for e in entries], "Soups of the house.")}
    assert build_topic_index(Catalog(entries), stored).by_name["food"].summary == "Soups of the house."
    grown = entries + [_entry("food/new.md", "Bread", "A loaf.", "food")]
    assert build_topic_index(Catalog(grown), stored).by_name["food"].summary != "Soups of the house."


def test_a_model_summary_moved_to_another_topic_or_edited_is_not_used():
    """A saved summary is bound to its topic and members (``stored_summary``'s seal): one moved
    under another topic's name and members fingerprint (a summary made from pages a reader may
    not see, shown for a topic they may) or edited is not used; the generated one stands in."""
    hr = [_entry(f"hr/p{i}.md", f"Payroll {i}", "Zanzibarite salary bands.", "hr") for i in range(3)]
    ops = [_entry(f"ops/p{i}.md", f"Deploy {i}", "Deploying releases.", "ops") for i in range(3)]
    secret = stored_summary("hr", [e.path for e in hr], "Zanzibarite bands pay 91,000.")
    moved = {"ops": {**secret, "members": membership_key([e.path for e in ops])}}
    assert "Zanzibarite" not in build_topic_index(Catalog(ops), moved).by_name["ops"].summary
    edited = {"ops": {**stored_summary("ops", [e.path for e in ops], "Deploying."), "summary": "Zanzibarite."}}
    assert "Zanzibarite" not in build_topic_index(Catalog(ops), edited).by_name["ops"].summary
    fine = {"ops": stored_summary("ops", [e.path for e in ops], "How releases ship.")}
    assert build_topic_index(Catalog(ops), fine).by_name["ops"].summary == "How releases ship."


def test_kaas_index_writes_topics_md_which_is_not_an_article(tmp_path):
    write_page(tmp_path / "wiki", "food/soup.md", "Tomato soup", "A warming soup of tomatoes.", "# Soup\n\nHot.")
    write_page(tmp_path / "wiki", "food/bread.md", "Rye bread", "A dense rye loaf.", "# Bread\n\nBaked.")
    kb = KnowledgeBase(tmp_path)
    save_model_summaries(kb.state_dir, {"food": stored_summary("food", ["food/bread.md", "food/soup.md"], "Soups and breads.")})
    kb.reindex()
    text = (tmp_path / "wiki" / "topics.md").read_text()
    assert "- food (2 articles) — Soups and breads." in text
    assert len(kb.reindex().warnings) == 0 and len(kb.catalog()) == 2  # topics.md is not a page
    (tmp_path / "wiki" / "food" / "bread.md").unlink()
    kb.reindex()
    assert "- food (1 article) — " in (tmp_path / "wiki" / "topics.md").read_text()


async def test_hierarchical_navigation_shows_topics_then_only_the_chosen_topics_pages(tmp_path):
    made = generate_wiki(tmp_path, 400)
    kb = KnowledgeBase(tmp_path)
    kb.reindex()
    gold_path, name = made[250]
    gold_topic = kb.catalog().get(gold_path).topic
    with FakeOpenAI() as fake:
        fake.reply_json({"topics": [gold_topic]}, when=TOPICS)
        fake.reply_json({"paths": [gold_path]}, when=SELECT)
        fake.reply_stream([f"Long ago [{name}]({gold_path})."], when=ANSWER)
        result = await ask(build_service(llm_settings(kb, select_budget=1500, navigation="topics")),
                           AskRequest(question=f"When was {name} founded?"))
    topic_prompt = all_text([r for r in fake.requests if TOPICS in all_text(r)][0])
    assert f"- {gold_topic} (25 articles) — " in topic_prompt
    page_prompt = all_text([r for r in fake.requests if SELECT in all_text(r)][0])
    shown = [line for line in page_prompt.splitlines() if re.match(r"\d+\. \[", line)]  # numbered catalog lines
    assert len(shown) == 25 and all(f"]({gold_topic}/" in line for line in shown)
    assert [p["path"] for p in result.pages] == [gold_path] and result.usage["llm_calls"] == 3
    assert any(n.startswith(f"Navigated by topic: {gold_topic} (25 of 400 pages)") for n in result.notices)


async def test_an_invented_topic_falls_back_to_the_shortlist_and_an_empty_one_is_not_covered(tmp_path):
    made = generate_wiki(tmp_path, 400)
    kb = KnowledgeBase(tmp_path)
    kb.reindex()
    gold_path, name = made[10]
    service = build_service(llm_settings(kb, select_budget=1500, navigation="topics"))
    with FakeOpenAI() as fake:
        fake.reply_json({"topics": ["no such topic"]}, when=TOPICS)
        fake.reply_json({"paths": [gold_path]}, when=SELECT)
        fake.reply_stream([f"Yes [{name}]({gold_path})."], when=ANSWER)
        result = await ask(service, AskRequest(question=f"When was {name} founded?"))
    assert [p["path"] for p in result.pages] == [gold_path]
    assert any("best keyword matches" in n for n in result.notices)
    with FakeOpenAI() as fake:
        fake.reply_json({"topics": []}, when=TOPICS)
        result = await ask(service, AskRequest(question="What is the airspeed of a swallow?"))
    assert result.pages == [] and len(fake.requests) == 1
    assert any("no topic" in n for n in result.notices)


async def test_a_small_catalog_never_takes_the_topic_step(tmp_path):
    write_page(tmp_path / "wiki", "food/soup.md", "Tomato soup", "A warming soup of tomatoes.", "# Soup\n\nHot.")
    kb = KnowledgeBase(tmp_path)
    kb.reindex()
    with FakeOpenAI() as fake:
        fake.reply_json({"paths": ["food/soup.md"]}, when=SELECT)
        fake.reply_stream(["Hot [Tomato soup](food/soup.md)."], when=ANSWER)
        await ask(build_service(llm_settings(kb, navigation="topics")), AskRequest(question="soup?"))
    assert not [r for r in fake.requests if TOPICS in all_text(r)]


def test_navigation_setting_is_validated(tmp_path):
    assert load_settings(tmp_path, env={"KAAS_NAVIGATION": "Topics"}).navigation == "topics"
    with pytest.raises(ConfigError, match="navigation"):
        load_settings(tmp_path, env={"KAAS_NAVIGATION": "tree"})


def test_the_topic_fallback_is_a_notice_for_json_and_sse_clients(tmp_path):
    from click.testing import CliRunner
    from starlette.testclient import TestClient

    from kb_ai.cli import cli
    from kb_ai.server import create_app
    from server_fakes import parse_sse

    made = generate_wiki(tmp_path, 400)
    kb = KnowledgeBase(tmp_path)
    kb.reindex()
    gold_path, name = made[10]
    (tmp_path / "kaas.toml").write_text('select_budget = 1500\nnavigation = "topics"\ncache = false\nmax_retries = 0\n')

    def fake_model(fake):
        fake.reply_json({"topics": ["no such topic", "nor this one"]}, when=TOPICS, repeat=True)
        fake.reply_json({"paths": [gold_path]}, when=SELECT, repeat=True)
        fake.reply_stream([f"Yes [{name}]({gold_path})."], when=ANSWER, repeat=True)

    env = {"KAAS_MODEL": MODEL, "KAAS_API_BASE": API_BASE, "KAAS_API_KEY": "k"}
    with FakeOpenAI() as fake:
        fake_model(fake)
        result = CliRunner(env=env).invoke(cli, ["--kb", str(tmp_path), "ask", "--json", f"When was {name} founded?"])
    notices = json.loads(result.stdout)["notices"]
    assert any("named no topic of the wiki" in n for n in notices), notices
    with FakeOpenAI() as fake:
        fake_model(fake)
        app = create_app(llm_settings(tmp_path, select_budget=1500, navigation="topics"), mcp=False)
        with TestClient(app) as client:
            events = parse_sse(client.post("/api/chat", json={"question": f"When was {name} founded?"}).text)
    sse_notices = [data["message"] for event, data in events if event == "notice"]
    assert any("named no topic of the wiki" in n for n in sse_notices), sse_notices


async def test_invented_topic_names_next_to_real_ones_are_reported(tmp_path):
    made = generate_wiki(tmp_path, 400)
    kb = KnowledgeBase(tmp_path)
    kb.reindex()
    gold_path, name = made[250]
    gold_topic = kb.catalog().get(gold_path).topic
    with FakeOpenAI() as fake:
        fake.reply_json({"topics": ["made-up topic", gold_topic]}, when=TOPICS)
        fake.reply_json({"paths": [gold_path]}, when=SELECT)
        fake.reply_stream([f"Long ago [{name}]({gold_path})."], when=ANSWER)
        result = await ask(build_service(llm_settings(kb, select_budget=1500, navigation="topics")),
                           AskRequest(question=f"When was {name} founded?"))
    assert [p["path"] for p in result.pages] == [gold_path]
    assert any(n.startswith("Ignored topic names") and "'made-up topic'" in n for n in result.notices), result.notices
