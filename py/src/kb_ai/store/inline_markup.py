"""What a reader sees of Markdown's inline markers: emphasis that pairs, escapes, code spans.

``visible_text(text, code_spans)`` removes exactly the characters the renderer does not show:

* a ``*`` or ``_`` run is an emphasis marker only when it can open or close (CommonMark's
  flanking rules: an opener is followed by a word character, a closer follows one; ``_``
  inside a word never is) and meets a partner of the same character. Anything else is text
  and stays: ``__init__.py`` in running text is bold "init" (as the renderer shows it), but
  ``\\_\\_init\\_\\_.py`` is ``__init__.py``, ``snake_case``, ``*args``, ``5 * 3``, ``UVICORN_*``
  stay as written;
* a backslash before ASCII punctuation is an escape: the character stays, the backslash goes;
* a character reference (``&lt;``, ``&amp;``) is the character it shows;
* a code span's backticks go, its text stays as written (no emphasis, escape or reference inside).

``escape_text`` / ``escape_block_start`` / ``escape_heading`` go the other way: plain text (the
reST and DOCX readers' text) written as Markdown that the renderer and ``visible_text`` show as
written. Links are not handled here (``markdown_text.plain_text`` replaces them by their text
first). One pass over the marker characters, a stack per marker character: linear in the text.
Where CommonMark and Python-Markdown (the renderer) differ on odd runs (``**x_y`**b``), this
follows CommonMark; on ordinary text they agree (tests/test_rst_quality.py).
"""

from __future__ import annotations

import html
import re
import unicodedata

_TOKEN = re.compile(r"\\[!-/:-@\[-`{-~]|\*++|_++")
# A character reference as the renderer reads one (with its semicolon: "AT&T" and "&copy" are text).
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}+|#[xX][0-9a-fA-F]{1,6}+|[A-Za-z][A-Za-z0-9]{1,31}+);")


def _kind(char: str) -> str:
    """"space" (whitespace or the edge of the text), "punct" (punctuation or a symbol), "word"."""
    if not char or char.isspace():
        return "space"
    if char.isascii():
        return "word" if char.isalnum() else "punct"
    return "punct" if unicodedata.category(char)[0] in "PS" else "word"


_SPECIAL = re.compile(r"\\(?=[!-/:-@\[-`{-~])|`|\[|\*++|_++|<(?=[A-Za-z/!?])|&(?=#?+[A-Za-z0-9]++;)")


def escape_text(text: str) -> str:
    """``text`` (plain text, no markup) written as Markdown that shows it as it is: backticks,
    ``[`` and a backslash before punctuation escaped; a ``*`` or ``_`` run escaped when it could
    be an emphasis marker (``__init__.py`` -> ``\\_\\_init\\_\\_.py``, ``2*3`` -> ``2\\*3``),
    left as it is when it cannot (``snake_case``, ``5 * 3``). The text's edges count as
    punctuation: it may be a piece of a longer line. Block markers at the start of a line
    (``# ``, ``- ``, ``1. ``) are the caller's (``escape_block_start``)."""
    def escape(match: re.Match) -> str:
        run = match.group()
        if run[0] in "*_":
            can_open, can_close = _flanking(text, match.start(), match.end(), run[0], edge="punct")
            return "".join("\\" + char for char in run) if can_open or can_close else run
        if run in ("<", "&"):  # "<salutation>" is not an HTML tag, "&nbsp;" not a space
            return "&lt;" if run == "<" else "&amp;"
        return "\\" + run

    return _SPECIAL.sub(escape, text) if _SPECIAL.search(text) else text


_BLOCK_START = re.compile(r"(?:#{1,6}+|[-+*]|>)(?=\s|$)|>|\d{1,9}+(?=[.)](?:\s|$))")


def escape_block_start(line: str) -> str:
    """``line`` (text that starts a block) with a first character that would make it a heading,
    a list item or a quote escaped: ``# 1 fact`` -> ``\\# 1 fact``, ``1. Step`` -> ``1\\. Step``."""
    match = _BLOCK_START.match(line)
    if match is None:
        return line
    if match.group()[0].isdigit():
        return line[:match.end()] + "\\" + line[match.end():]
    return "\\" + line


