"""Access control: a page outside a reader's groups never appears in any response, prompt, count
or error message for that reader — over HTTP, SSE, MCP, and in what the model is sent."""

from __future__ import annotations

import json
import re

import pytest
from starlette.testclient import TestClient

from kb_ai.config import Settings
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.records import AskRequest
from kb_ai.server.app import create_app
from kb_ai.store.access import OWNER, Reader, derived_access, parse_access
from kb_ai.store.catalog import parse_master_index, render_master_index
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.pages import load_page
from kb_ai.store.topics import build_topic_index
from kb_ai.store.users import UserDirectory

from access_twins import ALICE, BOB, OPS, users_toml
from helpers import SAMPLE_PAGES
from llm_fakes import API_BASE, MODEL, FakeOpenAI, all_text
from server_fakes import ServerThread, parse_sse

# Everything that identifies the hidden pages: none of it may reach bob.
SECRETS = ("zanzibarite", "Zanzibarite", "hr/salaries.md", "salaries", "Quorvex", "board/minutes.md", "91,000")
USERS_TOML = users_toml(alice_group="hr")


@pytest.fixture
def kb(make_kb) -> KnowledgeBase:
    return make_kb(
        ("hr/salaries.md", "Zanzibarite salary bands", "Pay bands, including the zanzibarite band.",
         "# Salary bands\n\nThe zanzibarite band pays 91,000 a year. Citations are validated by HR.",
         {"topic": "hr", "access": ["hr"]}),
        ("board/minutes.md", "Quorvex board minutes", "What the board decided about Quorvex.",
         "# Minutes\n\nQuorvex was approved.", {"topic": "board", "access": []}),
        ("ops/links.md", "Links", "Where things are.",
         "# Links\n\nSee [the bands](../hr/salaries.md) and [nothing](../hr/nowhere.md).", {"topic": "ops"}),
        toml=USERS_TOML)


def client_for(kb: KnowledgeBase, token: str | None, **settings) -> TestClient:
    app = create_app(Settings(kb=kb.root, **settings), mcp=False)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return TestClient(app, headers=headers)


def assert_hidden(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} leaked"


def chat(client: TestClient, question: str) -> str:
    response = client.post("/api/chat", json={"question": question, "suggest": True})
    assert response.status_code == 200
    return response.text


# -- the rule itself -------------------------------------------------------------------------------


def test_access_rules_parse_and_fail_closed():
    assert parse_access({}) == (None, [])
    assert parse_access({"access": ["hr", "eng", "hr"]}) == (("eng", "hr"), [])
    assert parse_access({"access": "hr"}) == (("hr",), [])
    assert parse_access({"access": []})[0] == ()
    rule, warnings = parse_access({"access": {"hr": True}})
    assert rule == () and warnings  # malformed: admins only
    assert Reader("x", frozenset({"hr"})).can_read(("hr", "eng")) and not Reader("x").can_read(("hr",))
    assert not Reader("x", frozenset({"hr"})).can_read(()) and OWNER.can_read(())
    assert derived_access([None, ("hr", "eng"), ("hr",)]) == ("hr",)
    assert derived_access([("hr",), ("eng",)]) == ()  # nobody but admins reads both
    assert derived_access([None, None]) is None


def test_the_catalog_keeps_access_rules_and_views_filter_before_anything_else(kb):
    catalog = kb.catalog()
    assert catalog.get("hr/salaries.md").access == ("hr",)
    assert parse_master_index(render_master_index(catalog)).entries == catalog.entries
    bob_view = catalog.visible_to(Reader("bob", frozenset({"eng"})))
    assert "hr/salaries.md" not in bob_view and "board/minutes.md" not in bob_view
    assert len(bob_view) == len(catalog) - 2
    assert catalog.visible_to(Reader("b2", frozenset({"eng"}))) is bob_view  # one view per kind of reader
    assert_hidden("\n".join(build_topic_index(bob_view).lines()))


# -- HTTP -------------------------------------------------------------------------------------------


