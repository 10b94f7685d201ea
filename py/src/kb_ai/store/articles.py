"""Articles: YAML frontmatter + Markdown body, read with defaults and written atomically.

Key order and body are kept as written. A hand-written article with missing fields gets
defaults (title from the first heading or the file name, summary from the first sentence,
topic from its folder) and a warning; malformed frontmatter raises ``ArticleFormatError``
naming the file.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import frontmatter
import yaml

from kb_ai.errors import ArticleFormatError, UnsafePathError
from kb_ai.store.access import parse_access
from kb_ai.files import (
    FileTooLargeError,
    LinkInPathError,
    NotRegularFileError,
    link_below,
    read_regular_bytes,
    write_below,
)
from kb_ai.store.markdown_text import clip, first_heading, first_sentence, plain_text
from kb_ai.store.paths import normalize_wiki_path, safe_wiki_file

MAX_ARTICLE_BYTES = 2_000_000
MAX_FRONTMATTER_BYTES = 64_000
MAX_FRONTMATTER_DEPTH = 16  # frontmatter is flat; deeper nesting is a mistake or an attack
MAX_INT_DIGITS = 1000  # Python refuses to print integers past 4300 digits (json, YAML, str)
_MAX_INT_BITS = int(MAX_INT_DIGITS * 3.3219)  # log2(10): bits of the largest such integer
SUMMARY_LIMIT = 200
DEFAULT_TOPIC = "general"
# Files in wiki/ that are not articles.
RESERVED_NAMES = {"master-index.md", "log.md", "index.md", "topics.md"}
TOPIC_INDEX_NAME = "index.md"  # wiki/<topic>/index.md: a topic's index page, generated
_SUMMARY_MARKUP = re.compile(r"[<>]|^#++\s*+")


def clean_summary(value: object, limit: int = SUMMARY_LIMIT) -> str | None:
    """A summary (from a model, for an article or a topic) as one catalog line of plain text:
    links to their text, emphasis and code markers, a leading heading marker and angle brackets
    dropped, whitespace (line breaks too) folded, clipped at a word to ``limit``; None when fewer
    than 3 letters or digits are left."""
    text = plain_text(str(value if value is not None else ""))
    text = " ".join(_SUMMARY_MARKUP.sub("", text).split())
    if len(re.findall(r"\w", text)) < 3:
        return None
    return clip(text, limit)


def is_generated(rel: str) -> bool:
    """Whether catalog path ``rel`` (normalized) is a file kaas generates rather than an article:
    ``master-index.md``, ``topics.md``, ``log.md``, a top-level ``index.md`` and topic index
    pages ``<topic>/index.md``. None of them is a page anyone reads, edits or cites."""
    parts = rel.split("/")
    return (len(parts) == 1 and parts[0] in RESERVED_NAMES) or (len(parts) == 2 and parts[1] == TOPIC_INDEX_NAME)

_YAML_HANDLER = frontmatter.YAMLHandler()


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


_FAST_SAFE_LOADER = None
if getattr(yaml, "CSafeLoader", None) is not None:
    class _FastSafeLoader(_ValueErrorsAsYAMLErrors, yaml.CSafeLoader):  # type: ignore[misc, name-defined]
        """libyaml's parser, PyYAML's safe constructors."""

    _FAST_SAFE_LOADER = _FastSafeLoader


class _NoAliasLoader(_ValueErrorsAsYAMLErrors, yaml.SafeLoader):
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


@dataclass
class Article:
    """One wiki page. ``meta`` holds every frontmatter key in file order (defaults not added)."""

    path: str
    title: str
    summary: str
    topic: str
    body: str
    meta: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    access: tuple[str, ...] | None = None  # None: public; else the groups that may read it (store/access.py)

    @property
    def tags(self) -> list[str]:
        return _string_list(self.meta.get("tags"))

    @property
    def sources(self) -> list[str]:
        return _string_list(self.meta.get("sources"))

    @property
    def kind(self) -> str:
        """``article`` (evidence) or ``answer`` (a saved chat answer: navigation only)."""
        return str(self.meta.get("kind") or "article")

    @property
    def frontmatter_json(self) -> dict[str, Any]:
        """The frontmatter as JSON-safe values (dates as ISO strings), keys in file order."""
        return jsonable(self.meta)

    @property
    def cited_paths(self) -> list[str]:
        """For a saved answer: the catalog paths of the articles it cited."""
        return _string_list(self.meta.get("citations"))

    @property
    def depends(self) -> tuple[str, ...]:
        """For a saved answer: every page it was made from — the pages read for it (``read``)
        and those it cites (``citations``) — as catalog paths. Only readers who may read all of
        them may read the answer (``Catalog.readable_by``), whenever that is decided. An entry
        that is not a page path is kept as written: it names no page, so the answer fails closed."""
        if self.kind != "answer":
            return ()
        paths: dict[str, None] = {}
        for raw in _string_list(self.meta.get("read")) + self.cited_paths:
            try:
                paths[normalize_wiki_path(raw)] = None
            except UnsafePathError:
                paths[raw] = None
        return tuple(paths)

    @property
    def visibility(self) -> tuple:
        """What decides who may read this page: its ``access`` rule, whether it is a saved answer,
        and the pages a saved answer was made from. Only admins may change it (server/pages.py)."""
        return (self.access, self.kind == "answer", self.depends)


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # .inf / .nan are YAML, not JSON
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _string_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value if v is not None and str(v).strip()]
    return [str(value)]


def _title_from_filename(path: str) -> str:
    stem = Path(path).stem.replace("-", " ").replace("_", " ").strip()
    return stem[:1].upper() + stem[1:] if stem else "Untitled"


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
    if not _YAML_HANDLER.detect(text):
        return {}, text
    try:
        fm_text, body = _YAML_HANDLER.split(text)
    except ValueError:
        return {}, text
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
    return {str(k): v for k, v in data.items()}, body.lstrip("\n")


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


def scalar_text(value: Any) -> str | None:
    """A frontmatter scalar a person meant as text: a string, or what YAML read as a number or a
    date (``title: 1984``, ``topic: 2026``) as written; None for anything else (a list, true)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float, dt.date)) and not isinstance(value, bool):
        return value.isoformat() if isinstance(value, dt.date) else str(value)
    return None


