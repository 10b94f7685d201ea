"""Markdown dialects written as plain Markdown, so no dialect's markup reaches an article.

* MkDocs/Material admonitions (``!!! note "Title"``, collapsible ``??? abstract`` and ``???+``)
  -> a quoted note (``> **Title:** ...``), nested ones too;
* Material content tabs (``=== "pip"``) -> the tab's label in bold, then its content;
* mkdocstrings blocks (``::: package.module`` and their indented options) -> a quoted
  ``API reference`` line naming the object (its text lives in the code, not in the page);
  a ``:::`` container closed by a ``:::`` line (Docusaurus ``:::tip Title``, Pandoc
  ``::: warning``) -> a quoted note;
* GitHub alerts (``> [!NOTE]``) -> ``> **Note:** ...``;
* setext headings (``Title`` over ``=====``) -> ATX (``# Title``); attribute lists
  (``{ #id .class }``), icon shortcodes (``:material-clock:``) and abbreviation definitions
  (``*[HTML]: ...``) removed; pymdownx snippets (``--8<-- "file.md"``) included from raw/;
* reference-style links (``[text][ref]``, ``[text][]``, ``[ref]`` with a ``[ref]: url``
  definition) -> inline links, definitions removed; mkdocstrings autorefs with no definition
  (``[`ContextVar`][contextvars.ContextVar]``) -> their text.

Code (fenced, or indented outside these blocks) is left as it is. Runs in linear time.
"""

from __future__ import annotations

import re

from kb_ai.compile.formats.context import ReadContext
from kb_ai.store.markdown_text import code_blanked, find_links

_ADMONITION = re.compile(r"^(?P<indent>[ \t]*)(?P<mark>!!!|\?\?\?\+?)[ \t]+(?P<kind>[\w-]+)(?P<rest>[^\n]*)$")
_TAB = re.compile(r"^(?P<indent>[ \t]*)===\+?!?[ \t]+\"(?P<label>[^\"\n]*)\"[ \t]*$")
# ":::note", ":::tip[Title]", "::: warning Title", "::: {.note}" with a ":::" line closing it later
_COLON_OPEN = re.compile(r"^(?P<indent>[ \t]*):{3,}[ \t]*(?P<kind>\{[^{}\n]*\}|[A-Za-z][\w-]*)(?P<title>[^\n]*)$")
_COLON_CLOSE = re.compile(r"^[ \t]*:{3,}[ \t]*$")
_MKDOCSTRINGS = re.compile(r"^(?P<indent>[ \t]*):::[ \t]+(?P<name>[\w.:-]+)[ \t]*$")
_ALERT = re.compile(r"^(?P<prefix>[ \t]*>[ \t]?)\[!(?P<kind>NOTE|TIP|IMPORTANT|WARNING|CAUTION)\][ \t]*(?P<rest>.*)$", re.I)
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
_QUOTED_TITLE = re.compile(r"\"([^\"]*)\"")
_SETEXT_H1 = re.compile(r"^=+[ \t]*$")
_SETEXT_H2 = re.compile(r"^-+[ \t]*$")
_FENCE_ATTRS = re.compile(r"^([ \t]*(?:`{3,}|~{3,}))[ \t]*\{[ \t]*\.([\w+-]++)[^{}\n]*+\}[ \t]*$")
_ABBREVIATION = re.compile(r"^\*\[[^\]\n]++\]:")
_SNIPPET = re.compile(r"^[ \t]*-{1,3}8<-{1,3}[ \t]+[\"'](?P<path>[^\"'\n]+)[\"'][ \t]*$")
# attribute lists ("## Title { #id .class }", "``` { .python .annotate }"), icon shortcodes
_ATTR_LIST = re.compile(r"[ \t]*\{:?[ \t]*[#.][^{}\n]*+\}[ \t]*$")
_ICON = re.compile(r":(?:material|octicons|fontawesome|simple)-[\w-]++:[ \t]?")


def _indent_width(line: str) -> int:
    return len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip(" "))


