"""Is a short text a model wrote (a title, a summary, a follow-up question) plausible?

A model that echoes its own prompt ("Your previous answer for this article was refused: ..."),
answers with a placeholder ("...", "N/A", "42") or repeats itself must not have that text become
a page's title or catalog summary, or a suggestion shown to a reader. One check for every such
text: the compile planner (titles and summaries of new articles), the compile writer (summaries)
and the navigator (follow-up suggestions). What a caller does with an implausible text is its
own business (fall back to a deterministic value, or drop it).

``instructions`` is kaas's own text of the prompt, without the data it quoted (render the
prompt with its data variables left empty): a text most of whose word 4-grams come from it is an
echo. Data (a source's first sentence) is not an echo: summarizing by quoting is fine.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

PLACEHOLDERS = {
    "n a", "na", "none", "null", "nil", "todo", "tbd", "tba", "untitled", "no title", "title", "summary",
    "no summary", "unknown", "placeholder", "lorem ipsum", "string", "text", "example", "question",
}
ECHO_SHARE = 0.5  # share of a text's word 4-grams found in the instructions that makes it an echo
_WORD = re.compile(r"[^\W_]+")


def one_line(value: object) -> str:
    """A model value as one line of text: whitespace (line breaks too) folded to single spaces."""
    return " ".join(str(value if value is not None else "").split())


def fold(text: str) -> str:
    """Case, punctuation and spacing ignored: "How is it built?" == "how is it built"."""
    return " ".join(_WORD.findall(text.casefold()))


def implausible(value: object, instructions: str | Iterable[str] = ()) -> str | None:
    """Why ``value`` is not a plausible title/summary/question, or None when it is."""
    text = one_line(value)
    if not text:
        return "empty"
    folded = fold(text)
    if not re.search(r"[^\W\d_]", folded):
        return f"{_show(text)} has no words"
    if folded in PLACEHOLDERS:
        return f"{_show(text)} is a placeholder"
    if re.fullmatch(r"[.…\s]+", text[-3:]) and len(folded.split()) <= 2:
        return f"{_show(text)} is cut off"
    words = folded.split()
    if isinstance(instructions, str):
        instructions = [instructions]
    for own in instructions:
        if _echoes(words, fold(own)):
            return f"{_show(text)} repeats kaas's own prompt"
    return None


def plausible(value: object, instructions: str | Iterable[str] = ()) -> str | None:
    """``value`` as one line when plausible, else None."""
    return None if implausible(value, instructions) else one_line(value)


def unique(texts: Iterable[str], seen: Iterable[str] = ()) -> list[str]:
    """``texts`` without repeats (case, punctuation and spacing ignored), first one kept; texts
    equal to one of ``seen`` (e.g. the question just asked) are dropped too."""
    keys = {fold(s) for s in seen}
    out: list[str] = []
    for text in texts:
        key = fold(text)
        if key and key not in keys:
            keys.add(key)
            out.append(text)
    return out


def _echoes(words: list[str], own: str) -> bool:
    if not own or len(words) < 3:
        return False
    if len(words) < 4:
        return f" {' '.join(words)} " in f" {own} "
    own_words = own.split()
    own_grams = {tuple(own_words[i:i + 4]) for i in range(len(own_words) - 3)}
    grams = [tuple(words[i:i + 4]) for i in range(len(words) - 3)]
    return sum(g in own_grams for g in grams) >= ECHO_SHARE * len(grams)


def _show(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")
