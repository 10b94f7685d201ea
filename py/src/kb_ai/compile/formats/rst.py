"""reStructuredText (Sphinx documentation included) to Markdown, parsed by docutils.

docutils knows reST itself; Sphinx adds roles and directives it does not. They are given
meanings here so that none of them crashes the parse or leaks into the text:

* code (``code-block``, ``sourcecode``, ``literalinclude``, ``doctest`` ...) -> a fenced block;
* admonitions (``note``, ``warning``, ``seealso``, ``versionadded``, ``deprecated`` ...) -> a
  quoted note (``> **Note:** ...``);
* API descriptions (``function``, ``class``, ``py:data``, ``autofunction`` ...) -> the name in
  code, then the description;
* ``:doc:`` -> a Markdown link to the target's source file (``installation.rst``), ``:ref:`` ->
  a link to ``file.rst#label`` when a source of raw/ defines the label, else its text (the
  compile repoints links between sources to their articles); code roles (``:class:``,
  ``:func:``, ``:file:`` ...) -> code spans; any other role -> its text;
* ``include`` / ``literalinclude`` -> the file, when it is in raw/ and small, else dropped with
  a note; ``toctree``, ``currentmodule``, ``index``, ``rst-class``, labels, ``:orphan:`` and
  other page metadata -> nothing;
* any other directive -> its argument as a name and its content as text.

``read_rst`` returns (markdown, title, date, notes). The title is the document's own: the
first section title.
"""

from __future__ import annotations

import io
import re
import threading

from docutils import nodes
from docutils.parsers.rst import Directive, Parser, directives, roles, states

from kb_ai.compile.formats.context import MAX_INCLUDES, LabelScan, ReadContext

_LOCK = threading.Lock()  # docutils' directive registry is global: one parse at a time
_ERROR_LINE = re.compile(r"\((?:ERROR/3|SEVERE/4)\) ")  # a line of docutils' warning stream reporting an error

CODE_DIRECTIVES = {"code-block", "sourcecode", "code", "doctest", "testcode", "testoutput", "testsetup",
                   "testcleanup", "ipython", "jupyter-execute", "prompt", "mermaid", "graphviz", "digraph",
                   "graph", "uml", "plantuml", "productionlist", "highlight-block"}
NOTE_DIRECTIVES = {
    "seealso": "See also", "todo": "To do", "versionadded": "New in version", "versionchanged":
    "Changed in version", "deprecated": "Deprecated since version", "versionremoved": "Removed in version",
}
AUTHOR_DIRECTIVES = {"moduleauthor": "Module author", "sectionauthor": "Section author", "codeauthor": "Code author"}
DROP_DIRECTIVES = {"toctree", "currentmodule", "module", "py:module", "py:currentmodule", "index", "rst-class",
                   "highlight", "tabularcolumns", "sectnum", "section-numbering", "default-role",
                   "default-domain", "contents", "raw", "meta", "autosummary", "automodapi", "only-html",
                   "include-toc", "toc", "literalinclude-skip", "currentmodule-skip", "title", "sidebar-skip",
                   "program", "c:namespace", "cpp:namespace", "js:module"}
CODE_ROLES = {"class", "func", "meth", "attr", "exc", "data", "mod", "obj", "const", "file", "command", "program",
              "envvar", "option", "samp", "kbd", "code", "mimetype", "makevar", "regexp", "token", "keyword",
              "confval", "setting", "type", "member", "var", "macro", "function", "struct", "enum", "enumerator",
              "expr", "texpr", "any", "ts:type", "directive", "role"}
_TARGET_FORM = re.compile(r"^(.*?)\s*<([^<>]*)>$", re.S)


# ---------------------------------------------------------------------------------------------
# roles (an Inliner that knows every role, so none is "unknown")


def _role_parts(text: str) -> tuple[str | None, str]:
    """(explicit title or None, target) of a Sphinx cross-reference text."""
    text = nodes.unescape(text)
    match = _TARGET_FORM.match(text)
    if match and match.group(2):
        return match.group(1).strip() or None, match.group(2).strip()
    return None, text.strip()


def _short_name(target: str) -> str:
    """Sphinx's display of an object reference: ``~a.b.C`` -> ``C``, ``!x`` -> ``x``, ``a.b()``."""
    target = target.lstrip("!")
    if target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    return target.lstrip(".")  # ".Request": Sphinx's relative lookup