def _block(lines: list[str], start: int, indent: int) -> tuple[list[str], int]:
    """The lines after ``start`` indented deeper than ``indent`` (blank lines inside kept),
    dedented by 4 columns more than ``indent``; and the index after them."""
    body: list[str] = []
    index = start
    need = indent + 4
    while index < len(lines):
        line = lines[index]
        if line.strip() and _indent_width(line) < need:
            break
        body.append(line.expandtabs(4)[need:] if line.strip() else "")
        index += 1
    while body and not body[-1].strip():
        body.pop()
        index -= 1
    return body, index


def _quote(text: str, prefix: str) -> list[str]:
    return [prefix + ("> " + line if line.strip() else ">") for line in text.split("\n")]


def _note_label(kind: str, rest: str) -> str:
    titled = _QUOTED_TITLE.search(rest)
    if titled is not None:
        return titled.group(1).strip()  # '!!! note ""' : no title
    return kind.replace("-", " ").replace("_", " ").capitalize()


def _lead(label: str, body: str) -> str:
    if not label:
        return body
    if not body:
        return f"**{label}**"
    first = body.split("\n", 1)[0]
    if first.startswith(("```", "~~~", ">", "- ", "* ", "|", "#", "    ")) or re.match(r"\d+[.)] ", first):
        return f"**{label}**\n\n{body}"
    return f"**{label.rstrip(':')}:** {body}"


