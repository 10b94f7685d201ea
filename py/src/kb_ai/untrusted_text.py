"""Checks on text and JSON from outside (a request body, an MCP message, a command line) that
no later step could handle: a lone surrogate (``"\\ud800"`` is valid JSON, and Python keeps
bytes that are not UTF-8 in a command line as surrogates) can be written to no file, sent in no
model request and printed in no log line; a structure nested thousands deep exhausts the stack
of whatever walks it next. Each interface refuses such input in its own way (HTTP 400, a
JSON-RPC parse error, a one-line CLI error) with the reason these functions give.
"""

from __future__ import annotations

import re
from typing import Any

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> str | None:
    """Why ``text`` is not text (it holds a lone surrogate), or None."""
    found = _LONE_SURROGATE.search(text)
    if found is None:
        return None
    return f"holds a lone surrogate (\\u{ord(found.group()):04x}), which is not text"


def json_problem(value: Any, max_depth: int) -> str | None:
    """Why a parsed JSON value cannot be taken (nested more than ``max_depth`` levels, or a lone
    surrogate in any key or string), or None. Iterative: depth cannot exhaust the stack."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, str):
            reason = lone_surrogate(item)
            if reason:
                return f"a string {reason}"
        elif isinstance(item, (dict, list)):
            if depth >= max_depth:
                return f"nested more than {max_depth} levels deep"
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)
    return None


def as_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (and a surrogate pair held as two
    code points joined into its character): what can be written, sent and printed. For text
    kaas must keep rather than refuse (a model's reply, an event about to be sent)."""
    if _LONE_SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
