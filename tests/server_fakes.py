"""Test doubles for the HTTP server: a real uvicorn server in a thread, a fake OpenAI-compatible
model server on loopback that streams slowly, and a fake navigator that streams at a fixed rate.

Nothing here reaches the network: every server binds 127.0.0.1 on a free port.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from kb_ai.llm.usage import UsageMeter
from kb_ai.navigate.records import ReadPage, Selection, Turn
from kb_ai.store.catalog import Catalog


class ServerThread:
    """Serve an ASGI app with uvicorn on 127.0.0.1:<free port> in a daemon thread."""

    def __init__(self, app: Any, *, host: str = "127.0.0.1", sock: socket.socket | None = None):
        self.config = uvicorn.Config(app, host=host, port=0, log_level="warning", lifespan="on",
                                     timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(self.config)
        # ``sock``: a socket bound beforehand (``bound_socket``), when the app must know its URL.
        run = (lambda: self.server.run(sockets=[sock])) if sock is not None else self.server.run
        self.thread = threading.Thread(target=run, name="test-uvicorn", daemon=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "ServerThread":
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def bound_socket() -> tuple[socket.socket, str]:
    """A loopback socket bound to a free port, and its URL: for an app that must know its URL
    before it starts (``create_app(..., announce_url=url)``), served by ``ServerThread(app, sock=...)``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


# -- a fake OpenAI-compatible model server --------------------------------------------------------

_PAGE = re.compile(r'<page path="([^"]+)" title="([^"]*)"')
_CATALOG_LINE = re.compile(r"^(?:- |\d+\. )\[[^\]]+\]\(([^)]+)\)", re.MULTILINE)
_TOPIC_LINE = re.compile(r"^- ([^\[(\n][^(\n]*?) \(\d[\d,]* articles?\)", re.MULTILINE)


@dataclass
class FakeLLMStats:
    requests: list[dict[str, Any]] = field(default_factory=list)
    streams_started: int = 0
    streams_completed: int = 0
    streams_abandoned: int = 0  # the client went away mid-stream
    tokens_sent: int = 0


def fake_answer_words(prompt: str) -> list[str]:
    """An answer that cites the first page of the answer prompt, as word-sized deltas."""
    pages = _PAGE.findall(prompt)
    path, title = pages[0] if pages else ("missing.md", "Missing")
    text = (f"The wiki explains this in [{title}]({path}). In short, **pages are chosen from the catalog**, "
            "read whole, and the answer cites them. Each citation links to the article, so a reader can "
            "check every claim against its source.")
    return [w + " " for w in text.split(" ")]


