"""Deterministic structuring: an article from a source without a model, and supersession by diff.

Offline, an article is its source, cleaned: a ``# Title`` heading, the source's own sections
(headings kept, demoted under the title), boilerplate and duplicate copies already removed by
dedup, a lead-sentence summary. When a newer version of the source arrives (a changed file or a
dated revision), the new text becomes the article and every paragraph that changed or vanished
leaves a trail line ``[Superseded DATE by raw/...: earlier "..."]`` after the paragraph that
replaced it, so old and new facts are never both stated as current.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from pathlib import PurePosixPath

from kb_ai.compile.dedup import blocks
from kb_ai.store.articles import clean_summary
from kb_ai.store.words import title_key, words
from kb_ai.store.markdown_text import (
    atx_heading,
    demote_headings,
    first_sentence,
    iter_lines_outside_fences,
    plain_text,
    prose_paragraphs,
)
from kb_ai.store.sentences import clip, split_sentences

# The source ends at the first ": earlier " (tried once, not again from every later one).
TRAIL = re.compile(r"^\[Superseded (\d{4}-\d{2}-\d{2}) by (raw/(?:(?!: earlier ).)++): earlier (.+)\]\s*$")
QUOTE_LIMIT = 220
# The line before a source's new text set next to a part a person edited (``hand_text.
# merge_around_hand``): kept, with what follows, like a trail line; never superseded itself.
HAND_NOTE = re.compile(r"^\[New in (raw/\S[^\]]*?) \((\d{4}-\d{2}-\d{2})\), next to the hand-edited text above:\]$")


def hand_note(source: str, date: str) -> str:
    return f"[New in {source} ({date}), next to the hand-edited text above:]"


def trail_lines(body: str) -> list[str]:
    """The supersession trail lines of ``body`` (stripped), in order: the one reading of
    ``TRAIL``, for writing, checking and counting them."""
    return [line.strip() for line in body.splitlines() if TRAIL.match(line.strip())]


def trail_line(date: str, source: str, earlier: str) -> str:
    text = clip(plain_text(earlier).replace("]", ")"), QUOTE_LIMIT)
    return f'[Superseded {date} by {source}: earlier "{text}"]'


def article_body(title: str, text: str) -> str:
    """``# title`` then the source text, with the source's opening heading (if it repeats the
    title, whatever its level) removed, and its headings demoted when it has other H1s, or
    promoted when that opening heading was deeper and all the others are under it (an HTML
    page's ``## Path`` over ``###`` sections: they become ``##``)."""
    lines = text.strip("\n").splitlines()
    out: list[str] = []
    dropped_title = False
    dropped_level = 0
    has_h1 = False
    has_text = False  # a non-blank line is in ``out`` already
    for line, in_fence in iter_lines_outside_fences("\n".join(lines)):
        heading = None if in_fence else atx_heading(line)
        if heading and not dropped_title and not has_text and plain_text(heading[1]).casefold() == title.casefold():
            dropped_title = True  # the title as the first heading, whatever its level (an HTML page's <h2>)
            dropped_level = heading[0]
            continue
        if heading and heading[0] == 1:
            has_h1 = True
        elif not dropped_title and not in_fence and not has_text and line.strip() \
                and plain_text(line).casefold() == title.casefold():
            dropped_title = True  # a plain first line repeating the title (text and PDF sources)
            continue
        out.append(line)
        has_text = has_text or bool(line.strip())
    body = "\n".join(out).strip("\n")
    if has_h1:
        body = demote_headings(body)
    elif dropped_level > 1 and _all_headings_below(body, dropped_level):
        body = demote_headings(body, 1 - dropped_level)  # "## Path" was the title: its "###" become "##"
    body = re.sub(r"\n{3,}", "\n\n", body)
    return f"# {title}\n\n{body}".rstrip() + "\n"


def _all_headings_below(body: str, level: int) -> bool:
    """Whether every heading of ``body`` (outside code) is deeper than ``level``."""
    for line, in_fence in iter_lines_outside_fences(body):
        heading = None if in_fence else atx_heading(line)
        if heading and heading[0] <= level:
            return False
    return True


_META_LINE = re.compile(r"^\W*(date|updated|last updated|revised|author|owner|status|version)\W*:", re.I)
# A labelled field ("Copyright: 2003-2023 P. McGuire", "Module author: C. McQueen", "Issue
# tracker: GitHub Issues"): page metadata, not what the page is about. Up to 3 words of label.
_FIELD_LINE = re.compile(r"^[^\W\d_][\w'.-]*+(?:[ \t]++[\w'.-]++){0,2}+[ \t]*+:[ \t]")
FIELD_LINE_WORDS = 12  # a longer "Note: ..." paragraph is prose


def _mostly_addresses(paragraph: str) -> bool:
    """"Documentation: https://x.org Source Code: https://github.com/x": links, not a sentence."""
    tokens = paragraph.split()
    addresses = sum(1 for token in tokens if "://" in token or token.startswith("www."))
    return addresses * 3 >= len(tokens)


def lead_summary(body: str, title: str, limit: int = 200) -> str:
    """The first sentence of the first real paragraph (not a ``Date:`` line or another short
    labelled field such as "Copyright: ..." or "Module author: ...", not a stub), as
    plain text (``clean_summary``: no link syntax, HTML, note markers or roles); the title when
    the body has no prose; for a page that is a list of links (a table of contents), "Contents:"
    and the first entries."""
    entries = _LINK_ITEM.findall(body) if "](" in body else []
    if entries:
        body = _LINK_ITEM.sub("", body)
    for paragraph in prose_paragraphs(body):
        if _META_LINE.match(paragraph) or len(paragraph.split()) < 4 or _mostly_addresses(paragraph):
            continue
        if _FIELD_LINE.match(paragraph) and len(paragraph.split()) <= FIELD_LINE_WORDS:
            continue
        sentences = split_sentences(paragraph)
        summary = clean_summary(sentences[0], limit) if sentences else None
        if summary:
            return summary
    if entries:
        return clip("Contents: " + ", ".join(plain_text(entry) for entry in entries[:12]), limit)
    return clean_summary(first_sentence(body, limit), limit) or title


# A list item that is one link and nothing else: a navigation entry, not prose.
_LINK_ITEM = re.compile(r"^[ \t]*+(?:[-*+]|\d{1,3}[.)])[ \t]++\[([^\[\]\n]++)\]\([^()\s]*+\)[ \t]*+$", re.M)


# ---------------------------------------------------------------------------------------------
# supersession by diff


def _units(body: str) -> tuple[str, list[tuple[str, list[str]]]]:
    """Split a body into (H1 line, [(block, trail lines attached after it)])."""
    parts = blocks(body)
    h1 = ""
    if parts and re.match(r"^#\s", parts[0]):
        first_lines = parts[0].split("\n", 1)
        h1 = first_lines[0]
        rest = first_lines[1].strip() if len(first_lines) > 1 else ""
        parts = ([rest] if rest else []) + parts[1:]
    units: list[tuple[str, list[str]]] = []
    leading: list[str] = []
    for part in parts:
        if TRAIL.match(part.strip()) or HAND_NOTE.match(part.strip()):
            if units:
                units[-1][1].append(part.strip())
            else:
                leading.append(part.strip())
            continue
        units.append((part, []))
    if leading:
        units.insert(0, ("", leading))
    return h1, units


def _norm(block: str) -> str:
    return " ".join(words(block))


def _is_heading(block: str) -> bool:
    return bool(atx_heading(block.strip().splitlines()[0])) if block.strip() else False


def _changed_statements(old: str, new_text_norm: str) -> list[str]:
    """What of ``old`` is no longer said anywhere in the new text: its missing sentences."""
    sentences = split_sentences(plain_text(old)) or [plain_text(old)]
    return [s for s in sentences if _norm(s) and _norm(s) not in new_text_norm]


def supersede(old_body: str, new_body: str, *, date: str, source: str) -> tuple[str, int]:
    """The new body with trail lines for every statement of the old body it no longer makes.
    Existing trail lines are kept. Returns (body, number of new trail lines)."""
    _, old_units = _units(old_body)
    new_h1, new_units = _units(new_body)
    old_keys = [_norm(b) for b, _ in old_units]
    new_keys = [_norm(b) for b, _ in new_units]
    matcher = SequenceMatcher(None, old_keys, new_keys, autojunk=False)
    new_text_norm = " " + " ".join(new_keys) + " "
    out: list[str] = []
    added = 0
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        new_part = [b for b, _ in new_units[j1:j2]]
        if op == "equal":
            for (block, _), (_, old_trails) in zip(new_units[j1:j2], old_units[i1:i2], strict=True):
                out.append(block)
                out.extend(old_trails)
            continue
        out.extend(new_part)
        trails: list[str] = []
        for block, old_trails in old_units[i1:i2]:
            trails.extend(old_trails)
            if not block or _is_heading(block):
                continue
            for statement in _changed_statements(block, new_text_norm):
                trails.append(trail_line(date, source, statement))
                added += 1
        out.extend(trails)
    body = "\n\n".join(b.strip("\n") for b in out if b.strip())
    return (f"{new_h1}\n\n{body}".strip() + "\n") if new_h1 else body.strip() + "\n", added


# ---------------------------------------------------------------------------------------------
# one article from several sources with the same title: a section per source


def source_heading(title: str, source: str) -> str:
    """The ``##`` heading of the section that source ``source`` has in an article it shares with
    other sources of the same title (``title``): its file name made readable, which does not
    change when its text does (so the section is found again when the source changes)."""
    name = PurePosixPath(source).name
    stem = name.rsplit(".", 1)[0] if "." in name[1:] else name
    readable = " ".join(re.sub(r"[-_.]+", " ", stem).split()) or name
    readable = readable[:1].upper() + readable[1:]
    return f"{readable} ({name})" if title_key(readable) == title_key(title) else readable


def source_sections(body: str, headings: dict[str, str]) -> tuple[str, dict[str, str]]:
    """``body`` split into its lead (the H1 and the text of the first source) and the sections of
    the other sources, by their ``##`` heading (``headings``: heading -> source path): (lead,
    {source path: the section's text, heading included})."""
    lead: list[str] = []
    sections: dict[str, list[str]] = {}
    current: list[str] = lead
    for line, in_fence in iter_lines_outside_fences(body):
        heading = None if in_fence else atx_heading(line)
        if heading and heading[0] == 2 and heading[1].strip() in headings:
            current = sections.setdefault(headings[heading[1].strip()], [])
        current.append(line)
    return "\n".join(lead).strip("\n"), {s: "\n".join(lines).strip("\n") for s, lines in sections.items()}


def section_of(title: str, source: str, text: str) -> str:
    """The section source ``source`` adds to the article titled ``title``: its heading, then its
    text (its own title left out, its headings below the section's)."""
    fresh = article_body(title, text)
    rest = fresh.split("\n", 1)[1] if "\n" in fresh else ""
    return f"## {source_heading(title, source)}\n\n{demote_headings(rest.strip(chr(10)), 1)}".rstrip()