def test_index_pages_wiki_and_links_show_bob_only_what_he_may_read(kb):
    with client_for(kb, BOB) as bob, client_for(kb, ALICE) as alice, client_for(kb, OPS) as ops:
        index = bob.get("/api/index")
        assert index.status_code == 200
        assert_hidden(index.text)
        assert index.json()["articles"] == len(SAMPLE_PAGES) + 1
        assert "hr/salaries.md" in alice.get("/api/index").text and "board/minutes.md" not in alice.get("/api/index").text
        assert ops.get("/api/index").json()["articles"] == len(SAMPLE_PAGES) + 3

        hidden, missing = bob.get("/api/pages/hr/salaries.md"), bob.get("/api/pages/hr/nowhere.md")
        assert hidden.status_code == missing.status_code == 404
        assert hidden.json()["error"]["message"].replace("salaries", "X") == missing.json()["error"]["message"].replace("nowhere", "X")
        assert alice.get("/api/pages/hr/salaries.md").status_code == 200
        assert bob.get("/wiki/hr/salaries.md").status_code == 404
        assert_hidden(bob.get("/wiki/").text)

        links = bob.get("/api/pages/ops/links.md").json()
        assert set(links["broken_links"]) == {"hr/salaries.md", "hr/nowhere.md"}  # hidden = missing
        assert "hr/salaries.md" not in alice.get("/api/pages/ops/links.md").json()["broken_links"]
        assert bob.get("/api/pages/master-index.md").status_code == 404
        assert bob.get("/api/pages/topics.md").status_code == 404


def test_bob_cannot_create_edit_hidden_or_change_access(kb):
    with client_for(kb, BOB) as bob, client_for(kb, OPS) as ops:
        page = bob.get("/api/pages/ops/links.md").json()
        hidden = bob.put("/api/pages/hr/salaries.md", json={"markdown": "---\ntitle: Mine\n---\nx"})
        new = bob.put("/api/pages/hr/brand-new.md", json={"markdown": "---\ntitle: Mine\n---\nx"})
        assert hidden.status_code == new.status_code == 404
        widen = page["markdown"].replace("title: Links", "title: Links\naccess: [eng]")
        assert bob.put("/api/pages/ops/links.md", json={"markdown": widen, "version": page["version"]}).status_code == 403
        edit = page["markdown"].replace("Where things are.", "Where things live.")
        assert bob.put("/api/pages/ops/links.md", json={"markdown": edit, "version": page["version"]}).status_code == 200
        assert ops.put("/api/pages/ops/links.md", json={"markdown": edit.replace("title: Links", "title: Links\naccess: [eng]")}).status_code == 200
    assert "secret" not in (kb.wiki_dir / "hr" / "salaries.md").read_text() and not (kb.wiki_dir / "hr" / "brand-new.md").exists()


def _answer_events(body: str) -> list:
    return [(n, d) for n, d in parse_sse(body) if n != "usage"]  # usage carries timings


def test_offline_chat_for_bob_is_exactly_the_chat_of_a_wiki_without_the_hidden_pages(kb, tmp_path_factory):
    public = tmp_path_factory.mktemp("public")
    for path in kb.catalog().visible_to(Reader("bob", frozenset({"eng"}))).by_path:
        (public / "wiki" / path).parent.mkdir(parents=True, exist_ok=True)
        (public / "wiki" / path).write_bytes((kb.wiki_dir / path).read_bytes())
    KnowledgeBase(public).reindex()
    questions = ("What is the zanzibarite salary band?", "Quorvex board minutes", "How are citations validated?",
                 "salaries pay bands",
                 # names and comparisons (offline/names.py, offline/compare.py) look at page text
                 "Which was written first, Quorvex Board Minutes or Citations?",
                 "Are the Quorvex board and the zanzibarite band both validated?")
    with client_for(kb, BOB) as bob, client_for(kb, ALICE) as alice, TestClient(create_app(Settings(kb=public), mcp=False)) as plain:
        for question in questions:
            seen = chat(bob, question)
            assert _answer_events(seen) == _answer_events(chat(plain, question)), question
            assert "91,000" not in seen and "hr/salaries.md" not in seen and "Quorvex board" not in seen
        assert "91,000" in chat(alice, "What is the zanzibarite salary band?")


