"""``POST /api/chat``: one question answered as Server-Sent Events, in the order of DESIGN.md.

The events are exactly those of ``navigate.ask.ask_events``; this module only validates the
request and frames the events. Whatever goes wrong becomes an ``error`` event with a code, so a
client always sees a well-formed stream that ends. When the client goes away, the event stream
is closed, which closes the answer stream and with it the model's HTTP response: no call keeps
running (and costing) for nobody.
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import aclosing
from typing import Any, AsyncIterator

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request

from kb_ai.errors import BadRequestError, KaasError
from kb_ai.navigate.ask import MAX_PAGES_PER_QUESTION, MAX_QUESTION_CHARS, AskService, ask_events
from kb_ai.navigate.records import AskRequest, Turn
from kb_ai.server.guard import reader_of
from kb_ai.untrusted_text import as_text, json_problem, refuse_json_constant

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 256_000
MAX_HISTORY_TURNS = 40
MAX_TURN_CHARS = 20_000
MAX_PAGES_LIMIT = MAX_PAGES_PER_QUESTION
PING_SECONDS = 15
MAX_JSON_DEPTH = 32  # request bodies are shallow (chat: 3 levels); deeper is a mistake or an attack


def parse_chat_request(payload: Any) -> AskRequest:
    """Validate the JSON body of ``POST /api/chat`` into an ``AskRequest``."""
    if not isinstance(payload, dict):
        raise BadRequestError("the request body must be a JSON object")
    question = payload.get("question")
    if not isinstance(question, str):
        raise BadRequestError("'question' must be a string")
    if len(question) > MAX_QUESTION_CHARS * 2:
        raise BadRequestError(f"the question is longer than {MAX_QUESTION_CHARS} characters")
    history_raw = payload.get("history") or []
    if not isinstance(history_raw, list):
        raise BadRequestError("'history' must be a list of {role, content} objects")
    history: list[Turn] = []
    for number, turn in enumerate(history_raw[-MAX_HISTORY_TURNS:], start=1):
        if not isinstance(turn, dict):
            raise BadRequestError(f"history item {number} must be an object with 'role' and 'content'")
        role, content = turn.get("role"), turn.get("content")
        if role not in ("user", "assistant") or not isinstance(content, str):
            raise BadRequestError(f"history item {number} needs role 'user' or 'assistant' and string content")
        history.append(Turn(role, content[:MAX_TURN_CHARS]))
    flags = {}
    for name in ("rewrite", "suggest", "model_only"):
        value = payload.get(name, False)
        if not isinstance(value, bool):
            raise BadRequestError(f"'{name}' must be true or false")
        flags[name] = value
    max_pages = payload.get("max_pages")
    if max_pages is not None and (isinstance(max_pages, bool) or not isinstance(max_pages, int)
                                  or not 1 <= max_pages <= MAX_PAGES_LIMIT):
        raise BadRequestError(f"'max_pages' must be a whole number from 1 to {MAX_PAGES_LIMIT}")
    return AskRequest(question=question, history=history, max_pages=max_pages, **flags)


def _frame(name: str, data: dict[str, Any]) -> ServerSentEvent:
    """One event, made here (inside ``chat_events``'s error handling) as the text it is sent as:
    a frame that could not be encoded would otherwise fail in the response, after the stream's
    generator, and cut the stream off without an ``error`` or ``done`` event."""
    return ServerSentEvent(event=name, data=as_text(json.dumps(data, ensure_ascii=False, default=str)))


async def chat_events(service: AskService, request: AskRequest) -> AsyncIterator[ServerSentEvent]:
    """The SSE frames of one answer. Never raises: a failure is an ``error`` frame, then the end."""
    started = time.perf_counter()
    outcome = "incomplete"
    try:
        async with aclosing(ask_events(service, request)) as events:
            async for event in events:
                if event.name == "error":
                    outcome = f"error {event.data.get('code')}"
                elif event.name == "done":
                    outcome = "done"
                yield _frame(event.name, event.data)
    except KaasError as exc:  # ask_events should have turned it into an event; be safe anyway
        outcome = f"error {exc.code}"
        yield _frame("error", {"code": exc.code, "message": exc.message})
    except Exception:  # a bug: log it whole, tell the client briefly, keep the stream well-formed
        log.exception("chat stream failed")
        outcome = "error internal_error"
        yield _frame("error", {"code": "internal_error", "message": "the server failed while answering; see its log"})
    finally:
        log.info("chat %s in %.0f ms", outcome, (time.perf_counter() - started) * 1000)


async def _error_stream(exc: KaasError) -> AsyncIterator[ServerSentEvent]:
    yield _frame("error", {"code": exc.code, "message": exc.message})


async def read_json(request: Request, max_bytes: int = MAX_BODY_BYTES, what: str = "the request") -> Any:
    """The JSON body of a POST/PUT: ``Content-Type: application/json`` (which a cross-site form
    cannot send without a preflight), at most ``max_bytes`` (read in chunks, never buffered past
    the limit), valid UTF-8 JSON (no ``NaN``/``Infinity``), nested at most ``MAX_JSON_DEPTH``
    levels, and text only: a lone surrogate (``"\\ud800"``) is valid JSON but not Unicode, and no
    later step (a file, the model, a log line) could encode it. Anything else is a
    BadRequestError (HTTP 400), raised here, before any work."""
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type != "application/json":
        raise BadRequestError(f"send {what} as JSON (Content-Type: application/json)")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise BadRequestError(f"the request body is larger than {max_bytes} bytes")
    try:
        payload = json.loads(body.decode("utf-8"), parse_constant=refuse_json_constant)
    except RecursionError:
        raise BadRequestError(f"the request body is nested more than {MAX_JSON_DEPTH} levels deep") from None
    except UnicodeDecodeError as exc:
        raise BadRequestError(f"the request body is not UTF-8 (byte {exc.start})") from None
    except ValueError:
        raise BadRequestError("the request body is not valid JSON") from None
    check_json_text(payload, "the request body")
    return payload



def check_json_text(value: Any, what: str) -> None:
    """Refuse (BadRequestError) a parsed JSON value nested deeper than ``MAX_JSON_DEPTH`` or
    holding a lone surrogate in any key or string (``untrusted_text.json_problem``)."""
    problem = json_problem(value, MAX_JSON_DEPTH)
    if problem:
        raise BadRequestError(f"{what}: {problem}")


class AnswerStreamResponse(EventSourceResponse):
    """An SSE response that always closes its event stream when the response ends.

    When the client goes away, sse-starlette cancels the sending task; the event generator may
    then be suspended at a ``yield`` and would be closed only when garbage-collected. Closing it
    here (shielded from the cancellation) closes ``ask_events`` and the model stream under it
    at once, so no model call keeps running for nobody."""

    def __init__(self, events: AsyncIterator[ServerSentEvent], status_code: int = 200):
        super().__init__(events, status_code=status_code, ping=PING_SECONDS,
                         headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
        self._events = events

    async def _send_with_timeout(self, send, message) -> None:  # type: ignore[override]
        # No per-send timeout is set: send without the cancel scope sse-starlette opens around
        # every event anyway (~10% of the server's CPU per streamed token under 200 chats).
        if self.send_timeout is None:
            await send(message)
        else:
            await super()._send_with_timeout(send, message)

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[override]
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._events.aclose()  # type: ignore[attr-defined]


async def chat_endpoint(request: Request) -> AnswerStreamResponse:
    service: AskService = request.app.state.kaas.service
    try:
        ask_request = parse_chat_request(await read_json(request))
        ask_request.reader = reader_of(request)  # only what this reader may read exists for the answer
    except KaasError as exc:
        # A request that cannot be read is answered 400, its body still the one error event, so a
        # client reading events and a client reading the status both learn what went wrong.
        return AnswerStreamResponse(_error_stream(exc), status_code=400 if exc.code == "bad_request" else 200)
    return AnswerStreamResponse(chat_events(service, ask_request))