def fake_llm_app(stats: FakeLLMStats, token_delay: float = 0.03, answer_words=fake_answer_words) -> Starlette:
    """Chat completions: JSON replies for structured requests, a slow token stream otherwise."""

    async def completions(request: Request):
        body = await request.json()
        stats.requests.append(body)
        messages = body.get("messages") or []
        prompt = "\n".join(str(m.get("content") or "") for m in messages)
        usage = {"prompt_tokens": max(1, len(prompt) // 4), "completion_tokens": 40, "total_tokens": 0}
        if not body.get("stream"):
            if "navigator of a large wiki" in prompt:  # topic step: the first topic shown
                first = _TOPIC_LINE.search(prompt)
                content = json.dumps({"topics": [first.group(1)] if first else []})
            elif "navigator of a wiki" in prompt:
                paths = _CATALOG_LINE.findall(prompt)[:2]
                content = json.dumps({"paths": paths})
            elif "rewrite" in prompt.lower() and "standalone" in prompt.lower():
                content = json.dumps({"query": messages[-1].get("content", "")[-200:]})
            else:
                content = json.dumps({"questions": ["How are pages chosen?", "What is cited?", "How is the catalog built?"]})
            return JSONResponse({
                "id": "chatcmpl-fake", "object": "chat.completion", "created": 1_700_000_000,
                "model": body.get("model", "fake"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                "usage": usage,
            })

        words = answer_words(prompt)

        async def chunks() -> AsyncIterator[bytes]:
            stats.streams_started += 1
            finished = False
            try:
                for i, word in enumerate(words):
                    delta = {"role": "assistant", "content": word} if i == 0 else {"content": word}
                    yield _chunk({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
                    stats.tokens_sent += 1
                    await asyncio.sleep(token_delay)
                yield _chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                yield _chunk({"choices": [], "usage": usage})
                yield b"data: [DONE]\n\n"
                finished = True
                stats.streams_completed += 1
            finally:
                if not finished:
                    stats.streams_abandoned += 1

        return StreamingResponse(chunks(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


def _chunk(payload: dict[str, Any]) -> bytes:
    payload = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1_700_000_000,
               "model": "fake", **payload}
    return f"data: {json.dumps(payload)}\n\n".encode()


class FakeLLMServer(ServerThread):
    """``with FakeLLMServer(token_delay=0.05) as llm: llm.api_base, llm.stats``"""

    def __init__(self, token_delay: float = 0.03):
        self.stats = FakeLLMStats()
        super().__init__(fake_llm_app(self.stats, token_delay))

    @property
    def api_base(self) -> str:
        return f"{self.url}/v1"


# -- a fake navigator ---------------------------------------------------------------------------


class PacedNavigator:
    """Navigator protocol without a model: selects the first catalog pages and streams a fixed
    answer citing them, one token every ``token_delay`` seconds. Records what it was asked and
    whether each answer stream ran to the end or was closed early, and how many answered at once
    (``answering`` now, ``most_answering`` at most)."""

    mode = "llm"

    def __init__(self, tokens: int = 20, token_delay: float = 0.0, pages: int = 1):
        self.tokens = tokens
        self.token_delay = token_delay
        self.pages = pages
        self.questions: list[str] = []
        self.histories: list[list[Turn]] = []
        self.streams_started = 0
        self.streams_finished = 0
        self.streams_closed_early = 0
        self.tokens_sent = 0
        self.answering = 0
        self.most_answering = 0

    def preflight(self) -> None:
        """No model to check."""

    async def rewrite(self, question: str, history: list[Turn], meter: UsageMeter) -> tuple[str, list[str]]:
        return f"standalone: {question}", []

    async def select(self, question: str, catalog: Catalog, max_pages: int, meter: UsageMeter) -> Selection:
        self.questions.append(question)
        return Selection(paths=[e.path for e in catalog.entries[: self.pages]], method="llm")

    async def answer(self, question: str, history: list[Turn], pages: list[ReadPage], *rest: Any) -> AsyncIterator[str]:
        # *rest: (catalog,) meter — tolerant of the protocol gaining arguments
        self.histories.append(list(history))
        self.streams_started += 1
        self.answering += 1
        self.most_answering = max(self.most_answering, self.answering)
        finished = False
        try:
            for i in range(self.tokens):
                if self.token_delay:
                    await asyncio.sleep(self.token_delay)
                self.tokens_sent += 1
                yield f"word{i} "
            if pages:
                yield f"[{pages[0].title}]({pages[0].path})"
            finished = True
            self.streams_finished += 1
        finally:
            self.answering -= 1
            if not finished:
                self.streams_closed_early += 1

    async def suggest(self, question: str, answer: str, pages: list[ReadPage], catalog: Catalog,
                      meter: UsageMeter) -> tuple[list[str], list[str]]:
        return ["What next?"], []

    def not_covered(self) -> str:
        return "Not covered."


def parse_sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(event, data) pairs of an SSE body, skipping comments (pings)."""
    events = []
    for block in re.split(r"\r?\n\r?\n", text):
        name, data = "message", []
        for line in block.splitlines():
            if line.startswith(":") or not line:
                continue
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
        if data:
            events.append((name, json.loads("\n".join(data))))
    return events