def test_model_prompts_for_bob_never_contain_hidden_pages(kb):
    with FakeOpenAI() as fake:
        fake.reply_json({"query": "pay band amounts"}, when="standalone")
        # A model that tries anyway (it read an injection somewhere): it names the hidden page.
        fake.reply_json({"paths": ["hr/salaries.md", "retrieval/citations.md"]}, when="You are the navigator of a wiki", repeat=True)
        fake.reply_stream(["Validated [Citations](retrieval/citations.md) and [Bands](hr/salaries.md)."],
                          when="You answer questions", repeat=True)
        fake.reply_json({"questions": ["What next?"]}, when="follow-up", repeat=True)
        with client_for(kb, BOB, model=MODEL, api_base=API_BASE, api_key="k", cache=False, max_retries=0) as bob:
            body = bob.post("/api/chat", json={"question": "Which pay band pays most?", "suggest": True,
                                               "rewrite": True}).text
    prompts = "\n".join(all_text(r) for r in fake.requests)
    assert fake.requests and "retrieval/citations.md" in prompts
    # Everything kaas sent, except the model's own earlier answer quoted back to it for suggestions.
    assert_hidden(re.sub(r"<answer>.*?</answer>", "", prompts, flags=re.DOTALL))
    events = parse_sse(body)
    citations = next(d for n, d in events if n == "citations")
    assert [c["path"] for c in citations["citations"]] == ["retrieval/citations.md"]
    read = [p["path"] for p in next(d for n, d in events if n == "pages")["pages"]]
    assert read[0] == "retrieval/citations.md" and "hr/salaries.md" not in read  # (+ a keyword page bob may read)


def test_a_page_bob_may_read_does_not_name_a_hidden_page_to_the_model(kb):
    with FakeOpenAI() as fake:
        fake.reply_json({"paths": ["ops/links.md"]}, when="You are the navigator of a wiki", repeat=True)
        fake.reply_stream(["See [Links](ops/links.md)."], when="You answer questions", repeat=True)
        with client_for(kb, BOB, model=MODEL, api_base=API_BASE, api_key="k", cache=False, max_retries=0) as bob:
            body = bob.post("/api/chat", json={"question": "Where are things?"}).text
    answer_prompt = next(all_text(r) for r in fake.requests if "You answer questions" in all_text(r))
    assert "See the bands and nothing." in answer_prompt  # the link's words, not its target
    assert_hidden(answer_prompt)
    assert "event: error" not in body


def test_revoking_a_group_or_a_user_takes_effect_on_the_next_request(kb):
    toml = kb.root / "kaas.toml"
    with client_for(kb, ALICE) as alice:
        assert alice.get("/api/pages/hr/salaries.md").status_code == 200
        toml.write_text(USERS_TOML.replace('groups = ["hr"]', 'groups = ["eng"]'))
        assert alice.get("/api/pages/hr/salaries.md").status_code == 404
        assert "hr/salaries.md" not in alice.get("/api/index").text
        toml.write_text(USERS_TOML.replace(f'token = "{ALICE}"', 'token = "another-token-0123456789"'))
        assert alice.get("/api/index").status_code == 401
        toml.write_text("[users.alice]\ngroups = 3\n")  # broken: every token refused, none admitted
        assert alice.get("/api/index").status_code == 401


def test_a_hand_edit_that_restricts_a_page_hides_it_before_any_reindex(kb):
    page = kb.wiki_dir / "ops" / "links.md"
    with client_for(kb, BOB) as bob:
        assert "See the bands" in chat(bob, "Where are the links to the bands?")  # catalog now loaded and cached
        page.write_text(page.read_text().replace("title: Links", "title: Links\naccess: [hr]"))
        # The running server's catalog is stale (no re-index yet), but the text is refused as it is read.
        assert "See the bands" not in chat(bob, "Where are the links to the bands?")
        assert bob.get("/api/pages/ops/links.md").status_code == 404
    with client_for(kb, BOB) as bob:  # a fresh load re-reads files newer than the index
        assert "ops/links.md" not in bob.get("/api/index").text