def escape_heading(text: str) -> str:
    """Heading text (already escaped by ``escape_text``) with a closing ``#`` run escaped: the
    renderer reads "# About C#" as "About C"."""
    stripped = text.rstrip()
    if stripped.endswith("#") and not stripped.endswith("\\#"):
        return stripped[:-1] + "\\#"
    return text


class _Run:
    """A run of ``*`` or ``_``; its characters not yet matched are ``[low, high)``."""

    __slots__ = ("low", "high", "char", "can_open", "can_close")

    def __init__(self, start: int, end: int, char: str, can_open: bool, can_close: bool) -> None:
        self.low, self.high, self.char = start, end, char
        self.can_open, self.can_close = can_open, can_close


def _flanking(text: str, start: int, end: int, char: str, edge: str = "space") -> tuple[bool, bool]:
    """(can open, can close) of the run ``text[start:end]`` of ``char``; ``edge``: what the
    text's own edges count as ("punct" when the text is a piece of a longer line)."""
    before = _kind(text[start - 1]) if start else edge
    after = _kind(text[end]) if end < len(text) else edge
    left = after != "space" and (after != "punct" or before != "word")
    right = before != "space" and (before != "punct" or after != "word")
    if char == "*":
        return left, right
    return left and (not right or before == "punct"), right and (not left or after == "punct")


def visible_text(text: str, code_spans: list[tuple[int, int]], *, keep_code: bool = False) -> str:
    """``text`` as a reader sees it: code spans (``code_spans``, sorted ``(start, end)`` offsets
    of whole spans, backticks included) without their backticks (``keep_code``: kept as written,
    backticks and all, for text that is shown as Markdown again), backslash escapes undone,
    paired emphasis markers removed. Whitespace is left as it is."""
    cuts: list[tuple[int, int, str]] = []  # (start, end, replacement), in no particular order
    for start, end in ([] if keep_code else code_spans):
        ticks = len(text[start:end]) - len(text[start:end].lstrip("`"))
        inner = text[start + ticks:end - ticks]
        if len(inner) > 1 and inner[0] == " " and inner[-1] == " " and inner.strip():
            inner = inner[1:-1]
        cuts.append((start, end, inner))
    runs: list[_Run] = []
    span = 0
    for match in _TOKEN.finditer(text):
        start, end = match.span()
        while span < len(code_spans) and code_spans[span][1] <= start:
            span += 1
        if span < len(code_spans) and code_spans[span][0] <= start:
            continue  # inside code: shown as written
        if match.group()[0] == "\\":
            cuts.append((start, end, match.group()[1]))  # the character as written, never an entity's start
            continue
        char = match.group()[0]
        can_open, can_close = _flanking(text, start, end, char)
        if can_open or can_close:
            runs.append(_Run(start, end, char, can_open, can_close))
    _pair(runs, cuts)
    if not cuts:
        return _entities(text)
    cuts.sort()
    out: list[str] = []
    position = 0
    for start, end, replacement in cuts:
        out.append(_entities(text[position:start]))
        out.append(replacement)
        position = end
    out.append(_entities(text[position:]))
    return "".join(out)


def _entities(text: str) -> str:
    """Character references (``&lt;``, ``&amp;``, ``&#169;``) as the characters they show."""
    return _ENTITY.sub(lambda match: html.unescape(match.group()), text) if "&" in text else text


def _pair(runs: list[_Run], cuts: list[tuple[int, int, str]]) -> None:
    """Match closers to the nearest open run of the same character (two characters at a time
    when both have two, else one), as CommonMark does; runs of the other character opened in
    between can no longer pair. An opener gives its last characters, a closer its first; each
    matched character is cut."""
    stacks: dict[str, list[_Run]] = {"*": [], "_": []}
    for run in runs:
        if run.can_close:
            own, other = stacks[run.char], stacks["_" if run.char == "*" else "*"]
            while run.high > run.low and own:
                opener = own[-1]
                take = 2 if opener.high - opener.low >= 2 and run.high - run.low >= 2 else 1
                opener.high -= take
                cuts.append((opener.high, opener.high + take, ""))
                cuts.append((run.low, run.low + take, ""))
                run.low += take
                while other and other[-1].low > opener.low:
                    other.pop()
                if opener.high == opener.low:
                    own.pop()
        if run.high > run.low and run.can_open:
            stacks[run.char].append(run)
