"""Per-user limits on MCP tool calls (server/limits.py): an ``ask`` holds one of its user's
answer slots while it runs, whatever carries it, and an answer whose HTTP request was dropped is
cancelled, since nobody can receive it. A reader who sends ``tools/call ask`` and hangs up at
once cannot get more answers running at the model than ``user_concurrency``."""

from __future__ import annotations

import time

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from kb_ai.config import Settings
from kb_ai.navigate.ask import AskService
from kb_ai.server import create_app
from kb_ai.server.mcp import build_mcp_server
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.users import UserDirectory

from server_fakes import PacedNavigator, ServerThread

ADMIN = "admin-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef"
USERS = f"""
[users.bob]
token = "{BOB}"
groups = ["eng"]
"""


@pytest.fixture
def users_kb(sample_kb):
    (sample_kb.root / "kaas.toml").write_text(USERS, encoding="utf-8")
    return sample_kb


def _call(request_id: int, question: str) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "ask", "arguments": {"question": question}}}


async def _wait_until_idle(navigator: PacedNavigator, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while navigator.answering and time.monotonic() < deadline:
        await anyio.sleep(0.02)


@pytest.mark.parametrize("stateless", [False, True], ids=["session", "stateless"])
async def test_asks_dropped_at_once_never_run_more_than_the_users_limit(users_kb, stateless):
    """A real MCP session (the SDK client, 2025 handshake) for bob; then 6 ``tools/call ask``
    POSTs on it, each connection closed as soon as the answer's stream opens. The model never
    has more than 2 of bob's answers at once, the dropped ones stop, and bob can ask again."""
    navigator = PacedNavigator(tokens=25, token_delay=0.04)  # an answer takes 1 s
    settings = Settings(kb=users_kb.root, api_token=ADMIN, user_concurrency=2, user_rate=0)
    service = AskService(KnowledgeBase(users_kb.root), settings, navigator)
    headers: dict[str, str] = {}

    async def keep_session(response: httpx2.Response) -> None:
        for name in ("mcp-session-id",):
            if name in response.headers:
                headers[name] = response.headers[name]

    with ServerThread(create_app(settings, service=service, mcp_stateless=stateless)) as server:
        url = server.url + "/mcp"
        auth = {"Authorization": f"Bearer {BOB}"}
        async with httpx2.AsyncClient(headers=auth, timeout=30, event_hooks={"response": [keep_session]}) as http:
            async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
                headers["mcp-protocol-version"] = client.protocol_version
                async with httpx.AsyncClient(timeout=10) as raw:
                    for number in range(6):
                        async with raw.stream("POST", url, json=_call(100 + number, f"question {number}?"),
                                              headers={**auth, **headers, "Accept": "application/json, text/event-stream"}) as response:
                            assert response.status_code == 200  # the answer's stream is open: hang up
                        await anyio.sleep(0.02)
                await _wait_until_idle(navigator, 3)
                assert navigator.most_answering <= 2
                assert navigator.answering == 0
                assert navigator.streams_closed_early == navigator.streams_started  # none ran on for nobody
                navigator.tokens = 2  # a short answer, to see that bob's slots are free again
                again = await client.call_tool("ask", {"question": "and now?"})
    assert not again.is_error, again.content
    assert navigator.streams_finished == 1


async def test_an_ask_holds_a_slot_over_stdio_too(users_kb):
    """``kaas mcp --user bob`` (the tools act as bob, no HTTP at all): 6 asks at once, 2 run,
    the others are tool errors saying why; none of them reached the model."""
    navigator = PacedNavigator(tokens=10, token_delay=0.02)
    settings = Settings(kb=users_kb.root, api_token=ADMIN, user_concurrency=2, user_rate=0)
    service = AskService(KnowledgeBase(users_kb.root), settings, navigator)
    bob = UserDirectory(users_kb.root, ADMIN).reader_for(BOB)
    results = []
    async with Client(build_mcp_server(settings, service, stdio_reader=bob)) as client:
        async with anyio.create_task_group() as group:
            for number in range(6):
                async def ask(number=number) -> None:
                    results.append(await client.call_tool("ask", {"question": f"q{number}?"}))
                group.start_soon(ask)
    refused = [r for r in results if r.is_error]
    assert navigator.most_answering == 2
    assert len(refused) == 4 and navigator.streams_started == 2
    assert all("[rate_limited]" in r.content[0].text for r in refused)


async def test_an_ask_over_mcp_is_a_question_of_the_users_rate(users_kb):
    """``user_rate`` counts MCP asks as it counts chats: bob's third ask in a minute is refused."""
    navigator = PacedNavigator(tokens=2)
    settings = Settings(kb=users_kb.root, api_token=ADMIN, user_rate=2)
    service = AskService(KnowledgeBase(users_kb.root), settings, navigator)
    bob = UserDirectory(users_kb.root, ADMIN).reader_for(BOB)
    async with Client(build_mcp_server(settings, service, stdio_reader=bob)) as client:
        results = [await client.call_tool("ask", {"question": f"q{n}?"}) for n in range(3)]
        pages = await client.call_tool("list_pages", {})  # reading is not a question
    assert [r.is_error for r in results] == [False, False, True]
    assert "questions a minute" in results[2].content[0].text and "[rate_limited]" in results[2].content[0].text
    assert navigator.questions == ["q0?", "q1?"] and not pages.is_error