class _Inliner(states.Inliner):
    """docutils' Inliner, with every role known: Sphinx's cross-references as links or code,
    anything else as its text."""

    context: ReadContext | None = None

    def init_customizations(self, settings) -> None:
        # docutils builds its patterns from ``vars(self.__class__)``: give it the base class's.
        for name, value in vars(states.Inliner).items():
            if not name.startswith("__") and name not in vars(_Inliner):
                setattr(_Inliner, name, value)
        super().init_customizations(settings)

    def interpreted(self, rawsource, text, role, lineno):
        role_fn, messages = roles.role(role, self.language, lineno, self.reporter)
        name = role.lower()
        local = name.split(":")[-1] if ":" in name else name
        if name in ("doc", "std:doc"):
            return [self._doc(text)], []
        if name in ("ref", "std:ref", "numref", "std:numref"):
            return [self._ref(text)], []
        if role_fn and name not in CODE_ROLES and name not in ("", "title-reference", "t"):
            return states.Inliner.interpreted(self, rawsource, text, role, lineno)
        title, target = _role_parts(text)
        shown = title or _short_name(target)
        if local in CODE_ROLES or name.startswith(("py:", "c:", "cpp:", "js:", "rst:")):
            if title:
                return [nodes.Text(title)], []
            return [nodes.literal(shown, shown)], []
        if name in ("abbr",):
            shown = re.sub(r"\s*\(.*\)\s*$", "", target, flags=re.S) or target
        elif name in ("menuselection", "guilabel"):
            shown = target.replace("-->", "→").replace("&", "")
        return [nodes.Text(shown)], []

    def _doc(self, text: str) -> nodes.Node:
        title, target = _role_parts(text)
        context = self.context
        path = _find_doc(context, target) if context is not None else None
        if path is not None and not context.shows(path):
            path = None  # a restricted document: neither its title nor a link to it
        found = context.label(f"doc:{path}") if path is not None else None
        shown = title or (found[1] if found else "") or _readable(target)
        if path is None:
            return nodes.Text(shown)
        return nodes.reference(shown, shown, refuri=context.relative(path))

    def _ref(self, text: str) -> nodes.Node:
        title, label = _role_parts(text)
        context = self.context
        found = context.label(label) if context is not None else None
        shown = title or (found[1] if found else "") or _readable(label)
        if found is None:
            return nodes.Text(shown)
        return nodes.reference(shown, shown, refuri=f"{context.relative(found[0])}#{label.lower()}")


def _readable(name: str) -> str:
    """A reference target shown as text when nothing better is known: ``tutorial/index`` ->
    "tutorial/index" stays a path; ``async_await`` -> "async await"."""
    name = name.strip().strip("/")
    return name if "/" in name else re.sub(r"[-_]+", " ", name)


def _find_doc(context: ReadContext, target: str) -> str | None:
    """The source a ``:doc:`` target names: relative to this page, or (``/x``) to the docs'
    root, which is looked for from this page's folder up to raw/."""
    target = target.strip()
    if not target:
        return None
    candidates: list[str] = []
    if target.startswith("/"):
        folder = context.path.rsplit("/", 1)[0]
        while True:
            candidates.append(f"{folder}/{target.lstrip('/')}")
            if folder == "raw" or "/" not in folder:
                break
            folder = folder.rsplit("/", 1)[0]
    else:
        resolved = context.resolve(target)
        if resolved:
            candidates.append(resolved)
    for candidate in candidates:
        for suffix in ("", ".rst", ".md", ".txt"):
            if candidate + suffix in context.sources and (suffix or candidate.endswith((".rst", ".md", ".txt"))):
                return candidate + suffix
    return None


# ---------------------------------------------------------------------------------------------
# directives


class _AnyOptions(dict):
    """An option spec that takes every option (Sphinx's ``:caption:``, ``:linenos:`` ...) as text."""

    def __missing__(self, key):
        return directives.unchanged


_ANY = _AnyOptions(_=directives.unchanged)


class _Note(Directive):
    """An admonition Sphinx adds (``seealso``, ``versionadded`` ...): a quoted note."""

    optional_arguments = 1
    final_argument_whitespace = True
    has_content = True
    option_spec = _ANY

    def run(self):
        label = NOTE_DIRECTIVES.get(self.name, self.name.capitalize())
        argument = " ".join(self.arguments).strip()
        text = ""
        if self.name in ("seealso", "todo"):
            text = argument
        elif argument:
            # "versionadded:: 2.0 Added the x option." : the version, then text about it
            version, *rest = argument.split(None, 1)
            text = rest[0] if rest else ""
            label = f"{label} {version}"
        node = nodes.admonition()
        node += nodes.title(text=label)
        if text.strip():
            inline, messages = self.state.inline_text(" ".join(text.split()), self.lineno)
            node += nodes.paragraph("", "", *inline)
        self.state.nested_parse(self.content, self.content_offset, node)
        return [node]


