"""Articles: YAML frontmatter + Markdown body, read with defaults and written atomically.

Key order and body are kept as written. A hand-written article with missing fields gets
defaults (title from the first heading or the file name, summary from the first sentence,
topic from its folder) and a warning; malformed frontmatter raises ``ArticleFormatError``
naming the file. Reading and writing the YAML itself is ``store/frontmatter.py``.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from kb_ai.store.frontmatter import (  # noqa: F401  (re-exported: part of what an article is)
    render_article,
    split_frontmatter,
)
from kb_ai.store.markdown_text import first_heading, first_sentence, plain_text
from kb_ai.store.sentences import clip
from kb_ai.store.paths import normalize_wiki_path, safe_wiki_file

MAX_ARTICLE_BYTES = 2_000_000
SUMMARY_LIMIT = 200
# ``questions:``: questions the article answers, in a reader's words (written by the compile model
# or by hand). Searched as a keyword field of the page (offline/lexical.py), never shown in the
# catalog. At most this many, each clipped to QUESTION_LIMIT characters.
MAX_QUESTIONS = 8
QUESTION_LIMIT = 200
DEFAULT_TOPIC = "general"
# Files in wiki/ that are not articles.
RESERVED_NAMES = {"master-index.md", "log.md", "index.md", "topics.md"}
TOPIC_INDEX_NAME = "index.md"  # wiki/<topic>/index.md: a topic's index page, generated
_SUMMARY_MARKUP = re.compile(r"[<>]|^#++\s*+")
# HTML tags (``<kbd>``, ``</em>``, ``<br/>``), control characters, footnote marks (``[^1]``), and
# what is left of note markers (``[!NOTE]``, ``!!! note``, ``???+``) and reST roles (``:class:``).
_SUMMARY_NOISE = re.compile(
    r"</?[A-Za-z][\w-]*+(?:\s[^<>\n]*+)?+/?>|[\x00-\x08\x0b-\x1f\x7f]"
    r"|\[![A-Za-z]++\]|\[\^[^\]\[\s]++\]|(?:^|(?<=\s))(?:!!!|\?\?\?\+?)(?=\s|$)|(?<![\w:]):[a-z][\w:+.-]*+:(?=\S)"
)


def clean_summary(value: object, limit: int = SUMMARY_LIMIT) -> str | None:
    """A summary (from a model, for an article or a topic; or a lead sentence) as one catalog
    line of plain text: links to their text, emphasis and code markers, HTML tags, control
    characters, leftover note markers and reST roles, a leading heading marker and angle
    brackets dropped, whitespace (line breaks too) folded, clipped at a word to ``limit``; None
    when fewer than 3 letters or digits are left."""
    text = plain_text(str(value if value is not None else ""))
    text = _SUMMARY_NOISE.sub(" ", text)
    text = " ".join(_SUMMARY_MARKUP.sub("", text).split())
    if len(re.findall(r"\w", text)) < 3:
        return None
    return clip(text, limit)


MAX_ALIASES = 20


def is_generated(rel: str) -> bool:
    """Whether catalog path ``rel`` (normalized) is a file kaas generates rather than an article:
    ``master-index.md``, ``topics.md``, ``log.md``, a top-level ``index.md`` and topic index
    pages ``<topic>/index.md``. None of them is a page anyone reads, edits or cites."""
    parts = rel.split("/")
    return (len(parts) == 1 and parts[0] in RESERVED_NAMES) or (len(parts) == 2 and parts[1] == TOPIC_INDEX_NAME)

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
    def aliases(self) -> tuple[str, ...]:
        """Other names of the page (Obsidian's ``aliases:``, or ``alias:``): a wikilink, a mention
        and a keyword search find the page by them as by its title. Blank ones and copies of the
        title dropped, whitespace folded, at most ``MAX_ALIASES``."""
        names: dict[str, None] = {}
        for raw in _string_list(self.meta.get("aliases")) + _string_list(self.meta.get("alias")):
            name = " ".join(raw.split())[:200]
            if name and name.casefold() != self.title.casefold() and name.casefold() not in {n.casefold() for n in names}:
                names[name] = None
        return tuple(names)[:MAX_ALIASES]

    @property
    def sources(self) -> list[str]:
        return _string_list(self.meta.get("sources"))

    @property
    def questions(self) -> list[str]:
        return questions_of(self.meta)

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


def questions_of(meta: dict[str, Any]) -> list[str]:
    """The ``questions:`` of a frontmatter: a list of text items (one string: one question), each
    one line of at most ``QUESTION_LIMIT`` characters, the first ``MAX_QUESTIONS``; anything else
    (a mapping, a number list item that is not text) is no question."""
    value = meta.get("questions")
    items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    out = [" ".join(item.split())[:QUESTION_LIMIT] for item in items if isinstance(item, str) and item.strip()]
    return out[:MAX_QUESTIONS]


def _title_from_filename(path: str) -> str:
    stem = Path(path).stem.replace("-", " ").replace("_", " ").strip()
    return stem[:1].upper() + stem[1:] if stem else "Untitled"


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
    """Every article file under ``wiki_dir`` as catalog paths, sorted (folder by folder, as
    ``sorted(wiki_dir.rglob("*.md"))``). Skips the catalog, the log, the topic index, topic index
    pages, hidden files, and symlinks that point out of the wiki; folders reached through a
    symbolic link are not walked. One ``scandir`` per folder: only a symbolic link is resolved
    (100,000 files are listed in a fraction of a second, not seconds of ``realpath``)."""
    root = wiki_dir.resolve()
    found: list[str] = []
    folders = [("", str(wiki_dir))]
    while folders:
        prefix, folder = folders.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except PermissionError:
            continue
        for entry in entries:
            name = entry.name
            if name.startswith("."):
                continue  # hidden: never an article, nor anything below it
            rel = prefix + name
            is_dir = _entry_is_dir(entry)
            if is_dir:
                folders.append((rel + "/", entry.path))
            if not name.endswith(".md") or is_generated(rel):
                continue
            if _entry_is_link(entry):
                if _link_is_article(wiki_dir / rel, root):
                    found.append(rel)
            elif not is_dir:  # a folder named like an article: its files are listed
                found.append(rel)
    found.sort(key=lambda rel: rel.split("/"))
    return found


def _entry_is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _entry_is_link(entry: os.DirEntry) -> bool:
    try:
        return entry.is_symlink()
    except OSError:
        return False


def _link_is_article(file: Path, root: Path) -> bool:
    """A symbolic link is listed when it resolves to a file inside the wiki (or cannot be
    resolved: a loop is listed, so reading it reports it)."""
    try:
        real = file.resolve()
    except (RuntimeError, OSError):
        return True
    return root in real.parents and not real.is_dir()