def parse_article(text: str, path: str) -> Article:
    """Parse an article's text (``path`` is its catalog path, used for defaults and messages)."""
    meta, body = split_frontmatter(text, path)
    warnings: list[str] = []
    title = scalar_text(meta.get("title"))
    if title is None or not title.strip():
        title = first_heading(body) or _title_from_filename(path)
        warnings.append(f"{path}: no title in frontmatter; using {title!r}")
    summary = meta.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        summary = first_sentence(body, SUMMARY_LIMIT) or title
        warnings.append(f"{path}: no summary in frontmatter; using the first sentence")
    elif len(summary) > SUMMARY_LIMIT:
        warnings.append(f"{path}: summary longer than {SUMMARY_LIMIT} characters")
    access, access_warnings = parse_access(meta)
    warnings += [f"{path}: {w}" for w in access_warnings]
    topic = scalar_text(meta.get("topic"))
    if topic is None or not topic.strip():
        folder = Path(path).parent.as_posix()
        topic = folder.split("/", 1)[0] if folder not in ("", ".") else DEFAULT_TOPIC
    return Article(
        path=path,
        title=" ".join(str(title).split()),
        summary=clip(str(summary), 400),
        # Folded to one line like the title: a topic is a catalog heading, and a line break in it
        # would let frontmatter write extra lines (fake entries) into master-index.md.
        topic=" ".join(str(topic).split()),
        body=body,
        meta=meta,
        warnings=warnings,
        access=access,
    )