async def test_a_saved_answer_inherits_the_access_of_the_pages_it_cites(kb):
    service = build_service(Settings(kb=kb.root))
    alice = Reader("alice", frozenset({"hr"}))
    result = await ask(service, AskRequest(question="zanzibarite band", reader=alice))
    assert "hr/salaries.md" in [c["path"] for c in result.citations]
    from kb_ai.navigate.save import save_answer

    path = save_answer(kb, "zanzibarite band", result, reader=alice)
    assert path.startswith("answers/zanzibarite-band-") and path != "answers/zanzibarite-band.md"
    assert load_page(kb, path, OWNER).article.access == ("hr",)
    bob = Reader("bob", frozenset({"eng"}))
    assert path not in kb.catalog().visible_to(bob)


async def test_mcp_over_http_lists_reads_and_answers_per_token(kb):
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    app = create_app(Settings(kb=kb.root), allowed_hosts=["127.0.0.1", "localhost"])
    with ServerThread(app) as server:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {BOB}"}, timeout=30) as http:
            async with Client(streamable_http_client(server.url + "/mcp", http_client=http)) as client:
                listing = await client.call_tool("list_pages", {})
                hidden = await client.call_tool("read_page", {"path": "hr/salaries.md"})
                missing = await client.call_tool("read_page", {"path": "hr/nowhere.md"})
                answer = await client.call_tool("ask", {"question": "zanzibarite salary band", "paths": ["hr/salaries.md"]})
                answer2 = await client.call_tool("ask", {"question": "Which pay band pays most?"})
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {ALICE}"}, timeout=30) as http:
            async with Client(streamable_http_client(server.url + "/mcp", http_client=http)) as client:
                alice_listing = await client.call_tool("list_pages", {})
    assert_hidden(json.dumps(listing.structured_content) + listing.content[0].text)
    assert hidden.is_error and missing.is_error
    assert hidden.content[0].text.replace("salaries", "X") == missing.content[0].text.replace("nowhere", "X")
    assert answer.is_error and "no page" in answer.content[0].text
    assert_hidden(answer2.content[0].text + json.dumps(answer2.structured_content))
    assert "hr/salaries.md" in json.dumps(alice_listing.structured_content)


def test_user_table_is_validated(tmp_path):
    from kb_ai.errors import ConfigError

    (tmp_path / "kaas.toml").write_text('[users.x]\ntoken = "short"\n')
    with pytest.raises(ConfigError, match="at least 16"):
        UserDirectory(tmp_path).check()
    (tmp_path / "kaas.toml").write_text(f'[users.x]\ntoken = "{ALICE}"\n[users.y]\ntoken = "{ALICE}"\n')
    with pytest.raises(ConfigError, match="share a token"):
        UserDirectory(tmp_path).check()
    (tmp_path / "kaas.toml").write_text(USERS_TOML)
    users = UserDirectory(tmp_path)
    assert users.required() and users.reader_for(OPS) == Reader("ops", frozenset(), True)
    assert users.reader_for(BOB).groups == {"eng"} and users.reader_for("nope-nope-nope-nope") is None


def test_cli_and_stdio_mcp_can_act_as_a_user(kb):
    from click.testing import CliRunner

    from kb_ai.cli import cli

    runner = CliRunner()
    as_bob = runner.invoke(cli, ["--kb", str(kb.root), "ask", "What is the zanzibarite salary band?", "--user", "bob", "--json"])
    assert as_bob.exit_code == 0, as_bob.output
    assert "91,000" not in as_bob.stdout and "hr/salaries.md" not in as_bob.stdout
    as_alice = runner.invoke(cli, ["--kb", str(kb.root), "ask", "What is the zanzibarite salary band?", "--user", "alice"])
    assert "91,000" in as_alice.stdout
    unknown = runner.invoke(cli, ["--kb", str(kb.root), "ask", "x", "--user", "mallory"])
    assert unknown.exit_code == 2 and "no user 'mallory'" in unknown.stderr


async def test_stdio_mcp_server_built_for_a_user_sees_only_their_pages(kb):
    from mcp.client import Client

    from kb_ai.server.mcp import build_mcp_server

    bob = UserDirectory(kb.root).reader_named("bob")
    async with Client(build_mcp_server(Settings(kb=kb.root), stdio_reader=bob)) as client:
        listing = await client.call_tool("list_pages", {})
        hidden = await client.call_tool("read_page", {"path": "hr/salaries.md"})
    assert_hidden(json.dumps(listing.structured_content))
    assert hidden.is_error