def _container_pairs(lines: list[str]) -> dict[int, int]:
    """Opening line -> closing line of each ``:::`` container, nested ones matched with a stack
    (one pass; an opener never closed, such as a mkdocstrings line, is not in the result)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    fence: str | None = None
    for number, line in enumerate(lines):
        found = _FENCE.match(line)
        if fence is not None:
            if found and found.group(1)[0] == fence[0] and not line.strip().strip(fence[0]):
                fence = None
            continue
        if found:
            fence = found.group(1)
        elif ":::" not in line:
            continue
        elif _COLON_CLOSE.match(line):
            if stack:
                pairs[stack.pop()] = number
        elif _COLON_OPEN.match(line):
            stack.append(number)
    return pairs


MAX_NOTES = 20


def _note(notes: list[str], note: str) -> None:
    """Add ``note``, up to ``MAX_NOTES`` of them (a page of 10,000 broken snippets is one story)."""
    if len(notes) < MAX_NOTES:
        notes.append(note)
    elif len(notes) == MAX_NOTES:
        notes.append("more snippets dropped (notes stop here)")


def _snippet(path: str, context: ReadContext | None, notes: list[str], depth: int) -> list[str]:
    """A pymdownx snippet (``--8<-- "file.md"``): the file when it is in raw/ (next to the page),
    else dropped with a note."""
    if context is None or depth >= 5:
        _note(notes, f"snippet {path} not included")
        return []
    text, why = context.include(path)
    if text is None:
        _note(notes, f"snippet of {why}: dropped")
        return []
    return _convert_blocks(text.strip("\n"), depth + 1, context, notes).split("\n")


def _convert_blocks(text: str, depth: int = 0, context: ReadContext | None = None,
                    notes: list[str] | None = None) -> str:
    notes = notes if notes is not None else []
    lines = text.split("\n")
    pairs = _container_pairs(lines)
    out: list[str] = []
    fence: str | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        if fence is not None:
            out.append(line)
            found = _FENCE.match(line)
            if found and found.group(1)[0] == fence[0] and len(found.group(1)) >= len(fence) \
                    and not line.strip().strip(fence[0]):
                fence = None
            index += 1
            continue
        found = _FENCE.match(line)
        if found:
            fence = found.group(1)
            attrs = _FENCE_ATTRS.match(line)  # "``` { .python .annotate }" -> "```python"
            out.append(attrs.group(1) + attrs.group(2) if attrs else line)
            index += 1
            continue
        match = _ADMONITION.match(line) if depth < 20 else None
        if match:
            indent = _indent_width(match.group("indent"))
            body, index = _block(lines, index + 1, indent)
            inner = _convert_blocks("\n".join(body).strip("\n"), depth + 1, context, notes)
            label = _note_label(match.group("kind"), match.group("rest"))
            out.extend(_quote(_lead(label, inner), " " * indent))
            continue
        match = _TAB.match(line) if depth < 20 else None
        if match:
            indent = _indent_width(match.group("indent"))
            body, index = _block(lines, index + 1, indent)
            inner = _convert_blocks("\n".join(body).strip("\n"), depth + 1, context, notes)
            pad = " " * indent
            out.append(f"{pad}**{match.group('label').strip()}**" if match.group("label").strip() else "")
            out.append("")
            out.extend(pad + l if l.strip() else "" for l in inner.split("\n"))
            continue
        match = _COLON_OPEN.match(line) if ":::" in line and depth < 20 else None
        closing = pairs.get(index) if match else None
        if match and closing is not None:
            # Docusaurus / Pandoc container: ":::tip Title" ... ":::" -> a quoted note
            inner_lines = lines[index + 1:closing]
            inner = _convert_blocks("\n".join(inner_lines).strip("\n"), depth + 1, context, notes)
            kind = (match.group("kind") or "").lstrip("{.").rstrip("}")
            title = (match.group("title") or "").strip().strip("[]{}\"' ")
            label = title or kind.replace("-", " ").replace("_", " ").capitalize()
            out.extend(_quote(_lead(label, inner), match.group("indent")))
            index = closing + 1
            continue
        if _COLON_CLOSE.match(line):  # a container's closing line left over
            index += 1
            continue
        match = _MKDOCSTRINGS.match(line)
        if match:
            indent = _indent_width(match.group("indent"))
            _options, index = _block(lines, index + 1, indent)
            out.append(" " * indent + f"> **API reference:** `{match.group('name')}`")
            continue
        match = _ALERT.match(line)
        if match:
            label = match.group("kind").capitalize()
            prefix = match.group("prefix").rstrip() + " "
            rest = match.group("rest").strip()
            following = lines[index + 1] if index + 1 < len(lines) else ""
            cont = re.match(r"^[ \t]*>[ \t]?(.*)$", following)
            if not rest and cont and cont.group(1).strip() and not cont.group(1).startswith(("```", "- ", "#", "|", ">")):
                rest = cont.group(1).strip()
                index += 1
            out.append(f"{prefix}**{label}:** {rest}".rstrip() if rest else f"{prefix}**{label}**")
            index += 1
            continue
        if _ABBREVIATION.match(line):  # "*[HTML]: Hyper Text ...": shown as a tooltip, not as text
            index += 1
            continue
        match = _SNIPPET.match(line)
        if match:
            out.extend(_snippet(match.group("path"), context, notes, depth))
            index += 1
            continue
        line = _ATTR_LIST.sub("", line) if "{" in line else line
        line = _ICON.sub("", line) if ":" in line else line
        following = lines[index + 1] if index + 1 < len(lines) else ""
        previous = out[-1] if out else ""
        if line.strip() and not line.startswith((" ", "\t", ">", "|", "- ", "* ", "+ ", "#", "<")) \
                and not previous.strip() and (_SETEXT_H1.match(following) or _SETEXT_H2.match(following)):
            level = "#" if _SETEXT_H1.match(following) else "##"
            out.append(f"{level} {line.strip()}")
            index += 2
            continue
        out.append(line)
        index += 1
    return "\n".join(out)


def inline_reference_links(text: str) -> str:
    """Reference-style links as inline links; their definitions removed."""
    links = [link for link in find_links(text) if link.kind in ("reference", "definition")]
    if not links:
        return text
    out: list[str] = []
    position = 0
    for link in links:
        if link.start < position:
            continue
        out.append(text[position:link.start])
        if link.kind == "reference":
            target = link.target.replace(" ", "%20").replace("(", "%28").replace(")", "%29")
            bang = "!" if link.image else ""
            out.append(f"{bang}[{text[link.text_start:link.text_end]}]({target})")
        position = link.end
    out.append(text[position:])
    return "".join(out)


_HIDDEN_OPEN = re.compile(r"<!--|<(style|script)\b", re.I)


def _without_hidden_html(text: str) -> str:
    """``text`` without ``<style>``/``<script>`` elements and HTML comments; one forward scan
    (an unclosed one runs to the end, as a browser reads it). Code is not looked into: an
    ``<!--`` or a ``<script>`` in a code span or a fenced block is what the page shows."""
    out: list[str] = []
    position = 0
    masked = code_blanked(text) if "`" in text or "~~~" in text else text
    lowered = masked.lower()
    while True:
        match = _HIDDEN_OPEN.search(masked, position)
        if match is None:
            break
        out.append(text[position:match.start()])
        closing = "-->" if match.group(0) == "<!--" else f"</{match.group(1).lower()}"
        end = lowered.find(closing, match.end())
        if end < 0:
            position = len(text)
            break
        after = masked.find(">", end + len(closing) - 1)
        position = after + 1 if after >= 0 else len(text)
    out.append(text[position:])
    return "".join(out)


def plain_markdown(text: str, context: ReadContext | None = None, notes: list[str] | None = None) -> str:
    """``text`` with every dialect construct above written as plain Markdown, and HTML nobody
    sees (``<style>``, ``<script>``, comments) removed. ``notes``: what was left out."""
    if "<" in text:
        text = _without_hidden_html(text)
    if any(mark in text for mark in ("!!!", "???", "===", ":::", "[!", "\n=", "\n-", "8<", "*[", "{", ":")):
        text = _convert_blocks(text, 0, context, notes)
    if "<img" in text.lower():
        text = _without_image_blocks(text)
    if "]" in text:
        text = inline_reference_links(text)
    if "][" in text:
        text = _autorefs_as_text(text)
    return re.sub(r"\n{3,}", "\n\n", text)


_TAG = re.compile(r"<[^<>]*+>")
_IMAGE_TAG = re.compile(r"<img\b", re.I)


_WRAPPER_TAG = re.compile(r"</?(?:p|div|a|span|center|picture|source|br)\b[^<>]*+>", re.I)


def _only_wrappers(block: str) -> bool:
    """A block of layout tags only (``<p align="center">`` left empty around images)."""
    return not _WRAPPER_TAG.sub("", block).strip()


def _without_image_blocks(text: str) -> str:
    """``text`` without its HTML blocks of images only (a README's centred logo, badge and
    sponsor rows: ``<p align="center"><a href=...><img ...></a></p>``) and the empty layout
    tags left around them: blocks that start a line with ``<`` and have no text outside tags.
    Code is not looked into."""
    masked = code_blanked(text) if "`" in text or "~~~" in text else text
    out: list[str] = []
    position = 0
    for match in re.finditer(r"(?:^|\n\n)(<[^\n]*+(?:\n(?!\n)[^\n]*+)*+)", masked):
        block = masked[match.start(1):match.end(1)]
        if not _TAG.sub("", block).strip() and (_IMAGE_TAG.search(block) or _only_wrappers(block)):
            out.append(text[position:match.start(1)])
            position = match.end(1)
    out.append(text[position:])
    return "".join(out)


# mkdocstrings' autorefs: "[`ContextVar`][contextvars.ContextVar]", a link to an API object
# with no definition in the page (the plugin resolves it on the site): its text.
_AUTOREF = re.compile(r"\[([^\[\]\n]++)\]\[[A-Za-z_]\w*+(?:\.\w++)++\]")


def _autorefs_as_text(text: str) -> str:
    masked = code_blanked(text) if "`" in text or "~~~" in text else text
    out: list[str] = []
    position = 0
    for match in _AUTOREF.finditer(masked):
        out.append(text[position:match.start()])
        out.append(text[match.start(1):match.end(1)])
        position = match.end()
    out.append(text[position:])
    return "".join(out)
