"""MCP over stdio with every incoming line screened before the SDK parses it.

The SDK's stdio transport decodes each line as UTF-8 (bytes that are not become U+FFFD, so the
message is silently changed) and validates it as one JSON-RPC message; a line it cannot take —
not JSON, a lone surrogate (``"\\ud800"``: valid JSON, but not Unicode), a structure nested
thousands of levels deep, a batch (``[...]``, which MCP does not support), an envelope that is not
a JSON-RPC message — is dropped without an answer or a word, so a client waits forever for the
reply to that request; an endless line is buffered whole. Over HTTP (``/mcp``) each of these
gets a JSON-RPC error. Here every line is read as bytes and checked first:

- a line too long, not UTF-8, not JSON, nested too deeply or holding a lone surrogate is answered
  with a JSON-RPC ``-32700`` parse error for its id (found even when the line does not parse);
- a batch has each request in it answered with a ``-32600`` invalid-request error (MCP has no
  batches: send each message on its own line); a message with a usable id that is not a valid
  JSON-RPC message gets ``-32600`` too;
- a line with no usable id — none at all, ``null``, or one that is not a string or an integer
  (an object, a list, ``1.5``, ``true``) — cannot be answered: JSON-RPC has no way to address the
  reply, and MCP allows only string and integer ids. It is dropped with a warning on stderr
  (never stdout, which carries only protocol) naming the reason; a request with an unusable id
  is never run.

An answer is made by handing the SDK a request for ``INVALID_METHOD`` with the original id, the
error code and the reason, which the server answers with that error. The client gets its
answer, the server keeps serving, and no tool sees the input.
"""

from __future__ import annotations

import fcntl
import io
import json
import logging
import os
from contextlib import contextmanager
from typing import Any, AsyncIterator, Iterator

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST, PARSE_ERROR, RequestParams, jsonrpc_message_adapter

from kb_ai.untrusted_text import json_problem

log = logging.getLogger(__name__)

INVALID_METHOD = "kaas/invalid-message"
MAX_LINE_BYTES = 4_000_000  # a message this long is not a tool call (the HTTP endpoint caps bodies too)
MAX_DEPTH = 64  # tool arguments are flat; the envelope adds a few levels
_ERROR_NAMES = {PARSE_ERROR: "Parse error", INVALID_REQUEST: "Invalid request"}


class _InvalidParams(RequestParams):
    reason: str = "the message could not be read"
    code: int = PARSE_ERROR


async def _refuse(ctx: Any, params: _InvalidParams) -> Any:
    code = params.code if params.code in _ERROR_NAMES else PARSE_ERROR
    raise MCPError(code, f"{_ERROR_NAMES[code]}: {params.reason}")


def _usable_id(value: Any) -> bool:
    """Whether a reply can be addressed to this id: MCP ids are strings or integers."""
    return isinstance(value, (int, str)) and not isinstance(value, bool)


def screen_line(data: bytes | str) -> list[str]:
    """The lines to hand to the SDK for one line read from stdin: the line itself when it is a
    message the SDK takes, a request for ``INVALID_METHOD`` per id that must get an error, and
    nothing for what cannot be answered (logged)."""
    if isinstance(data, bytes):
        try:
            line = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            text = data.decode("utf-8", errors="replace")
            return _invalid(_id_in(text), f"the message is not UTF-8 (byte {exc.start})")
    else:
        line = data
    if not line.strip():
        return []  # a blank line is no message
    try:
        message = json.loads(line)
    except RecursionError:
        return _invalid(_id_from_text(line), f"the message is nested more than {MAX_DEPTH} levels deep")
    except ValueError as exc:
        return _invalid(_id_from_text(line), f"the message is not valid JSON ({exc.msg})")
    reason = json_problem(message, MAX_DEPTH)
    if reason is not None:
        return _invalid(message.get("id") if isinstance(message, dict) else None, reason)
    if isinstance(message, list):
        return _batch(message)
    if not isinstance(message, dict):
        return _invalid(None, "the message is not a JSON object")
    if "id" in message and not _usable_id(message["id"]):
        log.warning("dropped an MCP message whose id is %s: MCP ids are strings or integers, so it cannot "
                    "be answered (and is not run)", type(message["id"]).__name__ if message["id"] is not None else "null")
        return []
    try:
        jsonrpc_message_adapter.validate_json(line, by_name=False)  # exactly what the SDK will do
    except ValueError as exc:
        summary = str(exc).splitlines()[0] if str(exc) else "wrong fields"
        return _invalid(message.get("id"), f"not a JSON-RPC message ({summary})", INVALID_REQUEST)
    return [line if line.endswith("\n") else line + "\n"]


