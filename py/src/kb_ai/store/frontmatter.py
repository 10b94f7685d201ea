"""Frontmatter: the YAML block at the head of an article, read safely and written back exactly.

Reading (``split_frontmatter``) finds the block with ``locate_frontmatter`` (text that starts like
frontmatter but holds no block kaas can read is refused, never read as body text: that would drop
its ``access`` rule), and refuses YAML that does not parse or is not a mapping, keys given twice,
aliases (YAML bombs), oversized or too deeply nested blocks and values kaas cannot print, each as
a one-line ``ArticleFormatError``: "could not read", which every reader treats as "hidden from
everyone", distinct from "no frontmatter" (``{}``). Writing
(``render_article``) produces YAML that reads back as exactly the values given, and edits an
existing block in place so that what a person wrote there stays as written.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

import frontmatter
import yaml

from kb_ai.errors import ArticleFormatError
from kb_ai.store.sentences import clip

MAX_FRONTMATTER_BYTES = 64_000
MAX_FRONTMATTER_DEPTH = 16  # frontmatter is flat; deeper nesting is a mistake or an attack
MAX_INT_DIGITS = 1000  # Python refuses to print integers past 4300 digits (json, YAML, str)
_MAX_INT_BITS = int(MAX_INT_DIGITS * 3.3219)  # log2(10): bits of the largest such integer

_YAML_HANDLER = frontmatter.YAMLHandler()  # writes YAML (export); reading is locate_frontmatter

# Where a frontmatter block is (locate_frontmatter). YAML also breaks lines at NEL, LS and PS: a
# comment may not hold one (YAML would read what follows it as a key kaas had ignored).
_LOOKS_LIKE_FRONTMATTER = re.compile(r"\s*(?:---|\+\+\+)")
_COMMENT = r"(?:[ \t]+(?:#[^\r\n\x85\u2028\u2029]*)?)?"
_OPENER = re.compile(r"-{3,}" + _COMMENT + r"(?P<brk>\r\n|\r|\n|\Z)")
_CLOSER = re.compile(r"(?<=[\r\n])(?:-{3,}|\.\.\.)" + _COMMENT + r"(?:\r\n|\r|\n|\Z)")



class _ValueErrorsAsYAMLErrors:
    """PyYAML's constructors raise ValueError, KeyError, AttributeError, ... for a value that
    looks like a date, number or tag but cannot be built (``2026-13-45``, ``!!bool maybe``, a
    5,000-digit integer): turn each into a YAML error that names the value and its line."""

    def construct_object(self, node, deep=False):  # type: ignore[no-untyped-def]
        try:
            return super().construct_object(node, deep=deep)  # type: ignore[misc]
        except (yaml.YAMLError, RecursionError):
            raise
        except Exception as exc:  # noqa: BLE001 - see the class docstring
            kind = str(node.tag).rsplit(":", 1)[-1]
            value = node.value if isinstance(node.value, str) else ""
            shown = f"{value[:40]}..." if len(value) > 40 else value
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {shown!r} as {kind} ({_one_line(exc)})", node.start_mark
            ) from None


class _UniqueKeys:
    """YAML requires the keys of a mapping to differ; PyYAML keeps the last of two silently, so
    ``access: [hr]`` then ``access: [hr, eng]`` would be read as whichever comes last. A key given
    twice is a YAML error naming it and its line (merge keys ``<<`` aside)."""

    def construct_mapping(self, node, deep=False):  # type: ignore[no-untyped-def]
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)  # type: ignore[attr-defined]
                try:
                    twice = key in seen
                    seen.add(key)
                except TypeError:
                    continue  # an unhashable key: PyYAML's own error says so
                if twice:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {clip(str(key), 40)!r} given twice", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]


_FAST_SAFE_LOADER = None
if getattr(yaml, "CSafeLoader", None) is not None:
    class _FastSafeLoader(_UniqueKeys, _ValueErrorsAsYAMLErrors, yaml.CSafeLoader):  # type: ignore[misc, name-defined]
        """libyaml's parser, PyYAML's safe constructors."""

    _FAST_SAFE_LOADER = _FastSafeLoader


class _NoAliasLoader(_UniqueKeys, _ValueErrorsAsYAMLErrors, yaml.SafeLoader):
    """Safe loader that refuses anchors/aliases: frontmatter never needs them, YAML bombs do."""

    def compose_node(self, parent, index):  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.constructor.ConstructorError(
                None, None, "YAML aliases are not allowed in frontmatter", event.start_mark
            )
        return super().compose_node(parent, index)


class _FrontmatterDumper(yaml.SafeDumper):
    """Block mappings, but short lists of scalars inline (``tags: [a, b]``), as people write them."""


def _represent_list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flow = all(isinstance(v, (str, int, float, bool, dt.date)) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_FrontmatterDumper.add_representer(list, _represent_list)

_UNICODE_BREAKS = ("\x85", "\u2028", "\u2029")


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    # PyYAML writes NEL / LS / PS raw inside single quotes, where they read back as folded line
    # breaks (a space): double quotes escape them (\N, \L, \P) so the value round-trips.
    style = '"' if any(ch in data for ch in _UNICODE_BREAKS) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_FrontmatterDumper.add_representer(str, _represent_str)


def split_frontmatter(text: str, label: str) -> tuple[dict[str, Any], str]:
    """Return (metadata in file order, body). ``label`` names the file in error messages.

    Raises only ``ArticleFormatError``: whatever the text holds (an impossible date, a number
    too large to print, nesting too deep, a lone surrogate, an unknown tag), one bad page is a
    one-line error about that page, never an exception that stops an index, a lint or a server."""
    try:
        meta, body = _split_frontmatter(text, label)
        _check_values(meta, label)
    except ArticleFormatError:
        raise
    except RecursionError:
        raise ArticleFormatError(f"{label}: malformed frontmatter: nested too deeply") from None
    except Exception as exc:  # noqa: BLE001 - PyYAML's constructors raise ValueError, TypeError,
        # KeyError, AttributeError, OverflowError... for values they cannot build; all mean the same.
        raise ArticleFormatError(f"{label}: malformed frontmatter: {_one_line(exc)}") from None
    return meta, body


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    message = lines[0] if lines else type(exc).__name__
    return clip(message, 160)


def _split_frontmatter(text: str, label: str) -> tuple[dict[str, Any], str]:
    block = locate_frontmatter(text, label)
    if block is None:
        return {}, text
    fm_text, body = block
    if len(fm_text.encode("utf-8")) > MAX_FRONTMATTER_BYTES:
        raise ArticleFormatError(f"{label}: frontmatter larger than {MAX_FRONTMATTER_BYTES} bytes")
    try:
        # Without a "*" there can be no alias (so no YAML bomb): use libyaml's C loader, ~10x
        # faster (index and lint read every article); otherwise the alias-refusing loader.
        loader = _FAST_SAFE_LOADER if _FAST_SAFE_LOADER is not None and "*" not in fm_text else _NoAliasLoader
        data = yaml.load(fm_text, Loader=loader)  # noqa: S506 - both are safe loaders
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (frontmatter line {where.line + 1})" if where is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ArticleFormatError(f"{label}: malformed frontmatter{line}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ArticleFormatError(f"{label}: frontmatter must be a mapping of keys to values")
    meta = {str(k): v for k, v in data.items()}
    if len(meta) != len(data):
        raise ArticleFormatError(f"{label}: malformed frontmatter: two keys read as the same name")
    return meta, body


def locate_frontmatter(text: str, label: str) -> tuple[str, str] | None:
    """(the frontmatter's YAML text, the body) of an article; None when it has no frontmatter.

    The rule: a text whose first line, after byte-order marks, blank lines and indentation,
    starts with ``---`` or ``+++`` holds a frontmatter block, which is read or refused, never
    taken for body text (that would drop its ``access`` rule and make a restricted page public).
    The block opens on the first line (after byte-order marks) with ``---`` (more dashes, trailing
    blanks and a ``# comment`` allowed) and closes at the first later line that is ``---`` or
    YAML's document end ``...`` (same allowances); lines end in LF, CRLF or CR. Anything else
    that starts like frontmatter (not closed, opened late or indented, ``---`` followed by text,
    TOML's ``+++``) raises ``ArticleFormatError`` naming ``label``. The YAML text keeps the
    opening line's break, so YAML's line numbers are the file's."""
    start = len(text) - len(text.lstrip("\ufeff"))
    if not _LOOKS_LIKE_FRONTMATTER.match(text, start):
        return None
    opener = _OPENER.match(text, start)
    if opener is None:
        raise ArticleFormatError(f"{label}: malformed frontmatter: {_bad_opening(text[start:])}")
    closer = _CLOSER.search(text, opener.end())
    if closer is None:
        raise ArticleFormatError(f"{label}: malformed frontmatter: not closed by a --- (or ...) line")
    fm_text = text[opener.end() - 1:closer.start()]  # from the opening line's break (its "\\n" in CRLF)
    body = text[closer.end():]
    return fm_text, body.lstrip("\r\n")


def _bad_opening(text: str) -> str:
    """Why ``text`` (which starts like frontmatter) has no frontmatter block kaas can read."""
    first = clip(re.split(r"[\r\n]", text.lstrip(), maxsplit=1)[0].strip(), 40)
    if first.startswith("+++"):
        return "TOML frontmatter (+++) is not supported; write YAML between --- lines"
    if not text.startswith("---"):
        return "the opening --- must be the very first line of the file, not indented or after blank lines"
    return f"the opening line must be --- alone (or followed by a # comment), not {first!r}"


def _check_values(meta: dict[str, Any], label: str) -> None:
    """Every value must be one the rest of kaas can print, serialize and write back: nesting at
    most ``MAX_FRONTMATTER_DEPTH`` deep, integers of at most ``MAX_INT_DIGITS`` digits (a hex or
    binary literal can build an integer Python refuses to print). Iterative: no recursion."""
    pending: list[tuple[Any, int]] = [(meta, 0)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict):
            items = [*value.keys(), *value.values()]
        elif isinstance(value, (list, tuple, set, frozenset)):
            items = list(value)
        else:
            if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _MAX_INT_BITS:
                raise ArticleFormatError(f"{label}: malformed frontmatter: a number longer than {MAX_INT_DIGITS} digits")
            continue
        if depth >= MAX_FRONTMATTER_DEPTH:
            raise ArticleFormatError(f"{label}: malformed frontmatter: nested deeper than {MAX_FRONTMATTER_DEPTH} levels")
        pending.extend((item, depth + 1) for item in items)


def render_article(meta: dict[str, Any], body: str, *, like: str | None = None) -> str:
    """Frontmatter (keys in the given order) + body, ending in exactly one newline. Every value
    reads back as exactly the value given (``same_value``).

    ``like``: the article's text as it is now. Its frontmatter is then edited in place rather
    than written afresh: only the keys whose value changes are rewritten (new keys go at the
    end, removed keys go), so what a person wrote there stays as written: comments, quoting,
    key order, keys kaas does not know. (Should the edit not read back as ``meta``, which a
    frontmatter PyYAML cannot locate in the text could cause, it is written afresh.)"""
    if not meta:
        text = body.rstrip("\n") + "\n"
        # A body that starts like frontmatter would be read as a (broken) block: give it an empty one.
        return f"---\n---\n{text}" if _LOOKS_LIKE_FRONTMATTER.match(text, len(text) - len(text.lstrip("\ufeff"))) else text
    ready = _yaml_ready(meta)
    fm_text = _edit_frontmatter(like, ready) if like is not None else None
    if fm_text is None:
        fm_text = _dump_frontmatter(ready)
    return f"---\n{fm_text}\n---\n{body.strip(chr(10))}\n"


class _QuotingDumper(_FrontmatterDumper):
    """Every string double-quoted (escaped): for values the plain style would not round-trip."""


_QuotingDumper.add_representer(
    str, lambda dumper, data: dumper.represent_scalar("tag:yaml.org,2002:str", data, style='"'))


def _dump_frontmatter(ready: dict[str, Any]) -> str:
    """YAML for ``ready`` that reads back as exactly ``ready``. PyYAML's plain style does not
    always: ``'0\\xa0'`` is written ``0\xa0`` and read back as the integer 0 (the reader drops the
    no-break space). Then every string is written double-quoted, which escapes everything."""
    for dumper in (_FrontmatterDumper, _QuotingDumper):
        fm_text = _YAML_HANDLER.export(ready, Dumper=dumper, sort_keys=False, width=100_000)
        if _reads_back(fm_text, ready):
            return fm_text
    raise ArticleFormatError("frontmatter values that YAML cannot write so that they read back the same")


def _reads_back(fm_text: str, ready: dict[str, Any]) -> bool:
    try:
        meta, _ = _split_frontmatter(f"---\n{fm_text}\n---\n", "frontmatter")
    except (ArticleFormatError, yaml.YAMLError, ValueError, RecursionError):
        return False
    return same_value(meta, ready)


def same_value(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (``True`` is not ``1``, ``"1"`` is not ``1``,
    a date is not a datetime); mappings compare without regard to key order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def _edit_frontmatter(text: str, ready: dict[str, Any]) -> str | None:
    """``text``'s frontmatter with only the keys that differ from ``ready`` rewritten (see
    ``render_article``); None when it cannot be done exactly."""
    composed = _compose_frontmatter(text)
    if composed is None:
        return None
    fm_text, old, keys = composed
    edits: list[tuple[int, int, str]] = []
    for name, key, value in keys:
        if name in ready and same_value(old[name], ready[name]):
            continue
        edit = _key_edit(fm_text, key, value, {name: ready[name]} if name in ready else None)
        if edit is None:
            return None
        edits.append(edit)
    out = fm_text
    for start, end, replacement in sorted(edits, reverse=True):
        out = out[:start] + replacement + out[end:]
    added = {name: value for name, value in ready.items() if name not in old}
    if added:
        out = out.rstrip("\n") + "\n" + _dump_frontmatter(added).rstrip("\n")
    out = out.strip("\n")
    return out if _reads_back(out, ready) else None


def _compose_frontmatter(text: str) -> tuple[str, dict[str, Any], list[tuple[str, yaml.Node, yaml.Node]]] | None:
    """(the frontmatter's YAML text, its values, each key's name and nodes in file order); None
    when there is none, it does not read, or a key is not a plain string or is given twice."""
    try:
        block = locate_frontmatter(text, "frontmatter")
        if block is None:
            return None
        fm_text, _body = block
        old, _ = _split_frontmatter(text, "frontmatter")
        root = yaml.compose(fm_text, Loader=_NoAliasLoader)  # noqa: S506 - a safe loader
    except Exception:  # noqa: BLE001 - anything unreadable is written afresh
        return None
    if not isinstance(root, yaml.MappingNode) or not root.value:
        return None
    pairs = root.value
    names = [k.value if isinstance(k, yaml.ScalarNode) else None for k, _ in pairs]
    if None in names or len(set(names)) != len(names) or set(names) != set(old):
        return None  # a key that is not a plain string, or given twice
    return fm_text, old, [(name, key, value) for name, (key, value) in zip(names, pairs, strict=True)]


def _key_edit(fm_text: str, key: yaml.Node, value: yaml.Node,
              new_value: dict[str, Any] | None) -> tuple[int, int, str] | None:
    """The edit (start, end, replacement) of ``fm_text`` that rewrites one top-level key as
    ``new_value`` (``{name: value}``), or removes it (None). A person's comment lines inside
    the old value are kept. None when the key is not at the start of its line."""
    if key.start_mark.column != 0:
        return None
    start = key.start_mark.index
    colon = fm_text.find(":", key.end_mark.index)
    end = value.end_mark.index
    while end > colon + 1 and fm_text[end - 1] in " \t\r\n":
        end -= 1
    end = max(end, colon + 1)
    block = isinstance(value, yaml.ScalarNode) and value.style in ("|", ">")
    kept = [] if block else [line for line in fm_text[start:end].splitlines()[1:]
                             if line.lstrip().startswith("#")]  # a person's comment lines
    new = _dump_frontmatter(new_value).rstrip("\n") if new_value is not None else ""
    replacement = "\n".join([*kept, *([new] if new else [])])
    if not replacement:  # the key goes, with the rest of its line (a comment on it) and the line break
        line_end = fm_text.find("\n", end)
        end = len(fm_text) if line_end == -1 else line_end + 1
    return start, end, replacement


def _yaml_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _yaml_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_yaml_ready(v) for v in value]
    if isinstance(value, (str, int, float, bool, dt.date)) or value is None:
        return value
    return str(value)