def read_article_text(file: Path, label: str) -> str:
    """The text of an article file. A missing file (or a folder) raises FileNotFoundError /
    IsADirectoryError / NotADirectoryError, for callers to report as "no such page"; anything
    else that keeps it from being an article is an ``ArticleFormatError`` naming it: not a
    regular file (a FIFO would block the reader forever), unreadable, too large, not UTF-8."""
    try:
        data = read_regular_bytes(file, MAX_ARTICLE_BYTES)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise
    except (NotRegularFileError, FileTooLargeError) as exc:
        raise ArticleFormatError(f"{label}: {exc.strerror}") from None
    except OSError as exc:
        raise ArticleFormatError(f"{label}: cannot read ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ArticleFormatError(f"{label}: not UTF-8 text (byte {exc.start})") from None


def validate_article_text(text: str, rel: str) -> Article:
    """The one check for article text about to be written, by a person (the HTTP save) or by
    ``kaas compile`` (both writers): what passes here is what ``read_article_text`` and
    ``parse_article`` read back, so a written page can never be left out of the catalog.
    Size in UTF-8 bytes, encodable as UTF-8, no NUL, frontmatter that parses (size, YAML,
    a mapping) and names a title. Raises ``ArticleFormatError`` naming ``rel``."""
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ArticleFormatError(f"{rel}: not encodable as UTF-8 (character {exc.start})") from None
    if size > MAX_ARTICLE_BYTES:
        raise ArticleFormatError(f"{rel}: larger than {MAX_ARTICLE_BYTES} bytes ({size:,} bytes)")
    if "\x00" in text:
        raise ArticleFormatError(f"{rel}: contains a NUL character")
    meta, _body = split_frontmatter(text, rel)
    if not meta:
        raise ArticleFormatError(f"{rel}: the article needs YAML frontmatter (between --- lines) with a title")
    title = scalar_text(meta.get("title"))
    if title is None or not title.strip():
        raise ArticleFormatError(f"{rel}: the frontmatter needs a title")
    return parse_article(text, rel)


def load_article(wiki_dir: Path, path: str) -> Article:
    """Read one article by catalog path. Raises ``PageNotFoundError``-free ``FileNotFoundError``
    when missing, ``UnsafePathError`` for hostile paths, ``ArticleFormatError`` when unreadable."""
    rel, file = safe_wiki_file(wiki_dir, path)
    return parse_article(read_article_text(file, rel), rel)


def render_article(meta: dict[str, Any], body: str, *, like: str | None = None) -> str:
    """Frontmatter (keys in the given order) + body, ending in exactly one newline. Every value
    reads back as exactly the value given (``same_value``).

    ``like``: the article's text as it is now. Its frontmatter is then edited in place rather
    than written afresh: only the keys whose value changes are rewritten (new keys go at the
    end, removed keys go), so what a person wrote there stays as written: comments, quoting,
    key order, keys kaas does not know. (Should the edit not read back as ``meta``, which a
    frontmatter PyYAML cannot locate in the text could cause, it is written afresh.)"""
    if not meta:
        return body.rstrip("\n") + "\n"
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
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def _edit_frontmatter(text: str, ready: dict[str, Any]) -> str | None:
    """``text``'s frontmatter with only the keys that differ from ``ready`` rewritten (see
    ``render_article``); None when it cannot be done exactly."""
    if not _YAML_HANDLER.detect(text):
        return None
    try:
        fm_text, _body = _YAML_HANDLER.split(text)
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
    edits: list[tuple[int, int, str]] = []
    for name, (key, value) in zip(names, pairs):
        if name in ready and same_value(old[name], ready[name]):
            continue
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
        new = _dump_frontmatter({name: ready[name]}).rstrip("\n") if name in ready else ""
        replacement = "\n".join([*kept, *([new] if new else [])])
        if not replacement:  # the key goes, with the rest of its line (a comment on it) and the line break
            line_end = fm_text.find("\n", end)
            end = len(fm_text) if line_end == -1 else line_end + 1
        edits.append((start, end, replacement))
    out = fm_text
    for start, end, replacement in sorted(edits, reverse=True):
        out = out[:start] + replacement + out[end:]
    added = {name: value for name, value in ready.items() if name not in old}
    if added:
        out = out.rstrip("\n") + "\n" + _dump_frontmatter(added).rstrip("\n")
    out = out.strip("\n")
    return out if _reads_back(out, ready) else None


def _yaml_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _yaml_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_yaml_ready(v) for v in value]
    if isinstance(value, (str, int, float, bool, dt.date)) or value is None:
        return value
    return str(value)


def write_article(wiki_dir: Path, path: str, meta: dict[str, Any], body: str) -> Path:
    """Atomically write an article at catalog path ``path`` (validated to stay inside ``wiki_dir``)."""
    rel, _file = safe_wiki_file(wiki_dir, path)
    if Path(rel).name in RESERVED_NAMES:
        raise ArticleFormatError(f"{rel}: reserved file name")
    return write_article_text(wiki_dir, rel, render_article(meta, body))


def write_article_text(wiki_dir: Path, path: str, text: str) -> Path:
    """The one writer of article files (compile, lint --fix, the HTTP save, saved answers):
    atomic, and never through a symbolic link. A page that is a link (or lies in a linked folder)
    is an alias of another file; writing through it would put one page's text into another page,
    so it raises ``UnsafePathError`` instead (``link_refusal`` says why)."""
    rel = normalize_wiki_path(path)
    try:
        return write_below(wiki_dir, rel, text.encode("utf-8"))
    except LinkInPathError:
        raise UnsafePathError(link_refusal(wiki_dir, rel)) from None


def link_refusal(wiki_dir: Path, rel: str) -> str:
    """Why ``rel`` cannot be written: the link on its path, and where it points."""
    link = link_below(wiki_dir, rel)
    if link is None:
        return f"{rel}: a symbolic link is on its path; kaas never writes through a link"
    where = link.relative_to(wiki_dir).as_posix()
    try:
        target = os.readlink(link)
    except OSError:
        target = "?"
    return (f"{rel}: {where} is a symbolic link (to {target}); kaas never writes through a link: "
            "edit the file it points to, or replace the link with a file")


def link_on_path(wiki_dir: Path, rel: str) -> bool:
    """Whether a symbolic link lies on ``rel`` below ``wiki_dir`` (see ``write_article_text``)."""
    return link_below(wiki_dir, rel) is not None


def iter_article_paths(wiki_dir: Path) -> list[str]:
    """Every article file under ``wiki_dir`` as catalog paths, sorted. Skips the catalog, the log,
    the topic index, topic index pages, hidden files, and symlinks that point out of the wiki."""
    root = wiki_dir.resolve()
    found: list[str] = []
    for file in sorted(wiki_dir.rglob("*.md")):
        rel = file.relative_to(wiki_dir).as_posix()
        parts = rel.split("/")
        if any(p.startswith(".") for p in parts):
            continue
        if is_generated(rel):
            continue
        try:
            real = file.resolve()
        except (RuntimeError, OSError):  # a symlink loop: listed, so reading it reports it
            found.append(rel)
            continue
        if root not in real.parents or real.is_dir():
            continue  # out of the wiki; or a folder named like an article (its files are listed)
        found.append(rel)
    return found