def _batch(messages: list) -> list[str]:
    """A JSON-RPC batch: MCP (since 2025-06-18) has none. Every request in it is answered with an
    error; the rest (notifications, replies) is dropped with a warning."""
    if not messages:
        log.warning("dropped an empty JSON-RPC batch: it has no id to answer (MCP has no batches)")
        return []
    answered: list[str] = []
    for item in messages:
        if isinstance(item, dict) and _usable_id(item.get("id")) and "method" in item:
            answered += _invalid(item["id"], "JSON-RPC batches are not supported: send each message on its own line",
                                 INVALID_REQUEST)
    if len(answered) < len(messages):
        log.warning("dropped %d message(s) of a JSON-RPC batch that have no id to answer (MCP has no batches)",
                    len(messages) - len(answered))
    return answered


def _invalid(request_id: Any, reason: str, code: int = PARSE_ERROR) -> list[str]:
    if not _usable_id(request_id):
        log.warning("dropped an MCP message without an id to answer: %s", reason)
        return []
    return [json.dumps({"jsonrpc": "2.0", "id": request_id, "method": INVALID_METHOD,
                       "params": {"reason": reason, "code": code}}) + "\n"]


def _id_in(text: str) -> Any:
    """The top-level id of ``text``, whether or not it parses whole."""
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):
        return _id_from_text(text)
    return message.get("id") if isinstance(message, dict) else None


def _id_from_text(text: str) -> Any:
    """The top-level ``"id"`` of a JSON object that cannot be parsed whole (too deep or cut
    off): scanned without recursion; None when there is none before the text ends."""
    depth, index, length = 0, 0, len(text)
    decoder = json.JSONDecoder()
    while index < length:
        char = text[index]
        if char == '"':
            try:
                key, end = decoder.raw_decode(text, index)
            except ValueError:
                return None
            if depth == 1 and key == "id":
                colon = end
                while colon < length and text[colon] in " \t\r\n":
                    colon += 1
                if colon < length and text[colon] == ":":
                    value_at = colon + 1
                    while value_at < length and text[value_at] in " \t\r\n":
                        value_at += 1
                    try:
                        return decoder.raw_decode(text, value_at)[0]
                    except (ValueError, RecursionError):
                        return None
            index = end
            continue
        if char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
        index += 1
    return None


class _ScreenedLines:
    """What the SDK's reader iterates over: the screened lines of ``stream`` (a binary file). At
    most ``MAX_LINE_BYTES`` of a line are held; the rest of a longer one is read and discarded."""

    def __init__(self, stream: io.BufferedIOBase):
        self.stream = stream

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _readline(self, limit: int) -> bytes:
        return await anyio.to_thread.run_sync(self.stream.readline, limit, abandon_on_cancel=True)

    async def _lines(self) -> AsyncIterator[str]:
        while True:
            line = await self._readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                rest = line
                while rest and not rest.endswith(b"\n"):
                    rest = await self._readline(1 << 20)
                text = line.decode("utf-8", errors="replace")
                screened = _invalid(_id_from_text(text), f"the message is longer than {MAX_LINE_BYTES:,} bytes")
            else:
                screened = screen_line(line)
            for message in screened:
                yield message


@contextmanager
def _claimed_stdin() -> Iterator[io.BufferedReader]:
    """Read the protocol from a private copy of fd 0 while fd 0 itself reads /dev/null (as the
    SDK does for the stdin it opens itself): nothing else in the process can consume a message.
    Bytes, not text: a line that is not UTF-8 is refused, not silently changed."""
    private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    try:
        yield os.fdopen(private, "rb", closefd=False)
    finally:
        os.dup2(private, 0)
        os.close(private)


def run_screened_stdio(server: MCPServer) -> None:
    """Serve ``server`` over stdin/stdout, screening every incoming line (module docstring)."""
    lowlevel = server._lowlevel_server  # noqa: SLF001 - the SDK's stdio runner, with our reader
    lowlevel.add_request_handler(INVALID_METHOD, _InvalidParams, _refuse)

    async def serve() -> None:
        with _claimed_stdin() as stdin:
            lines = _ScreenedLines(stdin)
            async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
                await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())

    anyio.run(serve)
