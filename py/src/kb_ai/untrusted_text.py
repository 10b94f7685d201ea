"""Checks on text and JSON from outside (a request body, an MCP message, a command line) that
no later step could handle: a lone surrogate (``"\\ud800"`` is valid JSON, and Python keeps
bytes that are not UTF-8 in a command line as surrogates) can be written to no file, sent in no
model request and printed in no log line; a structure nested thousands deep exhausts the stack
of whatever walks it next. Each interface refuses such input in its own way (HTTP 400, a
JSON-RPC parse error, a one-line CLI error) with the reason these functions give.
"""

from __future__ import annotations

import json
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


def parse_json(text: str, max_depth: int) -> Any:
    """The JSON value of ``text`` from outside, or ``ValueError`` with a one-line reason: not
    JSON, nested so deep that the parser itself runs out of stack (``RecursionError``, which
    callers catching ``ValueError`` used to miss), nested more than ``max_depth`` levels, or
    holding a lone surrogate (``json_problem``)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise ValueError(f"not valid JSON (nested more than {max_depth} levels deep)") from None
    problem = json_problem(value, max_depth)
    if problem:
        raise ValueError(f"not valid JSON ({problem})")
    return value
