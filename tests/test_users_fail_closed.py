"""A server that has needed tokens never opens up while kaas.toml is being edited: a users table
that is missing, empty, unreadable or broken refuses every token but KAAS_API_TOKEN until it is
back, and says so in the log. ``kaas mcp --user`` resolves its user on every call."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from starlette.testclient import TestClient

from kb_ai.config import Settings
from kb_ai.server import create_app
from kb_ai.store.kb import KnowledgeBase

from helpers import write_page

KAAS = str(Path(sys.executable).with_name("kaas"))
PYTHONPATH = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}  # to run on other code
BOB = "bob-token-0123456789abcdef"
ADMIN = "admin-token-from-the-environment-0123"
USERS = f'[users.bob]\ntoken = "{BOB}"\ngroups = ["hr"]\n'


@pytest.fixture
def kb(tmp_path) -> KnowledgeBase:
    wiki = tmp_path / "wiki"
    write_page(wiki, "hr/salaries.md", "Salary bands", "Pay bands.", "# Bands\n\nThe top band pays 91,000.",
               topic="hr", access=["hr"])
    write_page(wiki, "ops/deploy.md", "Deploy", "How to deploy.", "# Deploy\n\nRun it.", topic="ops")
    (tmp_path / "kaas.toml").write_text(USERS)
    kb = KnowledgeBase(tmp_path)
    kb.reindex()
    return kb


def _statuses(client: TestClient) -> dict[str, int]:
    def get(token: str | None) -> int:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return client.get("/api/pages/hr/salaries.md", headers=headers).status_code

    put = client.put("/api/pages/hr/planted.md", json={"markdown": "---\ntitle: planted\n---\nx\n"})
    return {"none": get(None), "bob": get(BOB), "admin": get(ADMIN), "anonymous put": put.status_code}


def _broken_states(toml: Path):
    text = toml.read_text()
    yield "missing", lambda: toml.rename(toml.with_name("kaas.toml~"))
    yield "restored", lambda: toml.with_name("kaas.toml~").rename(toml)
    yield "empty", lambda: toml.write_text("")
    yield "no users left", lambda: toml.write_text("[users]\n")
    yield "other settings only", lambda: toml.write_text('read_budget = 9000\n')
    yield "broken", lambda: toml.write_text("[users.bob]\ngroups = 3\n")
    yield "not TOML", lambda: toml.write_text("[users.bob\n")
    yield "a folder", lambda: (toml.unlink(), toml.mkdir())
    yield "restored", lambda: (toml.rmdir(), toml.write_text(text))


def test_a_server_with_users_fails_closed_while_kaas_toml_is_missing_empty_or_broken(kb, caplog):
    toml = kb.root / "kaas.toml"
    with TestClient(create_app(Settings(kb=kb.root, api_token=ADMIN), mcp=False)) as client:
        assert _statuses(client) == {"none": 401, "bob": 200, "admin": 200, "anonymous put": 401}
        for state, change in _broken_states(toml):
            caplog.clear()
            with caplog.at_level(logging.ERROR, logger="kb_ai.store.users"):
                change()
                seen = _statuses(client)
            if state == "restored":
                assert seen == {"none": 401, "bob": 200, "admin": 200, "anonymous put": 401}, state
                continue
            # Nobody gets in without a token, bob's token is refused, the environment's admin token works.
            assert seen == {"none": 401, "bob": 401, "admin": 200, "anonymous put": 401}, state
            assert any("refused" in r.getMessage() for r in caplog.records), state  # logged, once per change
    assert not (kb.wiki_dir / "hr" / "planted.md").exists()


def test_without_an_admin_token_a_missing_table_refuses_everyone(kb):
    toml = kb.root / "kaas.toml"
    with TestClient(create_app(Settings(kb=kb.root), mcp=False)) as client:
        assert client.get("/api/index").status_code == 401
        toml.unlink()
        assert client.get("/api/index").status_code == 401
        assert client.get("/wiki/hr/salaries.md").status_code == 401
        assert client.post("/mcp", json={}).status_code == 401
        toml.write_text(USERS)
        assert client.get("/api/index", headers={"Authorization": f"Bearer {BOB}"}).status_code == 200


def test_an_open_server_closes_when_users_appear_and_stays_closed(kb):
    toml = kb.root / "kaas.toml"
    toml.unlink()
    with TestClient(create_app(Settings(kb=kb.root), mcp=False)) as client:
        assert client.get("/api/index").status_code == 200  # no users, no token: the owner's loopback server
        toml.write_text(USERS)
        assert client.get("/api/index").status_code == 401
        toml.unlink()
        assert client.get("/api/index").status_code == 401  # only a restart opens it again


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_table_refuses_every_user(kb):
    toml = kb.root / "kaas.toml"
    with TestClient(create_app(Settings(kb=kb.root), mcp=False)) as client:
        toml.chmod(0)
        try:
            assert client.get("/api/index", headers={"Authorization": f"Bearer {BOB}"}).status_code == 401
        finally:
            toml.chmod(0o644)


async def test_stdio_mcp_as_a_user_follows_kaas_toml_on_every_call(kb):
    toml = kb.root / "kaas.toml"
    params = StdioServerParameters(command=KAAS, args=["--kb", str(kb.root), "mcp", "--user", "bob"],
                                   env={"PATH": "/usr/bin:/bin", **PYTHONPATH})
    async with Client(params) as client:
        page = await client.call_tool("read_page", {"path": "hr/salaries.md"})
        assert not page.is_error and "91,000" in page.structured_content["markdown"]
        toml.write_text(USERS.replace('groups = ["hr"]', "groups = []"))  # bob leaves hr
        page = await client.call_tool("read_page", {"path": "hr/salaries.md"})
        assert page.is_error and "91,000" not in str(page.content)
        toml.write_text('[users.carol]\ntoken = "carol-token-0123456789abcdef"\n')  # bob revoked
        listing = await client.call_tool("list_pages", {})
        assert listing.is_error and "no user 'bob'" in listing.content[0].text
        toml.unlink()  # the table is gone: refused, never the owner
        for tool, args in [("list_pages", {}), ("read_page", {"path": "ops/deploy.md"}),
                           ("ask", {"question": "How to deploy?"})]:
            result = await client.call_tool(tool, args)
            assert result.is_error and "[unauthorized]" in result.content[0].text, (tool, result)
        toml.write_text(USERS)
        page = await client.call_tool("read_page", {"path": "hr/salaries.md"})
        assert not page.is_error
