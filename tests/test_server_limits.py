"""Serving limits (server/limits.py): a server's model calls sized for serving, and per user
(a token of kaas.toml's [users]) answers in flight and questions a minute, past which the
request is answered 429 with Retry-After — before any model is called — while other users and
the admin go on. All of it configurable (kaas.toml, KAAS_* variables)."""

from __future__ import annotations

import asyncio
import contextlib
import json

import httpx
import pytest
from starlette.testclient import TestClient

from kb_ai.config import ConfigError, Settings, load_settings
from kb_ai.llm.config import HOSTED_CONCURRENCY
from kb_ai.navigate.ask import AskService
from kb_ai.server import create_app
from kb_ai.store.kb import KnowledgeBase

from helpers import llm_settings
from server_fakes import PacedNavigator, ServerThread

ADMIN = "admin-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef"
CAROL = "carol-token-0123456789abcdef"
USERS = f"""
[users.bob]
token = "{BOB}"
groups = ["eng"]

[users.carol]
token = "{CAROL}"
groups = ["eng"]
"""


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def users_kb(sample_kb):
    (sample_kb.root / "kaas.toml").write_text(USERS, encoding="utf-8")
    return sample_kb


def test_past_its_rate_a_user_gets_429_with_retry_after_and_others_go_on(users_kb):
    settings = Settings(kb=users_kb.root, api_token=ADMIN, user_rate=3)
    with TestClient(create_app(settings)) as client:
        for _ in range(3):
            assert client.post("/api/chat", json={"question": "deployment?"}, headers=_auth(BOB)).status_code == 200
        refused = client.post("/api/chat", json={"question": "deployment?"}, headers=_auth(BOB))
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "rate_limited"
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert refused.headers["cache-control"] == "no-store"
        # carol has her own allowance; the admin is not limited per user
        assert client.post("/api/chat", json={"question": "deployment?"}, headers=_auth(CAROL)).status_code == 200
        for _ in range(5):
            assert client.post("/api/chat", json={"question": "x?"}, headers=_auth(ADMIN)).status_code == 200
        # reading pages is not a question: not rate limited
        assert client.get("/api/index", headers=_auth(BOB)).status_code == 200


def test_a_refused_question_calls_no_model(users_kb):
    navigator = PacedNavigator(tokens=2)
    settings = Settings(kb=users_kb.root, api_token=ADMIN, user_rate=1)
    service = AskService(KnowledgeBase(users_kb.root), settings, navigator)
    with TestClient(create_app(settings, service=service)) as client:
        assert client.post("/api/chat", json={"question": "one?"}, headers=_auth(BOB)).status_code == 200
        assert client.post("/api/chat", json={"question": "two?"}, headers=_auth(BOB)).status_code == 429
    assert navigator.questions == ["one?"]


def test_past_its_answers_in_flight_a_user_gets_429_until_one_ends(users_kb):
    """A real server (the answers stream concurrently): bob's second answer while his first
    still streams is refused; carol's is not; after bob's first ends, bob may ask again."""
    navigator = PacedNavigator(tokens=40, token_delay=0.05)
    settings = Settings(kb=users_kb.root, api_token=ADMIN, user_concurrency=1, user_rate=0)
    service = AskService(KnowledgeBase(users_kb.root), settings, navigator)
    with ServerThread(create_app(settings, service=service)) as server:
        base = server.url

        async def run() -> tuple[int, int, int, int]:
            async with httpx.AsyncClient(base_url=base, timeout=30) as client:
                async with client.stream("POST", "/api/chat", json={"question": "long?"}, headers=_auth(BOB)) as first:
                    assert first.status_code == 200
                    lines = first.aiter_lines()
                    await lines.__anext__()  # the first answer is in flight
                    second = await client.post("/api/chat", json={"question": "again?"}, headers=_auth(BOB))
                    other = await client.post("/api/chat", json={"question": "carol?"}, headers=_auth(CAROL))
                    async for _line in lines:
                        pass
                after = await client.post("/api/chat", json={"question": "after?"}, headers=_auth(BOB))
                return second.status_code, int(second.headers.get("retry-after", 0)), other.status_code, after.status_code

        second, retry_after, other, after = asyncio.run(run())
    assert (second, other, after) == (429, 200, 200)
    assert retry_after >= 1


