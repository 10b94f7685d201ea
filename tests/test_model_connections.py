"""Connections to an OpenAI-compatible model server (issue 17 item 5): a running server shares
keep-alive connections between its model calls and closes them at shutdown; other event loops
keep their own per-call connections; an abandoned stream does not poison the pool.

Everything runs against a fake model server on 127.0.0.1 (server_fakes.py) whose connections are
seen from both ends: the fake records each request's client port, and /proc/net/tcp tells which
connections to it are still open.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path

import pytest
from server_fakes import FakeLLMStats, ServerThread, fake_llm_app
from starlette.testclient import TestClient

from helpers import llm_settings
from kb_ai.llm.config import GatewayConfig
from kb_ai.llm.gateway import LLMGateway
from kb_ai.server.app import create_app

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads open connections from /proc/net/tcp")

QUESTION = "How are citations validated?"


class CountingModel:
    """The fake model server, recording the client port (= the connection) of every request."""

    def __init__(self, token_delay: float = 0.0):
        self.stats = FakeLLMStats()
        self.ports: list[int] = []
        inner = fake_llm_app(self.stats, token_delay)

        async def app(scope, receive, send):
            if scope["type"] == "http":
                self.ports.append(scope["client"][1])
            await inner(scope, receive, send)

        self.thread = ServerThread(app)

    def __enter__(self) -> "CountingModel":
        self.thread.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.thread.__exit__(*exc)

    @property
    def port(self) -> int:
        return self.thread.port

    @property
    def api_base(self) -> str:
        return f"{self.thread.url}/v1"

    def open_connections(self) -> int:
        """Connections to the fake still established (client side: remote port = the fake's)."""
        count = 0
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                lines = Path(table).read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                fields = line.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if remote_port == self.port and fields[3] == "01":  # 01 = ESTABLISHED
                    count += 1
        return count

    def wait_closed(self, seconds: float = 5.0) -> int:
        deadline = time.monotonic() + seconds
        while self.open_connections() and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.open_connections()


def gateway(api_base: str) -> LLMGateway:
    return LLMGateway(GatewayConfig(model="openai/fake", api_base=api_base, api_key="x", timeout=5.0,
                                    max_retries=0, direct_http=True))


MESSAGES = [{"role": "system", "content": "Answer."}, {"role": "user", "content": "Say something."}]


async def stream_text(gw: LLMGateway) -> str:
    parts = []
    async for delta in gw.stream(MESSAGES, purpose="answer", max_tokens=200):
        parts.append(delta)
    return "".join(parts)


def test_a_server_reuses_its_model_connections_and_closes_them_at_shutdown(sample_kb):
    with CountingModel() as model:
        app = create_app(llm_settings(sample_kb, model="openai/fake", api_base=model.api_base))
        with TestClient(app) as client:
            for _ in range(3):
                text = client.post("/api/chat", json={"question": QUESTION}).text
                assert "event: done" in text and "event: error" not in text
            calls = len(model.ports)
            assert calls >= 6  # a selection and an answer per chat
            # One connection carried every call (selection replies and whole answer streams).
            assert len(set(model.ports)) == 1, model.ports
            assert model.open_connections() == 1
        # The server stopped: nothing of it stays connected to the model.
        assert model.wait_closed() == 0


def test_a_server_started_twice_on_new_event_loops_answers_each_time(sample_kb):
    """TestClient runs each lifespan on its own event loop: a pool is never carried over."""
    with CountingModel() as model:
        app = create_app(llm_settings(sample_kb, model="openai/fake", api_base=model.api_base))
        for _ in range(2):
            with TestClient(app) as client:
                assert "event: done" in client.post("/api/chat", json={"question": QUESTION}).text
            assert model.wait_closed() == 0
        assert len(set(model.ports)) == 2  # one pooled connection per run


def test_calls_on_another_event_loop_keep_their_own_connections(tmp_path):
    """A gateway pooled on one loop (a server in its thread) is used from another loop (the CLI,
    a test): those calls open and close their own connection; the pool is untouched."""
    with CountingModel() as model:
        gw = gateway(model.api_base)
        pooled_ready, release, done = threading.Event(), threading.Event(), threading.Event()
        results: dict[str, str] = {}

        async def server_loop() -> None:
            async with gw.pooled():
                results["pooled"] = await gw.complete(MESSAGES, purpose="select", max_tokens=50)
                pooled_ready.set()
                while not release.is_set():
                    await asyncio.sleep(0.01)
                results["pooled again"] = await stream_text(gw)
            done.set()

        thread = threading.Thread(target=lambda: asyncio.run(server_loop()))
        thread.start()
        assert pooled_ready.wait(10)
        assert model.open_connections() == 1  # the pool's, kept alive

        other = asyncio.run(stream_text(gw))  # another loop: its own connection, closed after
        assert other.strip()
        assert model.open_connections() == 1
        release.set()
        thread.join(10)
        assert done.is_set() and results["pooled"] and results["pooled again"].strip()
        assert model.wait_closed() == 0
        pool_port, other_port = model.ports[0], model.ports[1]
        assert pool_port != other_port and model.ports[2] == pool_port


def test_an_abandoned_stream_does_not_break_the_next_call(tmp_path):
    """A reader who goes away mid-answer: that connection is closed, not returned half-read;
    the next calls of the pool get a working one."""
    with CountingModel(token_delay=0.02) as model:
        gw = gateway(model.api_base)

        async def run() -> tuple[str, str]:
            async with gw.pooled():
                stream = gw.stream(MESSAGES, purpose="answer", max_tokens=200)
                async for _delta in stream:
                    break
                await stream.aclose()
                text = await gw.complete(MESSAGES, purpose="select", max_tokens=50)
                return text, await stream_text(gw)

        text, streamed = asyncio.run(run())
        assert text and streamed.strip()
        assert model.stats.streams_abandoned == 1
        assert model.wait_closed() == 0


def test_calls_outside_a_pool_leave_no_connection_open(tmp_path):
    with CountingModel() as model:
        gw = gateway(model.api_base)

        async def run() -> None:
            await gw.complete(MESSAGES, purpose="select", max_tokens=50)
            await stream_text(gw)

        asyncio.run(run())
        assert model.wait_closed(1.0) == 0
        assert len(set(model.ports)) == 2


def test_a_model_server_closing_idle_connections_early_is_no_error(tmp_path):
    """A model server whose keep-alive is shorter than the pool's (here 0.2 s): a pooled
    connection it has closed is not reused; the next call opens a new one and succeeds."""
    model = CountingModel()
    model.thread.config.timeout_keep_alive = 0.2
    with model:
        gw = gateway(model.api_base)

        async def run() -> list[str]:
            texts = []
            async with gw.pooled():
                for _ in range(3):
                    texts.append(await gw.complete(MESSAGES, purpose="select", max_tokens=50))
                    texts.append(await stream_text(gw))
                    await asyncio.sleep(0.5)  # the server closes the idle connection meanwhile
            return texts

        texts = asyncio.run(run())
        assert all(t.strip() for t in texts)
        assert len(set(model.ports)) == 3  # one connection per round: closed by the server between
        assert model.wait_closed() == 0


def test_a_compile_reuses_its_model_connections(tmp_path):
    """A compile against an OpenAI-compatible server: its many calls share keep-alive
    connections (no TCP/TLS handshake per call), and none is left open after it."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from bench_compile import fake_response, make_corpus  # noqa: PLC0415

    from starlette.applications import Starlette  # noqa: PLC0415
    from starlette.requests import Request  # noqa: PLC0415
    from starlette.responses import JSONResponse  # noqa: PLC0415
    from starlette.routing import Route  # noqa: PLC0415

    from kb_ai.compile.pipeline import run_compile  # noqa: PLC0415
    from kb_ai.config import Settings  # noqa: PLC0415
    from kb_ai.store.kb import KnowledgeBase  # noqa: PLC0415

    async def chat(request: Request) -> JSONResponse:
        return fake_response(await request.json())

    model = CountingModel()
    model.thread = ServerThread(_counting(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]),
                                          model.ports))
    kb = KnowledgeBase(tmp_path)
    kb.raw_dir.mkdir(parents=True)
    make_corpus(kb.raw_dir, 12)
    with model:
        settings = Settings(kb=tmp_path, model="openai/fake", api_base=model.api_base, api_key="x", cache=False,
                            max_retries=0, timeout=10.0, concurrency=4)
        report = run_compile(settings)
        assert report.mode == "llm" and report.created and not report.failed, report
        calls = len(model.ports)
        assert calls >= 12
        # Calls in flight (concurrency 4) each need a connection; later calls reuse them.
        assert len(set(model.ports)) < calls / 2, (calls, len(set(model.ports)))
        assert model.wait_closed() == 0


def _counting(app, ports: list[int]):
    async def counted(scope, receive, send):
        if scope["type"] == "http":
            ports.append(scope["client"][1])
        await app(scope, receive, send)
    return counted
