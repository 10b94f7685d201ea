"""MCP over stdio with every incoming line screened before the SDK parses it.

The SDK's stdio transport parses each line with pydantic's strict JSON parser. A message it
cannot parse (a lone surrogate such as ``"\\ud800"``, which is valid JSON but not Unicode; a
structure nested thousands of levels deep) is dropped without an answer, so the client waits
forever for a reply to that request; an endless line is buffered whole. Over HTTP (``/mcp``)
the same messages get a JSON-RPC parse error. Here, each line is checked first: a line too
long, nested too deeply or holding a lone surrogate becomes a request for ``INVALID_METHOD``
with the original id, which the server answers with a JSON-RPC ``-32700`` parse error naming
the problem. The client gets its answer, the server keeps serving, and no tool sees the input.
A bad line whose id cannot be found (a notification, or no id at all) is dropped with a
warning on stderr, as JSON-RPC allows.
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
from mcp_types import PARSE_ERROR, RequestParams

from kb_ai.untrusted_text import json_problem

log = logging.getLogger(__name__)

INVALID_METHOD = "kaas/invalid-message"
MAX_LINE_CHARS = 4_000_000  # a message this long is not a tool call (the HTTP endpoint caps bodies too)
MAX_DEPTH = 64  # tool arguments are flat; the envelope adds a few levels


class _InvalidParams(RequestParams):
    reason: str = "the message could not be read"


async def _refuse(ctx: Any, params: _InvalidParams) -> Any:
    raise MCPError(PARSE_ERROR, f"Parse error: {params.reason}")


def screen_line(line: str) -> str | None:
    """The line to hand to the SDK: ``line`` itself when it is fine, a request for
    ``INVALID_METHOD`` carrying its id and the reason when it is not, None to drop it."""
    try:
        message = json.loads(line)
    except RecursionError:
        return _invalid(_id_from_text(line), f"the message is nested more than {MAX_DEPTH} levels deep")
    except ValueError:
        return line  # not JSON at all: the SDK's own handling (the message cannot name an id)
    reason = json_problem(message, MAX_DEPTH)
    if reason is None:
        return line
    return _invalid(message.get("id") if isinstance(message, dict) else None, reason)


def _invalid(request_id: Any, reason: str) -> str | None:
    if isinstance(request_id, bool) or not isinstance(request_id, (int, str)):
        log.warning("dropped an MCP message without an id: %s", reason)
        return None
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": INVALID_METHOD, "params": {"reason": reason}}) + "\n"


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
    """What the SDK's reader iterates over: the screened lines of ``stream`` (a text file). At
    most ``MAX_LINE_CHARS`` of a line are held; the rest of a longer one is read and discarded."""

    def __init__(self, stream: io.TextIOBase):
        self.stream = stream

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _readline(self, limit: int) -> str:
        return await anyio.to_thread.run_sync(self.stream.readline, limit, abandon_on_cancel=True)

    async def _lines(self) -> AsyncIterator[str]:
        while True:
            line = await self._readline(MAX_LINE_CHARS + 1)
            if not line:
                return
            if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
                rest = line
                while rest and not rest.endswith("\n"):
                    rest = await self._readline(1 << 20)
                screened = _invalid(_id_from_text(line), f"the message is longer than {MAX_LINE_CHARS:,} characters")
            else:
                screened = screen_line(line)
            if screened is not None:
                yield screened


@contextmanager
def _claimed_stdin() -> Iterator[io.TextIOWrapper]:
    """Read the protocol from a private copy of fd 0 while fd 0 itself reads /dev/null (as the
    SDK does for the stdin it opens itself): nothing else in the process can consume a message."""
    private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    try:
        yield io.TextIOWrapper(os.fdopen(private, "rb", closefd=False), encoding="utf-8", errors="replace")
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