def test_limits_are_read_from_kaas_toml_and_the_environment(tmp_path):
    (tmp_path / "kaas.toml").write_text("serve_concurrency = 32\nuser_concurrency = 2\nuser_rate = 0\n")
    settings = load_settings(tmp_path, env={"KAAS_USER_RATE": "12"})
    assert (settings.serve_concurrency, settings.user_concurrency, settings.user_rate) == (32, 2, 12)
    assert load_settings(tmp_path, env={}).user_rate == 0  # 0: no limit
    with pytest.raises(ConfigError):
        load_settings(tmp_path, env={"KAAS_SERVE_CONCURRENCY": "0"})
    with pytest.raises(ConfigError):
        load_settings(tmp_path, env={"KAAS_USER_RATE": "lots"})
    defaults = Settings(kb=tmp_path)
    assert defaults.serve_concurrency > HOSTED_CONCURRENCY  # a server is sized for many chats


def test_a_server_sizes_its_model_calls_for_serving(sample_kb):
    settings = llm_settings(sample_kb).with_overrides(serve_concurrency=48, concurrency=2)
    app = create_app(settings)
    assert app.state.kaas.service.navigator.gateway.config.concurrency == 48


def test_streamed_answers_leave_slots_for_the_calls_that_start_a_question(sample_kb):
    settings = llm_settings(sample_kb).with_overrides(serve_concurrency=48, serve_streams=8)
    gateway = create_app(settings).state.kaas.service.navigator.gateway
    assert (gateway.config.concurrency, gateway.config.stream_concurrency) == (48, 8)

    async def held() -> tuple[bool, bool]:
        streams = gateway.stream_slot()
        for _ in range(8):
            await streams.acquire()
        # every stream slot taken: a ninth stream waits, a short call (selection) does not
        return streams.locked(), gateway.slot().locked()

    assert asyncio.run(held()) == (True, False)
    assert llm_settings(sample_kb).stream_concurrency is None  # a compile or a CLI process: no stream limit of its own


def test_one_reader_cannot_take_every_stream(users_kb, monkeypatch):
    """Streams (change streams and chats together) are capped per user below the server's cap:
    bob's third is refused 429 ``too_many_streams`` while carol and the admin still connect; a
    chat of bob's counts too; past the server's own cap (here 5) even the admin gets 503."""
    from kb_ai.server import events

    monkeypatch.setattr(events, "MAX_STREAMS", 5)
    navigator = PacedNavigator(tokens=40, token_delay=0.05)
    settings = Settings(kb=users_kb.root, api_token=ADMIN, user_streams=2, user_rate=0)
    service = AskService(KnowledgeBase(users_kb.root), settings, navigator)

    async def run(base: str) -> dict[str, object]:
        seen: dict[str, object] = {}
        async with contextlib.AsyncExitStack() as stack:
            client = await stack.enter_async_context(httpx.AsyncClient(base_url=base, timeout=30))
            lines: list = []

            async def open_stream(token: str, method: str = "GET", path: str = "/api/events", **kw) -> httpx.Response:
                response = await stack.enter_async_context(client.stream(method, path, headers=_auth(token), **kw))
                if response.status_code == 200:
                    lines.append(response.aiter_lines())  # kept: a dropped iterator closes its stream
                    await lines[-1].__anext__()  # the stream is open at the server
                return response

            first = await open_stream(BOB)
            await open_stream(BOB, "POST", "/api/chat", json={"question": "long?"})  # a chat is a stream too
            refused = await open_stream(BOB)
            seen["bob"] = [first.status_code, refused.status_code]
            if refused.status_code != 200:
                seen["refusal"] = (await refused.aread(), refused.headers.get("retry-after"))
            seen["others"] = [(await open_stream(CAROL)).status_code, (await open_stream(ADMIN)).status_code]
            for _ in range(2):  # change streams 4 and 5 (the chat is not one): the server's cap
                assert (await open_stream(ADMIN)).status_code == 200
            seen["full"] = (await open_stream(CAROL)).status_code
        return seen

    with ServerThread(create_app(settings, service=service)) as server:
        seen = asyncio.run(run(server.url))
    assert seen["bob"] == [200, 429]
    body, retry_after = seen["refusal"]
    assert json.loads(body)["error"]["code"] == "too_many_streams" and int(retry_after) >= 1
    assert seen["others"] == [200, 200]
    assert seen["full"] == 503


def test_a_stream_limit_is_below_the_servers(users_kb):
    settings = load_settings(users_kb.root, env={"KAAS_USER_STREAMS": "5", "KAAS_API_TOKEN": ADMIN})
    assert settings.user_streams == 5
    with pytest.raises(ConfigError, match="below the server's 200"):
        create_app(settings.with_overrides(user_streams=200))
    create_app(settings.with_overrides(user_streams=0))  # 0: no per-user limit
