"""Prompt files: one Jinja2 file per prompt in ``prompts/``, with a ``system`` and a ``user`` block.

Lookup order: ``KAAS_PROMPTS_DIR`` (settings.prompts_dir), the copy shipped inside the installed
package (``kb_ai/prompts``), then the source checkout's ``prompts/``. A prompt's version is the
hash of its file, so state that depends on a prompt can notice when it changes.

**Every value is escaped, by the template engine, never by hand.** Prompts wrap data in elements
(``<page path="..." title="...">text</page>``, ``<source>``, ``<catalog>``...). Whatever a value
holds — a page or source text, a title a non-admin editor set, a file's heading, a question, a
conversation, a model's earlier reply — must stay data: it must not close its element, open a new
one, or end the attribute it sits in. So the Jinja environment sends the output of every
``{{ ... }}`` through ``escape_data``, in the context the template puts it in, found from the
template's own text when it is compiled (``_ContextEscape``):

* **attribute** — inside a double-quoted attribute of a tag: markup openers as below, and ``"``,
  ``>`` become ``&quot;``, ``&gt;``; newlines and other control characters become spaces.
* **inline** — inside a line of template text (``Question: {{ question }}``, a list item): as
  content, and newlines become spaces, so a value cannot start a line of its own.
* **block** — alone on its line (``{{ page.text }}`` between ``<page>`` and ``</page>``): content;
  its lines are kept.

Content escaping is deliberately narrow, so page text stays readable: only a ``<`` that could
start markup becomes ``&lt;`` — followed by a letter (``<page``, ``<script``, ``<s>``), by ``/``
(with or without spaces: ``</page``, ``< /page``), by ``!`` (comments, CDATA), ``?``
(processing instructions) or ``|`` (chat-template tokens such as ``<|im_start|>``), or at the
very end of the value (the template's next character could complete it). That is everything
that can open or close an element of any name; ``a < b``, ``x<5``, ``<=`` and ``<-`` in code
stay as written. A variable inside a tag but outside quotes, or right after a ``<``, has no safe
escaping and is refused when the template is loaded. A value that is already trusted markup can be passed as
``PromptSafe`` (no template needs one today).
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from pathlib import Path
from typing import Iterator

import jinja2
import jinja2.ext
from jinja2.lexer import Token, TokenStream

from kb_ai.errors import ConfigError
from kb_ai.resources import shipped_dir

ATTRIBUTE, INLINE, BLOCK = "attribute", "inline", "block"

# A "<" that could open or close markup of any name (see the module docstring), or that ends
# the value, where the template's next character (or the next value) could complete it.
_MARKUP_OPEN = re.compile(r"<(?=[A-Za-z!?|]|\s*/|\s*$)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]")
# A run of whitespace holding a line break. It may only start where a whitespace run starts
# (the look-behind), so a long run of spaces without a break is read once, not once per space.
_LINE_BREAKS = re.compile(r"(?<![^\S\r\n\u0085\u2028\u2029])[^\S\r\n\u0085\u2028\u2029]*+[\r\n\u0085\u2028\u2029]\s*+")


class PromptSafe(str):
    """A value a template may output as it is: trusted text built by kaas, never data."""


def escape_data(value: object, context: str = BLOCK) -> str:
    """The one escaping function for values in prompts (``context``: attribute, inline, block)."""
    if isinstance(value, PromptSafe):
        return str(value)
    text = _MARKUP_OPEN.sub("&lt;", str(value))
    if context == BLOCK:
        return text
    text = _LINE_BREAKS.sub(" ", text)
    if context == ATTRIBUTE:
        text = _CONTROL.sub(" ", text).replace('"', "&quot;").replace(">", "&gt;")
    return text


class _Escaped(str):
    """Output of the context filter: ``finalize`` leaves it alone."""


def _escape_filter(value: object, context: str) -> _Escaped:
    return _Escaped(escape_data(value, context))


def _finalize(value: object) -> object:
    """Applied by Jinja to every ``{{ }}`` output: nothing leaves a template unescaped, even a
    variable the context pass did not wrap."""
    if isinstance(value, _Escaped):
        return value
    return escape_data(value, BLOCK)


_FILTER = "kaas_escape"


class _ContextEscape(jinja2.ext.Extension):
    """Rewrites every ``{{ expr }}`` of a template into ``{{ (expr) | kaas_escape("<context>") }}``,
    the context read from the template's own text: inside a quoted attribute of a tag, inline in a
    line of text, or alone on its line."""

    def filter_stream(self, stream: TokenStream) -> Iterator[Token]:
        tokens = list(stream)
        name = stream.name or "template"
        busy_lines = _lines_with_other_content(tokens)
        state = "text"  # "text" | "tag" (after "<name") | "attr" (inside a quoted attribute value)
        context = BLOCK
        previous = ""
        for token in tokens:
            if token.type == "data":
                state = _scan_markup(token.value, state)
                previous = token.value
                yield token
            elif token.type == "variable_begin":
                if state == "tag":
                    raise jinja2.TemplateSyntaxError(
                        "a {{ }} inside a tag must be a double-quoted attribute value", token.lineno, name)
                if state == "text" and _OPEN_END.search(previous):
                    raise jinja2.TemplateSyntaxError(
                        "a {{ }} right after '<' could complete a tag with its value", token.lineno, name)
                context = ATTRIBUTE if state == "attr" else (INLINE if busy_lines[token.lineno] > 1 else BLOCK)
                yield token
                yield Token(token.lineno, "lparen", "(")
            elif token.type == "variable_end":
                line = token.lineno
                yield Token(line, "rparen", ")")
                yield Token(line, "pipe", "|")
                yield Token(line, "name", _FILTER)
                yield Token(line, "lparen", "(")
                yield Token(line, "string", context)
                yield Token(line, "rparen", ")")
                yield token
            else:
                previous = ""
                yield token


def _lines_with_other_content(tokens: list[Token]) -> dict[int, int]:
    """Per template line: how many things stand on it (variables, tags, non-blank text)."""
    count: dict[int, int] = defaultdict(int)
    for token in tokens:
        if token.type in ("variable_begin", "block_begin"):
            count[token.lineno] += 1
        elif token.type == "data":
            for offset, segment in enumerate(token.value.split("\n")):
                if segment.strip():
                    count[token.lineno + offset] += 1
    return count


_TAG_START = re.compile(r"<(?=[A-Za-z/])")
_OPEN_END = re.compile(r"<\s*/?\s*$")


def _scan_markup(text: str, state: str) -> str:
    """The markup state after template text ``text``, starting in ``state``."""
    i = 0
    while i < len(text):
        ch = text[i]
        if state == "text":
            match = _TAG_START.search(text, i)
            if match is None:
                return state
            state, i = "tag", match.end()
            continue
        if state == "tag":
            if ch == '"':
                state = "attr"
            elif ch == ">":
                state = "text"
        elif state == "attr" and ch == '"':
            state = "tag"
        i += 1
    return state


def default_prompts_dir() -> Path:
    found = shipped_dir("prompts", "answer.md")
    if found is None:
        raise ConfigError("prompt files not found: reinstall kaas or set KAAS_PROMPTS_DIR")
    return found


class PromptLibrary:
    """Loads and renders prompt files. Rendering never puts untrusted text into template syntax:
    values are passed as variables, so a ``{{`` inside a source stays literal, and every value is
    escaped for where it stands (module docstring)."""

    def __init__(self, directory: Path | None = None):
        self.directory = Path(directory) if directory else default_prompts_dir()
        if not self.directory.is_dir():
            raise ConfigError(f"prompts folder not found: {self.directory}")
        self._env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(self.directory)),
            undefined=jinja2.StrictUndefined,
            autoescape=False,
            finalize=_finalize,
            extensions=[_ContextEscape],
            keep_trailing_newline=False,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self._env.filters[_FILTER] = _escape_filter

    def _file(self, name: str) -> Path:
        path = self.directory / f"{name}.md"
        if not path.is_file():
            raise ConfigError(f"prompt file missing: {path}")
        return path

    def version(self, name: str) -> str:
        """Short content hash of the prompt file."""
        return hashlib.sha256(self._file(name).read_bytes()).hexdigest()[:12]

    def render(self, name: str, **variables) -> list[dict[str, str]]:
        """Render a prompt into chat messages: [system, user]."""
        self._file(name)
        try:
            template = self._env.get_template(f"{name}.md")
        except jinja2.TemplateSyntaxError as exc:
            raise ConfigError(f"prompt {name}.md, line {exc.lineno}: {exc.message}") from None
        context = template.new_context(variables)
        messages = []
        for role in ("system", "user"):
            if role not in template.blocks:
                raise ConfigError(f"prompt {name}.md has no {{% block {role} %}}")
            text = "".join(template.blocks[role](context)).strip()
            messages.append({"role": role, "content": text})
        return messages
