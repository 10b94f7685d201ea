"""The text pypdf extracts from a PDF's pages, made into paragraphs a reader would recognise.

Extracted text is one visual line per line: paragraphs are broken at every line end and page
end, words are hyphenated across lines, and every page repeats its running header and footer
(a title, a page number). ``clean_pages`` removes control characters (NUL included), drops the
lines that repeat at the top or bottom of most pages (digits ignored, so "Page 3 of 9" counts)
and bare page numbers, and re-joins paragraphs across line and page breaks, undoing
hyphenation. ``heading_title`` picks the first heading-sized line of the first page.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffe\uffff]")
_PAGE_NUMBER = re.compile(r"^(?:page\s*)?[-–—]?\s*\d{1,5}\s*[-–—]?(?:\s*(?:of|/)\s*\d{1,5})?$", re.I)
_BULLET = re.compile(r"^(?:[•◦▪‣●·*-]|\d{1,3}[.)]|[a-z][.)])\s+")
_EDGE = 3  # a running header/footer is among the first or last lines of a page
_SENTENCE_END = (".", "!", "?", ":", ";", '."', ".”", "?”", "!”")


def _key(line: str) -> str:
    return re.sub(r"\d+", "#", " ".join(line.split())).casefold()


def _furniture(pages: list[list[str]]) -> set[str]:
    """Keys of lines that repeat at the top or bottom of most pages (at least 2, and more than
    half of them)."""
    if len(pages) < 2:
        return set()
    seen: Counter = Counter()
    for lines in pages:
        edge = {_key(line) for line in lines[:_EDGE] + lines[-_EDGE:] if line.strip()}
        seen.update(edge)
    need = max(2, len(pages) // 2 + 1)
    return {key for key, count in seen.items() if count >= need}


def _strip_page(lines: list[str], furniture: set[str]) -> list[str]:
    """A page's lines without its running header/footer and page number."""
    lines = list(lines)
    for _ in range(_EDGE):  # from the top
        while lines and not lines[0].strip():
            lines.pop(0)
        if lines and (_key(lines[0]) in furniture or _PAGE_NUMBER.match(lines[0].strip())):
            lines.pop(0)
        else:
            break
    for _ in range(_EDGE):  # from the bottom
        while lines and not lines[-1].strip():
            lines.pop()
        if lines and (_key(lines[-1]) in furniture or _PAGE_NUMBER.match(lines[-1].strip())):
            lines.pop()
        else:
            break
    return lines


def _width(pages: list[list[str]]) -> int:
    lengths = [len(line.strip()) for lines in pages for line in lines if len(line.strip()) > 20]
    return int(statistics.median(lengths)) if lengths else 60


def _joins(previous: str, line: str, width: int) -> bool:
    """Whether ``line`` continues the paragraph that ``previous`` (a line) ends."""
    if not previous or not line or _BULLET.match(line):
        return False
    if previous.endswith("-") and len(previous) > 1 and previous[-2].isalpha() and line[:1].islower():
        return True
    if line[:1].islower() or line[:1] in "([\"'“":
        return not previous.endswith((".", "!", "?")) or len(previous) >= 0.8 * width
    long_line = len(previous) >= 0.7 * width
    return long_line and not previous.endswith(_SENTENCE_END)


def _join(previous: str, line: str) -> str:
    if previous.endswith("-") and len(previous) > 1 and previous[-2].isalpha() and line[:1].islower():
        return previous[:-1] + line  # "para-" + "graph"
    return f"{previous} {line}"


def clean_pages(texts: list[str]) -> str:
    """Markdown text (paragraphs separated by blank lines) from the pages' extracted texts."""
    pages = [[" ".join(line.split()) for line in _CONTROL.sub("", text).splitlines()] for text in texts]
    furniture = _furniture(pages)
    pages = [_strip_page(lines, furniture) for lines in pages]
    width = _width(pages)
    paragraphs: list[str] = []
    current = ""
    last = ""  # the last line added to ``current``
    for lines in pages:
        for line in lines:
            if not line:
                if current:
                    paragraphs.append(current)
                    current = ""
                continue
            if current and _joins(last, line, width):
                current = _join(current, line)
            else:
                if current:
                    paragraphs.append(current)
                bullet = _BULLET.match(line)
                current = "- " + line[bullet.end():] if bullet and not line[:1].isalnum() else line
            last = line
        # a page break ends nothing by itself: the next page's first line may continue ``current``
    if current:
        paragraphs.append(current)
    return "\n\n".join(paragraphs)


def heading_title(chunks: list[tuple[str, float]]) -> str | None:
    """The first heading-sized line of a page, from (text, font size) chunks in reading order:
    the first line set clearly larger (x1.15) than the page's body text."""
    sized = [(" ".join(text.split()), size) for text, size in chunks if text.strip() and size > 0]
    if len(sized) < 2:
        return None
    body = statistics.median(size for _, size in sized)
    parts: list[str] = []
    for text, size in sized[:40]:
        if size >= 1.15 * body:
            parts.append(text)
        elif parts:
            break
    title = " ".join(" ".join(parts).split())
    return title if 0 < len(title) <= 150 else None
