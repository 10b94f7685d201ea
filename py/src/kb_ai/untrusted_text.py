"""Checks on text and JSON from outside (a request body, an MCP message, a command line) that
no later step could handle, and the one function that makes text safe to print on a terminal
(``terminal_safe``, at the end). The checks: a lone surrogate (``"\\ud800"`` is valid JSON, and Python keeps
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


def refuse_json_constant(name: str) -> Any:
    """``json.loads(..., parse_constant=refuse_json_constant)``: ``NaN``, ``Infinity`` and
    ``-Infinity`` are not JSON (Python accepts them; browsers' ``JSON.parse`` and strict parsers do not)."""
    raise ValueError(f"{name} is not JSON")


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


# -- text for a terminal ------------------------------------------------------------------------
# Wiki text, source text (through ingest), model replies and file names can hold terminal
# control sequences: OSC 52 writes the clipboard (xterm, kitty, iTerm2), OSC 0 sets the window
# title, CSI sequences move the cursor or clear the screen, a carriage return overwrites what
# was shown. Whatever the CLI prints in text mode passes ``terminal_safe``.
_ESCAPE_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"  # CSI: cursor, colours, erase, ...
    # OSC / DCS / SOS / PM / APC: up to their terminator (BEL or ST), or the next control character
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x00-\x1f\x7f-\x9f]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]"  # any other escape sequence (charset switches, keypad modes, resets)
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but tab and newline, DEL, C1
_JSON_UNESCAPED_CONTROL = re.compile(r"[\x7f-\x9f]")  # json.dumps escapes C0 itself


def terminal_safe(text: str) -> str:
    """``text`` with every escape sequence and every C0/C1 control character (tab and newline
    excepted) removed: nothing in it can act on a terminal. Linear time; a sequence split across
    two calls (streamed tokens) loses its control characters in each, so it cannot act either."""
    if not _CONTROL.search(text):  # every escape sequence starts with a control character
        return text
    return _CONTROL.sub("", _ESCAPE_SEQUENCE.sub("", text))


def terminal_safe_json(text: str) -> str:
    """JSON text (from ``json.dumps(..., ensure_ascii=False)``) with DEL and the C1 controls,
    which JSON leaves raw, written as ``\\u`` escapes: the same JSON value, inert on a terminal.
    (These characters can only occur inside JSON strings, where the escape means the same.)"""
    return _JSON_UNESCAPED_CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


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
