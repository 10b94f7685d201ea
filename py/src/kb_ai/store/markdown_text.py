"""Plain-text views of Markdown that several parts need: headings, lead sentence, sections."""

from __future__ import annotations

import re
from dataclasses import dataclass

_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[A-Z0-9\"'(\[`*_])")
_INLINE_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
# Emphasis markers at word edges and code backticks; underscores inside words (KAAS_MODEL) stay.
_MARKUP = re.compile(r"`+|(?<!\w)[*_]+|[*_]+(?!\w)")


@dataclass(frozen=True)
class Section:
    """A heading and the text under it (up to the next heading of the same or higher level)."""

    heading: str  # "" for the lead before the first heading
    level: int  # 0 for the lead
    text: str  # the section's full Markdown, heading line included


def iter_lines_outside_fences(body: str):
    """Yield (line, in_fence) so callers can ignore headings inside code blocks."""
    in_fence = False
    for line in body.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
            yield line, True
            continue
        yield line, in_fence


def first_heading(body: str) -> str | None:
    for line, in_fence in iter_lines_outside_fences(body):
        if in_fence:
            continue
        match = _HEADING.match(line)
        if match:
            return plain_text(match.group(2))
    return None


def plain_text(markdown: str) -> str:
    """Links to their text, emphasis and code markers removed, whitespace folded."""
    text = _INLINE_LINK.sub(r"\1", markdown)
    text = _MARKUP.sub("", text)
    return " ".join(text.split())


def prose_paragraphs(body: str) -> list[str]:
    """Paragraphs of prose: no headings, code, tables, block quotes or HTML blocks."""
    paragraphs: list[str] = []
    current: list[str] = []
    for line, in_fence in iter_lines_outside_fences(body):
        stripped = line.strip()
        skip = in_fence or not stripped or _HEADING.match(line) or stripped.startswith(("|", "<", ">"))
        if skip:
            if current:
                paragraphs.append(" ".join(current))
                current = []
            continue
        if stripped.startswith(("- ", "* ", "+ ")) or re.match(r"^\d+[.)]\s", stripped):
            if current:
                paragraphs.append(" ".join(current))
                current = []
            stripped = re.sub(r"^([-*+]|\d+[.)])\s+", "", stripped)
        current.append(stripped)
    if current:
        paragraphs.append(" ".join(current))
    return [plain_text(p) for p in paragraphs if plain_text(p)]


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def first_sentence(body: str, limit: int = 200) -> str:
    """The first sentence of the first prose paragraph, cut at a word boundary to ``limit``."""
    for paragraph in prose_paragraphs(body):
        sentences = split_sentences(paragraph)
        if sentences:
            return clip(sentences[0], limit)
    return ""


def clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:")
    return cut + "…"


def split_sections(body: str) -> list[Section]:
    """Split at every heading (outside code fences). The lead (text before any heading) comes first."""
    sections: list[Section] = []
    heading, level, lines = "", 0, []
    for line, in_fence in iter_lines_outside_fences(body):
        match = None if in_fence else _HEADING.match(line)
        if match:
            if lines or heading:
                sections.append(Section(heading, level, "\n".join(lines).strip("\n")))
            heading, level, lines = plain_text(match.group(2)), len(match.group(1)), [line]
        else:
            lines.append(line)
    if lines or heading:
        sections.append(Section(heading, level, "\n".join(lines).strip("\n")))
    return [s for s in sections if s.text.strip()]