class _Drop(Directive):
    """Page structure or metadata for Sphinx (a table of contents, the current module, an
    index entry): nothing for a reader."""

    optional_arguments = 99
    final_argument_whitespace = True
    has_content = True
    option_spec = _ANY

    def run(self):
        if self.name.split(":")[-1] in ("currentmodule", "module") and self.arguments:
            module = self.arguments[0].split()[0]
            self.state.document["kaas_module"] = "" if module == "None" else module
        return []


class _Author(Directive):
    """``moduleauthor`` / ``sectionauthor`` / ``codeauthor``: who wrote it, a fact readers ask
    for: "**Module author:** Craig McQueen" (Sphinx shows it when ``show_authors`` is on)."""

    required_arguments = 1
    final_argument_whitespace = True
    has_content = False
    option_spec = _ANY

    def run(self):
        name = " ".join(self.arguments[0].split())
        if not name:
            return []
        para = nodes.paragraph()
        para += nodes.strong(text=f"{AUTHOR_DIRECTIVES[self.name.split(':')[-1]]}:")
        para += nodes.Text(" ")
        inline, _messages = self.state.inline_text(name, self.lineno)
        para += inline
        return [para]


class _Code(Directive):
    """A code block (``code-block:: python``, ``doctest``, ``mermaid`` ...)."""

    optional_arguments = 1
    final_argument_whitespace = True
    has_content = True
    option_spec = _ANY

    def run(self):
        language = self.arguments[0].split()[0] if self.arguments else ""
        if self.name in ("doctest", "testcode", "testsetup", "testcleanup", "ipython", "jupyter-execute"):
            language = "python"
        elif self.name in ("mermaid", "graphviz", "digraph", "graph", "uml", "plantuml"):
            language = {"digraph": "dot", "graph": "dot", "graphviz": "dot", "uml": "plantuml"}.get(self.name, self.name)
        text = "\n".join(self.content)
        node = nodes.literal_block(text, text)
        node["language"] = language
        return [node]


def _options(names: tuple[str, ...]) -> dict:
    return {name: directives.unchanged for name in names}


class _Include(Directive):
    """``include`` / ``literalinclude``: the file when it is in raw/ and small, else a note."""

    required_arguments = 1
    final_argument_whitespace = True
    has_content = False
    option_spec = _ANY

    def run(self):
        context: ReadContext | None = self.state.inliner.context
        target = self.arguments[0].strip()
        if target.startswith("<") and target.endswith(">"):
            text, why = None, f"{target} is a standard docutils include"
        elif context is None:
            text, why = None, f"{target} not read (no access to raw/ here)"
        else:
            text, why = context.include(target)  # each file once, MAX_INCLUDES per document
        if text is None:
            notes = _notes(self)
            if len(notes) < MAX_INCLUDES:
                notes.append(f"{self.name} of {why}: dropped")
            elif len(notes) == MAX_INCLUDES:
                notes.append("more includes dropped (notes stop here)")
            return []
        literal = self.name == "literalinclude" or "literal" in self.options or "code" in self.options
        if literal:
            language = self.options.get("language") or self.options.get("code") or ""
            node = nodes.literal_block(text, text)
            node["language"] = language.strip()
            return [node]
        self.state_machine.insert_input(text.splitlines(), f"{context.path}:{target}")
        return []


class _Description(Directive):
    """An API description or any directive nobody told us about: its argument (a signature,
    a name) in code, then its content as text."""

    optional_arguments = 99
    final_argument_whitespace = True
    has_content = True
    option_spec = _ANY

    def run(self):
        container = nodes.container()
        signature = " ".join(" ".join(self.arguments).split())
        local = self.name.split(":")[-1]
        if local.startswith("auto") and signature:
            module = self.state.document.get("kaas_module", "")
            if module and local != "automodule" and not signature.startswith(module + "."):
                signature = f"{module}.{signature}"
            para = nodes.paragraph()
            para += nodes.strong(text="API reference:")
            para += nodes.Text(" ")
            para += nodes.literal(signature, signature)
            quote = nodes.admonition()
            quote += para
            container += quote
            if self.content:  # the text the author wrote under it ("This class discards ..."): kept
                self.state.nested_parse(self.content, self.content_offset, container)
            return [container]
        if signature:
            para = nodes.paragraph()
            para += nodes.literal(signature, signature)
            container += para
        if self.content:
            self.state.nested_parse(self.content, self.content_offset, container)
        return [container] if len(container) else []


