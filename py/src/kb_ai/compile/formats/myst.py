"""MyST Markdown (Sphinx's Markdown, myst-parser) written as plain Markdown, by the reST path's
output rules (``formats/rst.py``), so no MyST markup reaches an article:

* directives in backtick or colon fences (```` ```{note} ````, ``:::{warning}``): admonitions and
  version notes -> a quoted note with their kind (``> **Note:** ...``); ``code-block``/``code``
  -> a fenced block with the language; ``{eval-rst}`` -> through the reST reader;
  ``include``/``literalinclude`` -> the file, through ``ReadContext.include`` only; ``contents``,
  ``toctree`` and the other directives reST drops -> dropped; API directives (``autoclass``,
  ``function``) -> a quoted ``API reference`` line or the name in code, then their text; any
  other -> its content. Option lines (``:caption: x``, a ``---`` YAML block) are dropped.
* roles: ``{func}`/``{class}`/``{exc}``... -> inline code of their text (``~a.B`` -> ``B``);
  ``{doc}`` and ``{ref}`` -> a link to the source that defines the target (the link stage
  points it at the compiled article), else their text; any other role -> its text.
* ``(label)=`` target lines -> dropped (the label is known to ``{ref}`` across raw/ by
  ``scan_myst_labels``; a label line before the title no longer hides the title from the article
  writer, which repeated it as "# Options" then "## Options").
* mdBook's ``{{#include file}}`` (also ``{{#rustdoc_include}}``) -> the file through
  ``ReadContext.include`` (the same confinement), else dropped with a note.

A line scan, linear in the text; code (fenced or inline) is left as it is. Why not myst-parser
itself: it requires Sphinx (and its dozen dependencies) for what these rules do.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from kb_ai.compile.formats.context import LabelScan, ReadContext
from kb_ai.compile.formats.markdown_dialects import _lead, _quote
from kb_ai.compile.formats.registry import fence_language
from kb_ai.store.markdown_text import code_blanked

_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,}|:{3,})\{(?P<name>[\w:.+-]+)\}[ \t]*(?P<arg>[^\n]*)$")
_PLAIN_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")
_LABEL_LINE = re.compile(r"^[ \t]{0,3}\((?P<label>[^()\s][^()\n]*)\)=[ \t]*$")
# A role's name; its text is the code span right after it (found on the line with its code
# spans blanked, ``code_blanked``: one linear pass, and a role shown inside code is not one).
_ROLE_NAME = re.compile(r"\{([\w:.+-]{1,60})\}(?=`)")
_OPTION = re.compile(r"^[ \t]*:[\w-]+:(?:[ \t].*)?$")
_MDBOOK = re.compile(r"^[ \t]*\{\{#(?:include|rustdoc_include)[ \t]+(?P<path>[^}\s:]+)(?::[^}]*)?\}\}[ \t]*$", re.M)
_ATX = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$")
# Cues that a Markdown file is MyST: a directive fence, a target line, a role.
_MYST_CUE = re.compile(r"^[ \t]{0,3}(?:`{3,}|:{3,})\{[\w:.+-]+\}|^[ \t]{0,3}\([^()\s][^()\n]*\)=[ \t]*$"
                       r"|\{[\w:.+-]+\}`[^`\n]", re.M)

NOTES = {"note": "Note", "warning": "Warning", "tip": "Tip", "important": "Important", "caution": "Caution",
         "danger": "Danger", "attention": "Attention", "hint": "Hint", "error": "Error", "seealso": "See also",
         "todo": "To do", "margin": "Note", "sidebar": "Note", "topic": ""}
VERSIONS = {"versionadded": "New in version", "versionchanged": "Changed in version",
            "deprecated": "Deprecated since version", "versionremoved": "Removed in version"}
CODE = {"code-block", "code", "sourcecode", "code-cell", "doctest", "testcode", "ipython", "jupyter-execute"}
DROP = {"toctree", "contents", "tableofcontents", "currentmodule", "py:currentmodule", "module", "py:module",
        "index", "autosummary", "highlight", "raw", "meta", "rst-class", "only", "sectnum", "image"}
_MAX_DEPTH = 10


def is_myst(text: str) -> bool:
    """Whether a Markdown text is MyST: a directive fence (```` ```{note} ````, ``:::{tip}``), a
    ``(label)=`` target line or a ``{role}`text``` role. The one detection, for every ``.md``."""
    return ("{" in text or ")=" in text) and _MYST_CUE.search(text) is not None


def has_mdbook_includes(text: str) -> bool:
    return "{{#" in text and _MDBOOK.search(text) is not None


def myst_markdown(text: str, context: ReadContext, notes: list[str], depth: int = 0) -> str:
    """``text`` (MyST or with mdBook includes) as plain Markdown by the rules above."""
    lines = text.split("\n")
    out: list[str] = []
    index = 0
    fence: str | None = None
    while index < len(lines):
        line = lines[index]
        if fence is not None:  # inside an ordinary code block: as written
            out.append(line)
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
            index += 1
            continue
        opened = _FENCE_OPEN.match(line)
        if opened:
            body, index = _fenced_body(lines, index + 1, opened.group("fence"))
            indent = opened.group("indent")  # a directive inside a list item: dedented, then indented back
            body = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in body]
            made = _directive(opened.group("name").lower(), opened.group("arg").strip(), body, "", context, notes, depth)
            out.extend(indent + line if line.strip() else "" for line in made)
            continue
        plain = _PLAIN_FENCE.match(line)
        if plain:
            fence = plain.group(1)
            out.append(line)
            index += 1
            continue
        if _LABEL_LINE.match(line):
            index += 1
            continue
        included = _MDBOOK.match(line) if "{{#" in line else None
        if included:
            out.extend(_included(included.group("path"), context, notes, depth))
            index += 1
            continue
        out.append(roles_as_text(line, context) if "}`" in line else line)
        index += 1
    return _one_title("\n".join(out))


def _fenced_body(lines: list[str], start: int, fence: str) -> tuple[list[str], int]:
    """The lines up to the fence closing ``fence`` (the same character, at least as long;
    directive fences nested in it are skipped over) and the index after it."""
    char, depth = fence[0], 0
    index = start
    while index < len(lines):
        stripped = lines[index].strip()
        if stripped.startswith(char * 3) and not stripped.strip(char) and len(stripped) >= len(fence):
            if depth == 0:
                return lines[start:index], index + 1
            depth -= 1
        elif _FENCE_OPEN.match(lines[index]) and _FENCE_OPEN.match(lines[index]).group("fence")[0] == char:
            depth += 1
        index += 1
    return lines[start:], len(lines)


def _options(body: list[str]) -> tuple[dict[str, str], list[str]]:
    """A directive's options (``:key: value`` lines, or a ``---`` YAML block, at its start) and
    the rest of its body."""
    options: dict[str, str] = {}
    index = 0
    if body and body[0].strip() == "---":
        end = next((i for i in range(1, len(body)) if body[i].strip() == "---"), None)
        if end is not None:
            for line in body[1:end]:
                key, _, value = line.partition(":")
                options[key.strip()] = value.strip()
            index = end + 1
    while index < len(body) and _OPTION.match(body[index]):
        key, _, value = body[index].strip()[1:].partition(":")
        options[key.strip()] = value.strip()
        index += 1
    return options, body[index:]


def _directive(name: str, arg: str, body: list[str], indent: str, context: ReadContext, notes: list[str],
               depth: int) -> list[str]:
    options, content = _options(body)
    text = "\n".join(content).strip("\n")
    local = name.split(":")[-1]
    if local in CODE:
        language = arg.split()[0] if arg else options.get("language", "")
        return _fenced(text, language, indent)
    if name in DROP:
        return []
    if name == "eval-rst":
        from kb_ai.compile.formats.rst import read_rst  # noqa: PLC0415 (docutils: only for an eval-rst block)

        parsed = read_rst(text, context)
        notes.extend(n for n in (parsed[3] if parsed else []) if n not in notes)
        return (parsed[0].strip("\n") if parsed else text).split("\n")
    if name in ("include", "literalinclude"):
        return _included(arg, context, notes, depth, code=name == "literalinclude", options=options)
    inner = myst_markdown(text, context, notes, depth + 1) if depth < _MAX_DEPTH else text
    if name in NOTES or name == "admonition" or name in VERSIONS:
        return _note(name, arg, inner, indent, context)
    if local.startswith("auto"):
        return [f"{indent}> **API reference:** `{arg}`"] + ([""] + inner.split("\n") if inner else [])
    if name.startswith("py:") or local in ("function", "class", "method", "attribute", "exception", "data"):
        return [f"{indent}`{arg}`"] + ([""] + inner.split("\n") if inner else [])
    if name in ("figure",):
        return inner.split("\n") if inner else []
    return inner.split("\n") if inner else ([arg] if arg else [])


def _note(name: str, arg: str, inner: str, indent: str, context: ReadContext) -> list[str]:
    """An admonition or version note as a quoted note led by its kind (or its title)."""
    if name in VERSIONS:
        version, _, rest = arg.partition(" ")
        label = f"{VERSIONS[name]} {version}".strip()
        inner = "\n\n".join(p for p in (rest.strip(), inner) if p)
    else:
        titled = name in ("admonition", "topic") or (arg and name in ("margin", "sidebar"))
        label = arg if titled else NOTES[name]
        if arg and not titled and name not in ("topic", "margin", "sidebar"):
            inner = "\n\n".join(p for p in (arg, inner) if p)  # "```{note} Text": the text
    return _quote(_lead(roles_as_text(label, context), inner), indent)


def _fenced(text: str, language: str, indent: str) -> list[str]:
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{indent}{fence}{language}", *text.split("\n"), f"{indent}{fence}"]


def _included(target: str, context: ReadContext, notes: list[str], depth: int, *, code: bool = False,
              options: dict[str, str] | None = None) -> list[str]:
    """A file included by a directive or an mdBook ``{{#include}}``: through
    ``ReadContext.include`` only (its confinement and limits), else dropped with a note."""
    text, why = context.include(target) if depth < 5 else (None, f"{target} nested too deep")
    if text is None:
        note = f"include of {why}: dropped"
        if note not in notes:
            notes.append(note)
        return []
    if code or not target.lower().endswith((".md", ".markdown")):
        language = (options or {}).get("language") or fence_language(PurePosixPath(target).name)
        return _fenced(text.rstrip("\n"), language, "")
    return myst_markdown(text.strip("\n"), context, notes, depth + 1).split("\n")


def roles_as_text(line: str, context: ReadContext | None) -> str:
    """``line`` with its MyST roles as the reST path writes them; code spans left alone."""
    masked = code_blanked(line)
    out: list[str] = []
    position = 0
    for match in _ROLE_NAME.finditer(line):
        start, tick = match.start(), match.end()
        if masked[start:tick] != line[start:tick] or masked[tick] != " ":  # inside code / no span after it
            continue
        ticks = re.match(r"`+", line[tick:]).group(0)
        end = line.find(ticks, tick + len(ticks))
        if end < 0 or start < position:
            continue
        out.append(line[position:start])
        out.append(_role(match.group(1), line[tick + len(ticks):end].strip(), context))
        position = end + len(ticks)
    out.append(line[position:])
    return "".join(out)


def _role(name: str, text: str, context: ReadContext | None) -> str:
    from kb_ai.compile.formats.rst import CODE_ROLES, _role_parts, _short_name  # noqa: PLC0415

    title, target = _role_parts(text)
    local = name.split(":")[-1]
    if name in ("doc", "ref", "std:doc", "std:ref"):
        return _link_role(local, title, target, context)
    if local in CODE_ROLES or name.startswith(("py:", "c:", "cpp:", "js:", "rst:")):
        return title if title else f"`{_short_name(target)}`"
    if local == "math":
        return f"`{text}`"
    if local == "abbr":
        return re.sub(r"\s*\(.*\)\s*$", "", text) or text
    return title or target


def _link_role(local: str, title: str | None, target: str, context: ReadContext | None) -> str:
    """``{doc}``/``{ref}``: a link to the source defining the target (a restricted one is never
    named), shown as the role's title or the target's, else the text alone."""
    from kb_ai.compile.formats.rst import _find_doc, _readable  # noqa: PLC0415

    if context is None:
        return title or _readable(target)
    if local == "doc":
        path = _find_doc(context, target)
        if path is not None and not context.shows(path):
            path = None
        found = context.label(f"doc:{path}") if path is not None else None
        shown = title or (found[1] if found else "") or _readable(target)
        return f"[{shown}]({context.relative(path)})" if path is not None else shown
    found = context.label(target)
    shown = title or (found[1] if found else "") or _readable(target)
    return f"[{shown}]({context.relative(found[0])}#{target.lower()})" if found else shown


def _one_title(text: str) -> str:
    """The title once: a first heading repeated as the next heading right after it (``# Options``
    then ``## Options``) is kept once."""
    lines = text.lstrip("\n").split("\n")
    headings = [(i, _ATX.match(line)) for i, line in enumerate(lines[:40]) if line.strip()]
    if len(headings) >= 2 and headings[0][1] and headings[1][1] \
            and headings[0][1].group(1).strip().casefold() == headings[1][1].group(1).strip().casefold():
        del lines[headings[1][0]]
    return "\n".join(lines)


def scan_myst_labels(path: str, text: str) -> dict[str, tuple[str, str]]:
    """The labels a MyST file defines (``(label)=``), each with the title of the heading it
    marks, and ``doc:<path>`` with the document's first heading: a line scan."""
    scan = LabelScan(path)
    fence: str | None = None
    for line in text.splitlines():
        plain = _PLAIN_FENCE.match(line) or (re.match(r"^[ \t]{0,3}(:{3,})", line))
        if fence is not None:
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
            continue
        if plain and not _LABEL_LINE.match(line):
            fence = plain.group(1)
            continue
        label = _LABEL_LINE.match(line)
        if label:
            scan.label(label.group("label"))
            continue
        heading = _ATX.match(line)
        if heading:
            scan.title(heading.group(1))
        elif line.strip():
            scan.text()
    return scan.found()
