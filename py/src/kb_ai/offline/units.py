"""Answer-bearing units of a page: the pieces an extractive answer quotes whole.

A unit is what a reader needs to see to get a fact, never cut:

* ``sentence``: a sentence of a paragraph, joined with its neighbour when either is short
  ("The maximum number of connections. Defaults to `500`.");
* ``list-item``: one item of a list (its continuation lines included), with the lead-in that
  introduces the list ("There are three ways to configure Uvicorn:", or a short paragraph that
  announces it without a colon: "The following three types ... are supported. ...");
* ``definition``: a one-line definition (``term: definition``, ``**Term** — ...``);
* ``heading``: a heading with the first line under it ("UVICORN_PORT: Bind to this port.");
* ``table-row``: a row of a table, each cell named by its column header;
* ``list``: a short list whole, with its lead-in ("Eviction policies: Random; LRU; LFU"), or the
  heading right above a list of short entries that is no changelog ("Reader-writer locks: ...");
* ``pair``: two neighbouring sentences (``neighbour_pairs``), of a paragraph or of two one-line
  paragraphs in a row;
* ``code``: a short code block (with the sentence that introduces it, "To clear the cache,
  run:"), or one line of a longer one.

Each unit knows where it is: its page, the heading it sits under (plain text), and ``quote``, the
exact text of the page body it comes from (``body[start:end] == quote``), so a citation can point
at the passage; the heading's id in the rendered page is found from ``start`` by the one
heading-anchor rule of passage-level citations (not computed here: an answer that cites nothing
of a page never needs it, and the rule needs Python-Markdown, slow to import).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kb_ai.store.markdown_text import atx_heading, block_lines, plain_text
from kb_ai.store.sentences import sentence_spans

MAX_UNIT_CHARS = 600  # a longer list item or paragraph is quoted sentence by sentence
SHORT_WORDS = 4  # a sentence under this many words is joined to its neighbour
MAX_LEAD_IN_CHARS = 200  # a longer lead-in is left out (never cut)
MAX_CODE_LINES = 8  # a longer code block is quoted line by line
MAX_ENTRY_CHARS = 60  # a list under a heading is quoted whole only when each item is a short entry
_ISSUE_REF = re.compile(r"(?<![\w&])#\d+\b")  # "(#1362)": an entry of a changelog
_CHANGELOG_HEADING = re.compile(r"(?:v?\d+(?:\.\d+)+\b.*|added|changed|fixed|removed|deprecated|security|fixes|features|"
                                r"bug ?fixes|improvements|breaking changes|other changes|new features)$", re.IGNORECASE)
_LIST_MARK = re.compile(r"[ \t]*+(?:[-*+]|\d{1,9}+[.)])(?:[ \t]++|$)")
_DEFINITION = re.compile(r"^(?:\*\*[^*\n]{1,80}\*\*|`[^`\n]{1,80}`|[\w][\w .()/-]{0,60}?)\s*(?::|—|–|\s-)\s+\S")
_ADMONITION = re.compile(r"^[ \t]*+(?:!!!|\?\?\?\+?)[ \t]")
_FENCE_LINE = re.compile(r"[ \t]*+(`{3,}+|~{3,}+)")
_TABLE_SEPARATOR = re.compile(r"^\|?[\s:|-]+\|?$")
_QUOTE_MARK = re.compile(r"[ \t]*+> ?")  # a blockquote line's marker ("> "), as readers write code under a note
_CONTINUED_QUOTE = re.compile(r"\n[ \t]*+>[ \t]?")
_OPENERS, _CLOSERS = "([{", ")]}"
# A sentence that announces what follows it without ending in ":" ("The following three types of
# authentication are supported.", "... as follows.", "... are listed below.").
_ANNOUNCES = re.compile(r"\b(?:the following|as follows|(?:listed|shown|given|described) below)\b", re.IGNORECASE)


@dataclass(frozen=True)
class _Quoted:
    """A line of a blockquote, its marker left out (``start`` moved past it: offsets stay exact)."""

    start: int
    text: str
    kind: str = "code"


@dataclass(frozen=True)
class Unit:
    """One answer-bearing unit of a page (see the module's docstring)."""

    path: str
    title: str
    kind: str  # sentence | pair | list-item | definition | heading | table-row | list | code
    text: str  # what the answer shows: plain text (code as written), lead-in or heading included
    quote: str  # the exact text of the page body the unit quotes
    start: int  # body[start:end] == quote
    end: int
    heading: str = ""  # the heading the unit sits under, plain text ("" before the first)
    lead: str = ""  # code: the sentence that introduces it ("To clear the cache, run:"), in ``quote`` too

    def as_dict(self) -> dict[str, object]:
        return {"path": self.path, "title": self.title, "kind": self.kind, "text": self.text,
                "quote": self.quote, "start": self.start, "end": self.end, "heading": self.heading,
                "lead": self.lead}


class _Builder:
    def __init__(self, path: str, title: str, body: str):
        self.path, self.title, self.body = path, title, body
        self.units: list[Unit] = []
        self.heading = ""
        self.pending_heading: tuple[str, int, int] | None = None  # a heading waiting for its first line

    def add(self, kind: str, text: str, start: int, end: int, lead: str = "") -> None:
        text = " ".join(text.split()) if kind != "code" else text.strip("\n")
        if not text.strip():
            return
        quote = self.body[start:end]
        self.units.append(Unit(self.path, self.title, kind, text, quote, start, end, self.heading, lead))
        if self.pending_heading is not None:
            heading, h_start, _h_end = self.pending_heading
            self.pending_heading = None
            first = text if kind != "code" else text.splitlines()[0]
            joined = f"{heading}: {first}"
            if len(joined) <= MAX_UNIT_CHARS:
                self.units.append(Unit(self.path, self.title, "heading", joined, self.body[h_start:end], h_start, end,
                                       self.heading))

    def set_heading(self, text: str, level: int, start: int, end: int) -> None:
        heading = plain_text(text)
        self.heading = heading
        # The page's own title is not a heading worth pairing with its first line.
        self.pending_heading = (heading, start, end) if level > 1 and heading else None

    def prose(self, start: int, end: int, lead: str = "", kind: str = "sentence") -> None:
        """A run of prose (a paragraph or a list item) at body[start:end]: whole when short
        enough, else its sentences, a short one joined to its neighbour."""
        raw = self.body[start:end]
        flat = raw.replace("\n", " ")  # same length: offsets stay exact
        if len(flat.strip()) <= MAX_UNIT_CHARS and kind != "sentence":
            self.add(kind, _with_lead(lead, plain_text(_unquoted(raw), keep_code=True)), start, end)
            return
        spans = sentence_spans(flat)
        groups: list[list[tuple[int, int]]] = []
        for span in spans:
            short = len(flat[span[0]:span[1]].split()) < SHORT_WORDS
            if groups and (short or len(flat[groups[-1][-1][0]:groups[-1][-1][1]].split()) < SHORT_WORDS) \
                    and span[1] - groups[-1][0][0] <= MAX_UNIT_CHARS:
                groups[-1].append(span)
            else:
                groups.append([span])
        for number, group in enumerate(groups):
            g_start, g_end = start + group[0][0], start + group[-1][1]
            text = plain_text(_unquoted(self.body[g_start:g_end]), keep_code=True)
            self.add(kind, _with_lead(lead, text) if number == 0 else text, g_start, g_end)


def _unquoted(text: str) -> str:
    """A blockquote's lines without their markers: "> " opening a continuation line is no text."""
    return _CONTINUED_QUOTE.sub("\n", text)


def _with_lead(lead: str, text: str) -> str:
    return f"{lead} {text}" if lead else text


class _List:
    """The items of the list being read, and the lead-in that introduces it."""

    def __init__(self) -> None:
        self.lead, self.lead_start = "", -1
        self.heading, self.heading_start = "", -1  # the heading right above, when nothing else is between
        self.items: list[tuple[int, int, str]] = []

    def flush(self, builder: _Builder) -> None:
        """The whole list as one unit ("Policies: Random; LRU; LFU"), when it has a lead-in (a
        sentence, or else the heading right above it when every item is a short entry:
        "Reader-writer locks: ..."), two items or more, and is short: a question about the list
        gets all of it."""
        lead, start = (self.lead, self.lead_start) if self.lead else (self.heading, self.heading_start)
        if not self.lead and (_CHANGELOG_HEADING.match(self.heading.rstrip(":"))
                              or any(len(item) > MAX_ENTRY_CHARS or _ISSUE_REF.search(item) for _s, _e, item in self.items)):
            lead = ""  # under a heading, only an enumeration of short entries is one answer; a changelog's are separate facts
        if lead and len(self.items) >= 2:
            text = f"{lead} " + "; ".join(item for _s, _e, item in self.items)
            if len(text) <= MAX_UNIT_CHARS:
                builder.add("list", text, start, self.items[-1][1])
        self.items = []

    def introduce(self, lead: str, start: int) -> None:
        self.lead, self.lead_start = lead, start
        self.heading, self.heading_start = "", -1

    def under_heading(self, heading: str, start: int) -> None:
        """A heading: it introduces a list right under it (only the whole list, not each item)."""
        self.introduce("", -1)
        if heading:
            self.heading, self.heading_start = f"{heading}:", start


def _is_table_start(lines, i: int) -> bool:
    """A table: a row of cells, then a separator row (``|---|---|``, outer pipes optional)."""
    if "|" not in lines[i].text or i + 1 >= len(lines) or lines[i + 1].kind != "text":
        return False
    separator = lines[i + 1].text.strip()
    return "-" in separator and "|" in separator and bool(_TABLE_SEPARATOR.match(separator))


def page_units(path: str, title: str, body: str) -> list[Unit]:
    """Every answer-bearing unit of one page body, in page order."""
    builder = _Builder(path, title, body)
    lines = block_lines(body)
    current = _List()  # the list being read, and the sentence that introduces what follows
    after_lead = False  # the last block was a paragraph ending in ":" (it introduces the next block)
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.text.strip()
        if line.kind == "blank" or line.kind == "definition" or _QUOTE_MARK.fullmatch(line.text):
            i += 1  # (a blockquote's empty line ">" parts its paragraphs as a blank line does)
            continue
        if line.kind == "heading":
            current.flush(builder)
            level, text = atx_heading(line.text) or (1, "")
            builder.set_heading(text, level, line.start, line.start + len(line.text))
            current.under_heading(plain_text(text) if level > 1 else "", line.start)
            after_lead = False
            i += 1
            continue
        quoted = _quoted_fence(lines, i)
        if quoted:  # "> ```python" ... "> ```": a code block inside a blockquote is code, not prose
            _code(builder, quoted, current if after_lead else None)
            after_lead = False
            i += len(quoted)
            continue
        if line.kind == "code":
            j = i
            while j < len(lines) and lines[j].kind == "code":
                j += 1
            _code(builder, lines[i:j], current if after_lead else None)
            after_lead, current.heading = False, ""
            i = j
            continue
        if stripped.startswith("|") or _is_table_start(lines, i):
            current.flush(builder)
            j = i
            while j < len(lines) and lines[j].kind == "text" and "|" in lines[j].text:
                j += 1
            _table(builder, lines[i:j])
            current.introduce("", -1)
            i, after_lead = j, False
            continue
        if stripped.startswith("<") or _ADMONITION.match(line.text):
            i += 1  # an HTML block line, an admonition's marker: not prose
            continue
        if _LIST_MARK.match(line.text):
            j = i + 1
            indent = len(line.text) - len(line.text.lstrip())
            while j < len(lines) and lines[j].kind == "text" and not _LIST_MARK.match(lines[j].text) \
                    and not lines[j].text.strip().startswith("|"):
                j += 1
            mark = _LIST_MARK.match(line.text)
            start = line.start + mark.end()
            end = lines[j - 1].start + len(lines[j - 1].text)
            lead = current.lead if indent < 2 and len(current.lead) <= MAX_LEAD_IN_CHARS else ""
            kind = "definition" if _DEFINITION.match(body[start:end].strip()) else "list-item"
            builder.prose(start, end, lead, kind)
            if indent < 2:
                current.items.append((start, end, plain_text(body[start:end], keep_code=True)))
            i, after_lead = j, False
            continue
        j = i
        while j < len(lines) and lines[j].kind == "text" and not _LIST_MARK.match(lines[j].text) \
                and not lines[j].text.strip().startswith(("|", "<")) and not (j > i and _quoted_fence(lines, j)) \
                and not _QUOTE_MARK.fullmatch(lines[j].text):
            j += 1
        start, end = line.start + (len(line.text) - len(line.text.lstrip(" >"))), lines[j - 1].start + len(lines[j - 1].text)
        if j - i == 1 and _DEFINITION.match(stripped) and len(stripped) <= MAX_UNIT_CHARS:
            builder.prose(start, end, "", "definition")
        else:
            builder.prose(start, end)
        after_lead = False
        if len(line.text) - len(line.text.lstrip()) < 2:  # a paragraph inside a list item introduces nothing
            current.flush(builder)
            spans = sentence_spans(body[start:end].replace("\n", " "))
            last = plain_text(body[start + spans[-1][0]:start + spans[-1][1]], keep_code=True) if spans else ""
            announcing = _announcing(body, start, end, spans) if spans and not last.endswith(":") else -1
            if last.endswith(":"):  # "There are three ways to configure it:"
                current.introduce(last, start + spans[-1][0])
                after_lead = True
            elif announcing >= 0 and _next_is_list(lines, j):
                # "The following three types ... are supported. They work over HTTPS." then a list
                current.introduce(plain_text(body[announcing:end], keep_code=True), announcing)
            else:
                current.introduce("", -1)
        i = j
    current.flush(builder)
    return builder.units


def _announcing(body: str, start: int, end: int, spans: list[tuple[int, int]]) -> int:
    """Where the sentence announcing what follows ("The following ... are supported.") starts in a
    short paragraph at body[start:end], the rest of the paragraph being part of the lead-in; -1 if
    none does or the lead-in would be too long."""
    for s_start, s_end in spans:
        if _ANNOUNCES.search(body[start + s_start:start + s_end]) and end - (start + s_start) <= MAX_LEAD_IN_CHARS:
            return start + s_start
    return -1


def _next_is_list(lines, j: int) -> bool:
    """Whether the first line after the blank lines from ``lines[j]`` starts a list."""
    while j < len(lines) and lines[j].kind == "blank":
        j += 1
    return j < len(lines) and lines[j].kind == "text" and _LIST_MARK.match(lines[j].text) is not None


def _code(builder: _Builder, lines, introduced: _List | None = None) -> None:
    """A code block: whole when short, else line by line (fence lines left out). A short block
    right after a sentence ending in ":" ("To clear the cache, run:") is quoted with it."""
    inner = list(lines)
    opening = _FENCE_LINE.match(inner[0].text)
    if opening:  # the fence lines themselves; a fence-like line inside the block is code
        inner = inner[1:]
        mark = opening.group(1)
        if inner and inner[-1].text.strip().startswith(mark[0] * len(mark)) and not inner[-1].text.strip().strip(mark[0]):
            inner = inner[:-1]
    inner = [ln for ln in inner if ln.text.strip()]
    if not inner:
        return
    if len(inner) <= MAX_CODE_LINES:
        start, end = inner[0].start, inner[-1].start + len(inner[-1].text)
        indent = min(len(ln.text) - len(ln.text.lstrip()) for ln in inner)
        text = "\n".join(ln.text[indent:] for ln in inner)
        if introduced is not None and introduced.lead and len(introduced.lead) <= MAX_LEAD_IN_CHARS:
            builder.add("code", text, introduced.lead_start, end, lead=introduced.lead)
        else:
            builder.add("code", text, start, end)
        return
    for statement in _statements(inner):  # a statement whole, never a line cut out of one
        if len(statement) > MAX_CODE_LINES:  # too long whole: its lines that stand alone ('"key": "value",')
            for ln in statement:
                code = ln.text.strip()
                if _depth(ln.text) == 0 and not code.startswith("#") and not code.rstrip(",").endswith((":", "\\")) \
                        and code.strip(_CLOSERS + ",; "):
                    builder.add("code", code, ln.start + len(ln.text) - len(ln.text.lstrip()), ln.start + len(ln.text))
            continue
        first, last = statement[0], statement[-1]
        indent = min(len(ln.text) - len(ln.text.lstrip()) for ln in statement)
        text = "\n".join(ln.text[indent:].rstrip() for ln in statement)
        builder.add("code", text, first.start + len(first.text) - len(first.text.lstrip()), last.start + len(last.text))


def _quoted_fence(lines, i: int) -> list[_Quoted]:
    """The lines of a fenced code block written inside a blockquote, starting at ``lines[i]``
    (fences included, markers stripped); [] when ``lines[i]`` does not open one."""
    first = lines[i]
    if first.kind != "text" or not first.text.lstrip().startswith(">"):
        return []
    mark = _QUOTE_MARK.match(first.text)
    opening = _FENCE_LINE.match(first.text[mark.end():])
    if not opening:
        return []
    fence = opening.group(1)
    quoted: list[_Quoted] = []
    for line in lines[i:]:
        mark = _QUOTE_MARK.match(line.text)
        if line.kind not in ("text", "code") or not line.text.lstrip().startswith(">"):
            break
        inner = line.text[mark.end():]
        quoted.append(_Quoted(line.start + mark.end(), inner))
        if len(quoted) > 1 and inner.strip().startswith(fence[0] * len(fence)) and not inner.strip().strip(fence[0]):
            break
    return quoted


def _depth(code: str) -> int:
    """How many brackets a line of code leaves open (strings and a trailing # comment ignored)."""
    depth, quote = 0, ""
    for index, char in enumerate(code):
        if quote:
            if char == quote and code[index - 1] != "\\":
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#":
            break
        elif char in _OPENERS:
            depth += 1
        elif char in _CLOSERS:
            depth -= 1
    return depth


def _continues(code: str) -> bool:
    """A line whose statement goes on: a comment alone, or code ending in ":", "\\" or "," (a
    block's header, a continued line, an item of a call)."""
    text = code.strip()
    if text.startswith("#"):
        return True
    bare = text.split(" #", 1)[0].rstrip()
    return bare.endswith((":", "\\", ","))


def _statements(lines) -> list[list]:
    """The lines of a long code block grouped into statements: a line leaving a bracket open is
    joined with the lines up to the one closing it; a block header ("class A:", "try:") with the
    lines indented under it; a comment alone or a continued line with the line after it; a
    doctest's "..." line with the statement it continues; comments ending the block with the last
    statement."""
    groups: list[list] = []
    current: list = []
    depth, header, pending = 0, None, False  # open brackets; the open block header's indent; the line goes on
    for line in lines:
        indent = len(line.text) - len(line.text.lstrip())
        code = line.text.strip()
        doctest_more = code.startswith("...") and not code.startswith("....")
        if current and depth == 0 and not pending and not doctest_more and (header is None or indent <= header):
            groups.append(current)
            current, header = [], None
        current.append(line)
        depth = max(depth + _depth(line.text), 0)
        bare = code.split(" #", 1)[0].rstrip()
        if depth == 0 and header is None and bare.endswith(":") and not code.startswith("#"):
            header = indent
        pending = depth > 0 or _continues(line.text)
    if current:
        if groups and all(line.text.strip().startswith("#") for line in current):
            groups[-1].extend(current)  # comments closing the block show the last statement's output
        else:
            groups.append(current)
    return groups


def _cells(row: str) -> list[str]:
    return [plain_text(cell) for cell in row.strip().strip("|").split("|")]


def _table(builder: _Builder, lines) -> None:
    """Each row of a table, its cells named by the header row's."""
    rows = [ln for ln in lines if not _TABLE_SEPARATOR.match(ln.text.strip())]
    if not rows:
        return
    header = _cells(rows[0].text) if len(lines) > 1 and _TABLE_SEPARATOR.match(lines[1].text.strip()) else []
    for ln in rows[1:] if header else rows:
        cells = _cells(ln.text)
        if header and len(header) == len(cells):
            text = "; ".join(f"{h}: {c}" if h else c for h, c in zip(header, cells, strict=True) if c)
        else:
            text = " | ".join(c for c in cells if c)
        builder.add("table-row", text, ln.start, ln.start + len(ln.text))


_PAIRED = ("sentence", "definition")


def neighbour_pairs(units: list[Unit], body: str) -> list[Unit]:
    """Each sentence (or one-line definition) of ``units`` joined with the next one, as a ``pair``
    unit: the next sentence of its paragraph, or the next paragraph when both are one line (notes
    written a line at a time), when the two fit in ``MAX_UNIT_CHARS``. The page text between
    them is in the quote (``body[start:end] == quote``)."""
    ordered = sorted((u for u in units if u.kind in _PAIRED), key=lambda u: u.start)
    pairs = []
    for first, second in zip(ordered, ordered[1:], strict=False):
        between = body[first.end:second.start]
        if between.strip() or second.end - first.start > MAX_UNIT_CHARS or between.count("\n") > 2:
            continue
        if "\n\n" in between and not (_whole_line(body, first.start, first.end)
                                       and _whole_line(body, second.start, second.end)):
            continue
        pairs.append(Unit(first.path, first.title, "pair", f"{first.text} {second.text}",
                          body[first.start:second.end], first.start, second.end, first.heading))
    return pairs


def _whole_line(body: str, start: int, end: int) -> bool:
    """Whether body[start:end] is a line of its own."""
    return (start == 0 or body[start - 1] == "\n") and (end == len(body) or body[end] == "\n")