class _Tab(Directive):
    """A tab (``tab``, ``group-tab``, ``code-tab``, ``tab-item``): its label in bold, then its content."""

    optional_arguments = 99
    final_argument_whitespace = True
    has_content = True
    option_spec = _ANY

    def run(self):
        container = nodes.container()
        label = " ".join(self.arguments)
        if self.name == "code-tab":
            language = label.split()[0] if label else ""
            text = "\n".join(self.content)
            node = nodes.literal_block(text, text)
            node["language"] = language
            para = nodes.paragraph()
            para += nodes.strong(text=label)
            return [para, node]
        if label:
            para = nodes.paragraph()
            para += nodes.strong(text=label)
            container += para
        self.state.nested_parse(self.content, self.content_offset, container)
        return [container]


class _Body(Directive):
    """Directives whose content is plain reST (``tabs``, ``only``, ``container``, ``hlist``,
    ``glossary``, ``centered`` ...)."""

    optional_arguments = 99
    final_argument_whitespace = True
    has_content = True
    option_spec = _ANY

    def run(self):
        container = nodes.container()
        if self.name in ("centered", "rubric") and self.arguments:
            para = nodes.paragraph()
            para += nodes.strong(text=" ".join(self.arguments))
            container += para
        self.state.nested_parse(self.content, self.content_offset, container)
        return [container]


def _notes(directive: Directive) -> list[str]:
    return directive.state.document.setdefault("kaas_notes", [])


_KNOWN: dict[str, type[Directive]] = {}
for _name in CODE_DIRECTIVES:
    _KNOWN[_name] = _Code
for _name in NOTE_DIRECTIVES:
    _KNOWN[_name] = _Note
for _name in DROP_DIRECTIVES:
    _KNOWN[_name] = _Drop
for _name in AUTHOR_DIRECTIVES:
    _KNOWN[_name] = _Author
for _name in ("include", "literalinclude"):
    _KNOWN[_name] = _Include
for _name in ("tab", "group-tab", "code-tab", "tab-item"):
    _KNOWN[_name] = _Tab
for _name in ("tabs", "tab-set", "only", "hlist", "glossary", "centered", "ifconfig", "container-skip", "card",
              "grid", "grid-item", "grid-item-card", "dropdown", "details"):
    _KNOWN[_name] = _Body
# Sphinx's own meaning of "class" and "function" (Python API descriptions), not docutils' class.
for _name in ("class", "function", "method", "attribute", "data", "exception", "decorator", "decoratormethod",
              "classmethod", "staticmethod", "property", "describe", "object", "envvar", "option", "cmdoption",
              "confval", "glossary-term"):
    _KNOWN[_name] = _Description

_DIRECTIVE_NAME = re.compile(r"^[ \t]*\.\.[ \t]+([\w:.+-]+)[ \t]*::", re.M)


def _register(text: str) -> list[str]:
    """Register the directives this text uses that docutils does not know; returns the names
    registered (unregistered after the parse)."""
    added: list[str] = []
    for name in sorted({m.group(1) for m in _DIRECTIVE_NAME.finditer(text)}):
        lowered = name.lower()
        known = _KNOWN.get(lowered) or _KNOWN.get(lowered.split(":")[-1])
        if known is None:
            if lowered in directives._directive_registry or lowered in directives._directives:
                continue
            known = _Description
        if directives._directives.get(lowered) is not known:
            added.append(lowered)
            directives._directives[lowered] = known
    return added


# ---------------------------------------------------------------------------------------------
# parsing


def parse_rst(text: str, context: ReadContext | None) -> nodes.document:
    """The document tree of ``text``, with docutils' standard transforms applied (substitutions,
    footnote numbers, named hyperlinks resolved). No configuration file is read, nothing is
    reported on stderr, no file is read but through ``context`` (``_Include``), raw passages off."""
    from docutils.core import publish_doctree  # noqa: PLC0415

    inliner = _Inliner()
    inliner.context = context
    parser = Parser(inliner=inliner)
    stream = io.StringIO()
    overrides = {
        "report_level": 3, "halt_level": 5, "warning_stream": stream, "_disable_config": True,
        "file_insertion_enabled": False, "raw_enabled": False, "syntax_highlight": "none",
        "character_level_inline_markup": False, "line_length_limit": 100_000, "input_encoding": "unicode",
        "doctitle_xform": False, "docinfo_xform": False, "sectsubtitle_xform": False, "embed_stylesheet": False,
        "traceback": True, "auto_id_prefix": "id",
    }
    with _LOCK:
        added = _register(text)
        saved_class = directives._directives.get("class")
        try:
            document = publish_doctree(text, source_path=context.path if context else "<rst>", parser=parser,
                                       settings_overrides=overrides)
        finally:
            for name in added:
                directives._directives.pop(name, None)
            if saved_class is not None:
                directives._directives["class"] = saved_class
    # docutils' errors (level 3 and 4; the tree keeps them as system messages, which the writer
    # leaves out), one line each: what ``looks_like_rst`` weighs
    document["kaas_errors"] = [line for line in stream.getvalue().splitlines() if _ERROR_LINE.search(line)]
    return document


