"""Plain-text views of Markdown that several parts need: headings, lead sentence, sections, links.

Everything here reads text kaas does not control (sources, pages people edit, model replies), so
every function runs in time linear in its input (tests/test_linear_time.py times them on
adversarial shapes). The rules that keep it so:

* a regular expression either has no two repeated parts that can match the same characters, or
  uses possessive quantifiers (``*+``, ``++``) so that it never gives characters back;
* nothing is searched for again from every starting position of a long run: brackets are matched
  with a stack, code spans by the lengths of their backtick runs, headings with string methods;
* the block structure (fenced and indented code, reference definitions) is found in one pass
  over the lines.

``find_links`` is the one link finder: ``kaas lint`` and ``lint --fix``, the renderer (which
links to look up), citations in answers and answer scoring all use it, so "links in code are not
links" and reference definitions mean the same thing everywhere.

Why one module of ~580 lines: the block reader (code fences, indented code, reference
definitions), the link finder and the plain-text view use each other (links need the blocks,
plain text and titles need the links), so a split would be a cycle or copies of the block rules.
Sentences (``store/sentences.py``) and heading ids (``store/anchors.py``) stand alone and live
apart.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from kb_ai.store.inline_markup import visible_text
from kb_ai.store.sentences import clip, split_sentences

_FENCE = re.compile(r"[ \t]*+(`{3,}+|~{3,}+)")
_LIST_ITEM = re.compile(r"[ \t]*+(?:[-*+]|\d{1,9}+[.)])(?:[ \t]|$)")
_NUMBERED = re.compile(r"\d++[.)]\s")
_BULLET = re.compile(r"^(?:[-*+]|\d++[.)])\s++")

# After the "]" of a link text: "(destination "title")". Possessive throughout: on a failure
# nothing is given back, so a long run of spaces or parentheses is read once.
_INLINE_TAIL = re.compile(
    r"\(\s*+(?P<dest><[^<>\n]*+>|(?:[^\s()\\]++|\\.|\((?:[^\s()\\]++|\\.)*+\))*+)"
    r"(?:\s++(?:\"[^\"\n]*+\"|'[^'\n]*+'|\([^()\n]*+\)))?+\s*+\)",
    re.DOTALL,
)
_REFERENCE_TAIL = re.compile(r"\[(?P<label>[^\[\]\\]*+(?:\\.[^\[\]\\]*+)*+)\]", re.DOTALL)
_DEFINITION = re.compile(
    r" {0,3}+\[(?P<label>[^\[\]\n]++)\][ \t]*+:[ \t]*+(?P<dest><[^<>\n]*+>|\S++)"
    r"(?:[ \t]++(?:\"[^\"\n]*+\"|'[^'\n]*+'|\([^()\n]*+\)))?+[ \t]*+$"
)
_BRACKET_TOKEN = re.compile(r"\\.|!\[|[\[\]]", re.DOTALL)
_TICK_TOKEN = re.compile(r"\\++|`++")
_NOT_NEWLINE = re.compile(r"[^\n]++")
_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")
# An Obsidian wikilink: "[[target]]", "[[target|label]]", "![[target]]" (an embed). The target
# holds no bracket, "|" or line break, the label no bracket or line break; both runs are
# possessive and stop at a bracket, so a failed match reads to the next "[" or "]" only.
_WIKILINK = re.compile(r"(?<!\\)(?P<embed>!?)\[\[(?P<target>[^\[\]|\n]++)(?:\|(?P<label>[^\[\]\n]*+))?\]\]")


@dataclass(frozen=True)
class Section:
    """A heading and the text under it (up to the next heading of the same or higher level)."""

    heading: str  # "" for the lead before the first heading
    level: int  # 0 for the lead
    text: str  # the section's full Markdown, heading line included


# ---------------------------------------------------------------------------------------------
# headings and code blocks


def atx_heading(line: str, max_level: int = 6) -> tuple[int, str] | None:
    """``(level, text)`` when ``line`` is a heading (``## Title``, closing ``#`` run dropped),
    else None. The ``#`` run starts the line and is followed by whitespace (``#tag`` is text)."""
    if not line.startswith("#"):
        return None
    rest = line.lstrip("#")
    level = len(line) - len(rest)
    if level > max_level or not rest or not rest[0].isspace():
        return None
    text = rest.strip()
    closed = text.rstrip("#")
    if closed != text:
        text = closed.rstrip() if not closed.endswith("\\") else closed + "#"  # "C\#" keeps its "#"
    return level, text


def _fence_of(line: str) -> str | None:
    match = _FENCE.match(line)
    return match.group(1) if match else None


def _closes(line: str, fence: str) -> bool:
    """A closing fence: the same character, at least as long, nothing after it."""
    found = _fence_of(line)
    return bool(found) and found[0] == fence[0] and len(found) >= len(fence) and not line.strip().strip(found[0])


def iter_lines_outside_fences(body: str):
    """Yield (line, in_fence) so callers can ignore headings inside code blocks. Fence lines
    themselves count as in the fence; a fence is closed by the same character, as long or longer."""
    fence: str | None = None
    for line in body.splitlines():
        if fence is None:
            opened = _fence_of(line)
            if opened:
                fence = opened
                yield line, True
                continue
            yield line, False
        else:
            if _closes(line, fence):
                fence = None
            yield line, True


def iter_lines_at(body: str):
    """Yield (offset, line, in_fence): ``iter_lines_outside_fences`` with where each line starts
    in ``body`` (citations point at passages by offset)."""
    offset = 0
    for line, in_fence in iter_lines_outside_fences(body):
        start = body.find(line, offset) if line else offset
        start = offset if start < 0 else start
        offset = start + len(line)
        yield start, line, in_fence


def _indent(line: str) -> int:
    """Columns of leading whitespace (a tab counts to the next multiple of 4), up to 8: no
    caller needs to tell more, and a line of a million spaces is not walked."""
    columns = 0
    for char in line[:8]:
        if char == " ":
            columns += 1
        elif char == "\t":
            columns += 4 - columns % 4
        else:
            break
    return columns


@dataclass(frozen=True)
class _Line:
    start: int  # offset in the body
    text: str
    kind: str  # "text", "blank", "code" (fenced or indented), "definition", "heading"


def _block_lines(body: str) -> list[_Line]:
    """Every line of ``body`` (split at "\\n" only, so offsets are exact) with its block kind.

    Code is what Python-Markdown (the renderer) shows as code: fenced blocks, and blocks indented
    by 4 columns that start a block (after a blank line, a heading or the start), or 8 inside a
    list, whose items continue at 4. An indented line right after a text line continues it."""
    lines: list[_Line] = []
    fence: str | None = None
    last = ""  # kind of the last non-blank line ("" at the start)
    after_blank = True
    in_list = False
    offset = 0
    for text in body.split("\n"):
        start, offset = offset, offset + len(text) + 1
        if fence is not None:
            if _closes(text, fence):
                fence = None
            kind = "code"
        elif not text.strip():
            lines.append(_Line(start, text, "blank"))
            after_blank = True
            continue
        elif _fence_of(text):
            fence, kind = _fence_of(text), "code"
        else:
            indent = _indent(text)
            block_start = after_blank or last in ("", "heading", "definition", "code")
            if indent >= (8 if in_list else 4) and block_start:
                kind = "code"
            elif _DEFINITION.match(text):
                kind = "definition"
            elif atx_heading(text):
                kind = "heading"
            else:
                kind = "text"
            if indent < 4 and kind != "code":
                if _LIST_ITEM.match(text) and (block_start or in_list):
                    in_list = True
                elif after_blank:
                    in_list = False
        lines.append(_Line(start, text, kind))
        last, after_blank = kind, False
    return lines


def block_lines(body: str) -> list[_Line]:
    """Every line of ``body`` with its offset and block kind ("text", "blank", "code", "heading",
    "definition" for a link reference definition): the one reading of Markdown's block structure
    (links, the offline answer's units)."""
    return _block_lines(body)


# ---------------------------------------------------------------------------------------------
# links


@dataclass(frozen=True)
class Link:
    """One link in a text. Offsets are in the text: ``start``/``end`` the whole link,
    ``text_start``/``text_end`` what a reader sees (between the brackets).

    ``kind``: ``inline`` (``[text](target)``, or an image ``![alt](src)``), ``definition``
    (a ``[label]: target`` line; ``start``/``end`` are the whole line), ``reference`` (a use,
    ``[text][label]``, ``[label][]`` or ``[label]``, of a definition in the same text) or
    ``wikilink`` (``[[target]]``, ``[[target|label]]``; ``![[target]]`` is an embed, ``image``
    set: ``target`` is the name as written, ``#heading`` included, resolved by
    ``store.links.resolve_wikilink``)."""

    start: int
    end: int
    line: int
    text: str
    target: str
    image: bool = False
    kind: str = "inline"
    label: str = ""  # the normalized label, for definitions and references
    text_start: int = 0
    text_end: int = 0

    @property
    def reference(self) -> bool:
        """A ``[label]: target`` definition, not a link in running text."""
        return self.kind == "definition"


def link_label(label: str) -> str:
    """How labels are compared: case and runs of whitespace ignored."""
    return " ".join(label.split()).casefold()


def _destination(dest: str) -> str:
    """A link destination as written to what it points at: ``<...>`` unwrapped, backslash
    escapes of punctuation undone (``a\\_b.md`` is ``a_b.md``, as the renderer reads it)."""
    if dest.startswith("<") and dest.endswith(">"):
        dest = dest[1:-1]
    return unescape(dest)


def unescape(text: str) -> str:
    """Markdown's backslash escapes of punctuation undone: ``\\_\\_init\\_\\_.py`` is ``__init__.py``
    (how the reST and DOCX readers write text that is not emphasis), ``a\\_b.md`` is ``a_b.md``."""
    return _ESCAPED.sub(r"\1", text) if "\\" in text else text


def _code_spans(text: str) -> list[tuple[int, int]]:
    """The ``(start, end)`` offsets of the code spans of ``text`` (one paragraph), in order.

    A span opens with a run of backticks and closes at the next run of exactly that length; a
    backslash before the run makes its first backtick literal."""
    runs: list[tuple[int, int, bool]] = []  # (start, end, first backtick escaped)
    escaped_until = -1
    for match in _TICK_TOKEN.finditer(text):
        if match.group()[0] == "\\":
            if len(match.group()) % 2:
                escaped_until = match.end()
            continue
        runs.append((match.start(), match.end(), match.start() == escaped_until))
    if len(runs) < 2:
        return []
    by_length: dict[int, list[int]] = {}
    for index, (start, end, _escaped) in enumerate(runs):
        by_length.setdefault(end - start, []).append(index)
    spans: list[tuple[int, int]] = []
    index = 0
    while index < len(runs):
        start, end, escaped = runs[index]
        if escaped:
            start += 1
        candidates = by_length.get(end - start, [])
        at = bisect.bisect_right(candidates, index)
        if end > start and at < len(candidates):
            closer = candidates[at]
            spans.append((start, runs[closer][1]))
            index = closer + 1
        else:
            index += 1
    return spans


def _blank_code_spans(text: str) -> str:
    """``text`` (one paragraph) with its code spans blanked out, offsets and line breaks kept."""
    spans = _code_spans(text) if "`" in text else []
    if not spans:
        return text
    out: list[str] = []
    position = 0
    for start, end in spans:
        out.append(text[position:start])
        out.append(_NOT_NEWLINE.sub(lambda run: " " * len(run.group()), text[start:end]))
        position = end
    out.append(text[position:])
    return "".join(out)


def code_blanked(text: str) -> str:
    """``text`` with its code (fenced blocks, code spans of each line) blanked out, every other
    character at its offset: where to look for markup that code only shows (an ``<!--`` or a
    ``<script>`` in backticks is not one). ``text`` itself when its lines are not all ``\n``-
    separated (offsets could not be kept)."""
    lines = [(" " * len(line) if in_fence else _blank_code_spans(line)) for line, in_fence in
             iter_lines_outside_fences(text)]
    blanked = "\n".join(lines)
    if len(blanked) != len(text) and len(blanked) + 1 == len(text) and text.endswith("\n"):
        blanked += "\n"
    return blanked if len(blanked) == len(text) else text


def _inline_links(original: str, base: int, definitions: dict[str, str], found: list[Link]) -> None:
    """Append the links of one paragraph (``original``, at offset ``base`` of the whole text) to
    ``found``. Brackets are matched with a stack, as CommonMark does, on the text with its code
    spans blanked (a bracket in code is not one): the innermost ``]`` closes the nearest ``[``,
    and a link cannot contain another link. Link texts and labels are read from ``original``
    (``[`fs.readFile()`][]`` is labelled `` `fs.readFile()` ``, as its definition is)."""
    text = _blank_code_spans(original)
    if "[[" in text:
        text = _wikilinks(text, original, base, found)
    openers: list[tuple[int, bool]] = []  # (offset of "[" or "![", is an image)
    barrier = 0  # openers below this index are inside a link already made: not links ("[" only)
    skip_until = -1
    for match in _BRACKET_TOKEN.finditer(text):
        at = match.start()
        if at < skip_until:
            continue
        token = match.group()
        if token[0] == "\\":
            continue
        if token != "]":
            openers.append((at, token == "!["))
            continue
        if not openers:
            continue
        opener, image = openers.pop()
        inactive = not image and len(openers) < barrier
        barrier = min(barrier, len(openers))
        if inactive:
            continue
        text_start, text_end, after = opener + (2 if image else 1), at, match.end()
        tail = _INLINE_TAIL.match(text, after)
        kind, label = "inline", ""
        if tail:
            target, end = _destination(tail.group("dest")), tail.end()
        else:
            reference = _REFERENCE_TAIL.match(text, after)
            label = link_label(original[reference.start("label"):reference.end("label")]) if reference else ""
            end = reference.end() if reference else after
            if not label:  # "[text][]" or "[text]": the text is the label
                label = link_label(original[text_start:text_end])
            if label not in definitions:
                continue
            kind, target = "reference", definitions[label]
        found.append(Link(base + opener, base + end, 0, original[text_start:text_end], target, image, kind, label,
                          base + text_start, base + text_end))
        skip_until = end
        if not image:
            barrier = len(openers)  # every "[" still open is now inside a link


def _wikilinks(text: str, original: str, base: int, found: list[Link]) -> str:
    """Append the wikilinks of one paragraph (``text``: its code spans blanked) to ``found``;
    return ``text`` with them blanked, so their brackets are not read again as Markdown links."""
    spans: list[tuple[int, int]] = []
    for match in _WIKILINK.finditer(text):
        target = original[match.start("target"):match.end("target")]
        if target.endswith("\\"):  # "[[a\\|b]]": the escaped "|" of a table cell
            target = target[:-1]
        if not target.strip():
            continue
        if match.group("label") is not None:
            text_start, text_end = match.start("label"), match.end("label")
        else:  # shown as its name: "[[page#Heading]]" reads "page" ("[[#Heading]]" as written)
            text_start, text_end = match.start("target"), match.end("target")
            name_end = original.find("#", text_start, text_end)
            if name_end > text_start and original[text_start:name_end].strip():
                text_end = name_end
        found.append(Link(base + match.start(), base + match.end(), 0, original[text_start:text_end],
                          target.strip(), bool(match.group("embed")), "wikilink", "",
                          base + text_start, base + text_end))
        spans.append((match.start(), match.end()))
    if not spans:
        return text
    out: list[str] = []
    position = 0
    for start, end in spans:
        out.append(text[position:start])
        out.append(" " * (end - start))
        position = end
    out.append(text[position:])
    return "".join(out)


def find_links(body: str) -> list[Link]:
    """Every link, image, reference definition and reference outside code, in order."""
    lines = _block_lines(body)
    definitions: dict[str, str] = {}
    found: list[Link] = []
    for line in lines:
        if line.kind == "definition":
            match = _DEFINITION.match(line.text)
            label = link_label(match.group("label"))
            target = _destination(match.group("dest"))
            definitions.setdefault(label, target)  # the first definition of a label wins
            end = line.start + len(line.text) + (1 if line.start + len(line.text) < len(body) else 0)
            text_start = line.start + match.start("label")
            found.append(Link(line.start, end, 0, match.group("label"), target, kind="definition", label=label,
                              text_start=text_start, text_end=text_start + len(match.group("label"))))
    paragraph: list[_Line] = []

    def flush() -> None:
        if paragraph:
            start = paragraph[0].start
            text = body[start:paragraph[-1].start + len(paragraph[-1].text)]
            _inline_links(text, start, definitions, found)
            paragraph.clear()

    for line in lines:
        if line.kind == "text":
            paragraph.append(line)
            continue
        flush()
        if line.kind == "heading":
            paragraph.append(line)
            flush()
    flush()
    found.sort(key=lambda link: link.start)
    line_starts = [line.start for line in lines]
    return [_with_line(link, bisect.bisect_right(line_starts, link.start)) for link in found]


def _with_line(link: Link, line: int) -> Link:
    return Link(link.start, link.end, line, link.text, link.target, link.image, link.kind, link.label,
                link.text_start, link.text_end)


def inline_links(text: str) -> list[Link]:
    """The inline links and images of one paragraph (no block structure, no definitions)."""
    found: list[Link] = []
    _inline_links(text, 0, {}, found)
    return found


def replace_links(text: str, links: list[Link]) -> str:
    """``text`` with each of ``links`` replaced by what a reader sees of it (its text; a
    definition by nothing). Nested links (an image inside a link) are handled: only the
    brackets and targets are cut, so each text is kept once."""
    cuts: list[tuple[int, int]] = []
    for link in links:
        if link.kind == "definition":
            cuts.append((link.start, link.end))
        else:
            cuts.append((link.start, link.text_start))
            cuts.append((link.text_end, link.end))
    cuts.sort()
    out: list[str] = []
    position = 0
    for start, end in cuts:
        if start < position:  # inside a definition already cut
            start = position
        if end <= start:
            continue
        out.append(text[position:start])
        position = end
    out.append(text[position:])
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# plain text, paragraphs, sentences, sections


def first_heading(body: str) -> str | None:
    for line, in_fence in iter_lines_outside_fences(body):
        if in_fence:
            continue
        heading = atx_heading(line)
        if heading:
            return plain_text(heading[1])
    return None


_HTML_H1_OPEN = re.compile(r"<h1\b[^<>]*+>")
_HTML_TAG = re.compile(r"<[^<>\n]*+>")


def title_heading(body: str) -> str | None:
    """A document's own title: its first level-1 heading outside code (``# Title``), else the
    first ``<h1>`` of its HTML, whichever comes first (a README that opens with
    ``<h1 align="center">Name</h1>`` and ends with a ``# Changelog`` is "Name"); never a
    subsection heading. None when it has neither."""
    position = 0
    for line, in_fence in iter_lines_outside_fences(body):
        at = body.find(line, position)
        position = at + len(line) if at >= 0 else position
        if in_fence:
            continue
        heading = atx_heading(line, max_level=1)
        if heading and plain_text(heading[1]):
            before = max(0, min(position - len(line), 200_000))
            return (_html_h1(body[:before]) if "<" in body[:before] else None) or plain_text(heading[1])
    return _html_h1(body[:200_000])


def _html_h1(body: str) -> str | None:
    """The text of the first ``<h1>`` element outside code (tags inside dropped; an ``<h1>`` in
    a template example is not the page's); one forward scan."""
    lowered = (code_blanked(body) if "`" in body or "~~~" in body else body).lower()
    start = _HTML_H1_OPEN.search(lowered)
    if start is None:
        return None
    end = lowered.find("</h1", start.end())
    if end < 0:
        return None
    text = plain_text(_HTML_TAG.sub(" ", body[start.end():end]))
    return text or None


def plain_text(markdown: str, *, keep_code: bool = False) -> str:
    """Links to their text, emphasis and code markers removed (``keep_code``: code spans kept as
    written, backticks and all, for text shown as Markdown again), whitespace folded."""
    text = replace_links(markdown, inline_links(markdown)) if "[" in markdown else markdown
    text = _without_markup(text, keep_code)
    return " ".join(text.split())


def _without_markup(text: str, keep_code: bool = False) -> str:
    """Paired emphasis markers and code backticks removed, backslash escapes undone
    (``store/inline_markup.py``); the text of a code span is kept as written (``UVICORN_*``
    stays ``UVICORN_*``, `` `__init__` `` stays ``__init__``)."""
    if "`" not in text and "*" not in text and "_" not in text and "\\" not in text and "&" not in text:
        return text
    return visible_text(text, _code_spans(text) if "`" in text else [], keep_code=keep_code)


def prose_paragraphs(body: str) -> list[str]:
    """Paragraphs of prose: no headings, code, tables, block quotes, HTML blocks or footnote
    definitions; images and footnote marks left out."""
    paragraphs: list[str] = []
    current: list[str] = []
    for line, in_fence in iter_lines_outside_fences(body):
        stripped = line.strip()
        skip = in_fence or not stripped or atx_heading(line) or stripped.startswith(("|", "<", ">"))
        if skip:
            if current:
                paragraphs.append(" ".join(current))
                current = []
            continue
        if stripped.startswith(("- ", "* ", "+ ")) or _NUMBERED.match(stripped):
            if current:
                paragraphs.append(" ".join(current))
                current = []
            stripped = _BULLET.sub("", stripped, count=1)
        current.append(stripped)
    if current:
        paragraphs.append(" ".join(current))
    return [text for text in (plain_text(_without_images(_FOOTNOTE_MARK.sub("", p))) for p in paragraphs
                              if not _FOOTNOTE_DEFINITION.match(p)) if text]


_FOOTNOTE_MARK = re.compile(r"\[\^[^\]\[\s]++\](?!:)")  # "team.[^1] It is": the mark is not text
_FOOTNOTE_DEFINITION = re.compile(r"\[\^[^\]\[\s]++\]:")


def _without_images(paragraph: str) -> str:
    """A paragraph without its images (a badge's alt text is not prose)."""
    if "![" not in paragraph:
        return paragraph
    images = [link for link in inline_links(paragraph) if link.image]
    out: list[str] = []
    position = 0
    for image in images:
        if image.start >= position:
            out.append(paragraph[position:image.start])
            position = image.end
    out.append(paragraph[position:])
    return "".join(out)


def first_sentence(body: str, limit: int = 200) -> str:
    """The first sentence of the first prose paragraph, cut at a word boundary to ``limit``."""
    for paragraph in prose_paragraphs(body):
        sentences = split_sentences(paragraph)
        if sentences:
            return clip(sentences[0], limit)
    return ""


def demote_headings(body: str, levels: int = 1) -> str:
    """``body`` with every heading outside code ``levels`` deeper (at most ``######``): text
    placed under a heading of its own (a source in an article, an archive member)."""
    out = []
    for line, in_fence in iter_lines_outside_fences(body):
        heading = None if in_fence else atx_heading(line)
        if heading:
            hashes = heading[0]
            line = "#" * min(6, hashes + levels) + line[hashes:]
        out.append(line)
    return "\n".join(out)


def split_sections(body: str, level: int | None = None) -> list[Section]:
    """Split at every heading (outside code fences), or, given ``level``, only at the headings of
    that level that have text (``level=2``: an article's ``##`` sections, which compile edits
    one by one; deeper headings stay inside them). The lead (text before the first split, an
    H1 included) comes first, with heading "" and level 0; empty sections are left out."""
    sections: list[Section] = []
    heading, depth, lines = "", 0, []
    for line, in_fence in iter_lines_outside_fences(body):
        found = None if in_fence else atx_heading(line)
        if found and (level is None or (found[0] == level and found[1])):
            if lines or heading:
                sections.append(Section(heading, depth, "\n".join(lines).strip("\n")))
            heading, depth, lines = plain_text(found[1]), found[0], [line]
        else:
            lines.append(line)
    if lines or heading:
        sections.append(Section(heading, depth, "\n".join(lines).strip("\n")))
    return [s for s in sections if s.text.strip()]