def read_rst(text: str, context: ReadContext | None = None, *,
             only_if_clean: bool = False) -> tuple[str, str | None, str | None, list[str]] | None:
    """(markdown, title, date, notes) of a reST document. ``only_if_clean``: None when docutils
    reports an error other than an undefined substitution (Sphinx defines ``|release|``,
    ``|today|`` ... in its configuration): text that is not reST."""
    from kb_ai.compile.formats.rst_markdown import MarkdownWriter  # noqa: PLC0415

    document = parse_rst(text, context)
    if only_if_clean and any(not _SPHINX_ONLY_ERROR.search(line) for line in document["kaas_errors"]):
        return None
    writer = MarkdownWriter()
    body = writer.render(document)
    notes = list(document.get("kaas_notes", []))
    return body, writer.title, writer.date, notes


# Constructs of reST that plain text does not have: an explicit markup block (a directive, a
# hyperlink target, a substitution definition), an interpreted role (":func:`x`"), a named
# reference ("`Homepage`_", "`text <url>`_"). Possessive runs: one attempt per position.
_RST_CUE = re.compile(r"^\.\.[ \t]++(?:[\w.+-]++(?::[\w.+-]++)*+[ \t]*+::|_[^:\n]++:|\|[^|\n]++\|[ \t]++[\w:.+-]++::)"
                      r"|(?<![\w`]):[\w.+-]++(?::[\w.+-]++)*+:`[^`\n]++`"
                      r"|(?<![\w`])`[^`\n]++`__?+(?![\w`])", re.M)
# A field list opening the document (":Version: 1.0", ":Author: A. Name"): two field lines in a row.
_TOP_FIELDS = re.compile(r"^:[A-Za-z][\w .-]{0,40}+:[ \t][^\n]*+\n:[A-Za-z][\w .-]{0,40}+:[ \t]", re.M)
_SPHINX_ONLY_ERROR = re.compile(r"\(ERROR/3\) Undefined substitution referenced")


def has_rst_cues(text: str) -> bool:
    """Whether ``text`` (a ``.txt`` file) uses reST's own constructs: a directive, target or
    substitution definition, a role, a named reference, or a field list in its first lines.
    Titles, lists and ``literal`` blocks are not cues: plain text (release notes) has them too."""
    return _RST_CUE.search(text) is not None or _TOP_FIELDS.search(text[:3000]) is not None


# ---------------------------------------------------------------------------------------------
# labels and titles of a corpus (for :ref: and :doc: across files), read without parsing

_LABEL = re.compile(r"^\.\.[ \t]+_([^:`\n][^:\n]*+):[ \t]*$")
_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+_:.<>])\1{2,}[ \t]*$")


def scan_labels(path: str, text: str) -> dict[str, tuple[str, str]]:
    """The labels a reST file defines (``.. _label:``), each with the title of the section it
    marks, and ``doc:<path>`` with the document's title: a line scan, no parse (so every file of
    a corpus can be read for it cheaply)."""
    lines = text.splitlines()
    scan = LabelScan(path)
    skip_block = False
    for index, line in enumerate(lines):
        label = _LABEL.match(line)
        if label:
            scan.label(label.group(1))
            skip_block = False
            continue
        if skip_block:
            if line.strip() and not line[:1].isspace():
                skip_block = False
            else:
                continue
        if line.startswith(".. ") or line.strip() == "..":
            skip_block = True
            continue
        if not line.strip() or line[:1].isspace() or _UNDERLINE.match(line) or index + 1 >= len(lines):
            continue
        under = lines[index + 1]
        if _UNDERLINE.match(under) and len(under.rstrip()) >= len(line.rstrip()):
            scan.title(line)
        else:
            scan.text()
    return scan.found()


_BLOCK_BREAK = re.compile(r"\n[ \t]*+\n")
_INLINE_MARKS = re.compile(r"[*`|_\[<:]")


def inline_cost(text: str) -> int:
    """An estimate of docutils' inline-parsing work: for each blank-line separated block, its
    length times its inline markup characters (the parser rescans a block from each unclosed
    start-string). Real pages stay far below ``readers.MAX_RST_INLINE_COST``."""
    return sum(len(block) * len(_INLINE_MARKS.findall(block)) for block in _BLOCK_BREAK.split(text))
