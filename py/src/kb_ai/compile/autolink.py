"""Compile, after the write stage: the first mention of another article in an article becomes a
link to it (``autolink``), and links a model wrote to no page, or to a page more restricted than
the article, become their text (``checked_links``).

The rules of a mention link (one place, for every compile, offline or with a model):

* **Which text.** Only text kaas wrote: an article with a manifest record whose file is what kaas
  last wrote (a file a person edited since is left alone until kaas writes it again), and in it
  never a line the record keeps as hand-written (``ArticleRecord.hand_lines``, the keys of
  ``compile/hand_text.py``). Only prose lines (``store.markdown_text.block_lines`` kind "text"):
  never code (fenced, indented, spans), headings (ATX or setext), frontmatter, block quotes,
  a table's header and delimiter rows, HTML, supersession trail lines; and in a line never inside
  a link, an HTML tag, a URL or square brackets.
* **Which names.** A page's title, its title without a trailing parenthetical and its
  ``aliases:`` (``store.mention_keys``: 1 to 8 words, not only stop words), matched word-bounded
  (no ``-``, ``/``, ``.``, ``@`` joining it to more of a word) and case-insensitively, the text
  being exactly the name but for case and spacing (``store.words.title_identity``); a one-word
  name in lower-case text only when the name is lower case ("settings" is not "Settings"). Not
  linked: a name two pages share, a one-word name that is a common word
  (``store.words.GENERIC_WORDS``), a name more than ``GENERIC_SHARE`` of the articles mention
  (at least ``GENERIC_FLOOR``), the article itself, a saved answer.
* **Which targets.** Only a page every reader of the article may read (``store.access.holds``:
  a public article links only public pages; a link would show a restricted page's title).
* **How many.** The first mention of each page, longest name first at a position (``New York
  City`` over ``New York``); none when the article links that page already; at most
  ``MAX_LINKS`` links that read as a mention link (their text is a name of their target),
  those already there counted. So a second run over the same text adds nothing: an unchanged
  wiki gets no diff.
* **How written.** ``link_style`` (``config.Settings``): ``markdown``, ``[text](../topic/page.md)``
  relative to the article's folder as every link kaas writes (``store.links.link_to``), or
  ``wikilink``, ``[[topic/page|text]]`` (``store.links.wikilink_to``; not in table rows, whose
  ``|`` it would split). Both are what Obsidian reads.

The new text is journaled and kept as what kaas wrote (``CompileState.keep_written``) before
the file is replaced, exactly as the write stage does, so the next compile does not take the
links for a person's edit.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from kb_ai.compile.context import CompileRun, stage_timer
from kb_ai.compile.hand_text import _line_key
from kb_ai.compile.offline import TRAIL
from kb_ai.compile.records import text_hash
from kb_ai.compile.source_links import apply_link_changes
from kb_ai.errors import ArticleFormatError, UnsafePathError
from kb_ai.store.access import holds
from kb_ai.store.articles import (
    read_article_text,
    split_frontmatter,
    validate_article_text,
    write_article_text,
)
from kb_ai.store.catalog import Catalog, CatalogEntry, build_catalog
from kb_ai.store.links import link_to, resolve, wikilink_to
from kb_ai.store.markdown_text import Link, block_lines, code_blanked, find_links
from kb_ai.store.mention_keys import mention_keys
from kb_ai.store.paths import safe_wiki_file
from kb_ai.store.words import GENERIC_WORDS, STOP_WORDS, title_identity, title_key

MAX_LINKS = 10  # mention links per article (those there already counted)
GENERIC_SHARE = 0.05  # a name more articles than this share mention is not linked ...
GENERIC_FLOOR = 10  # ... when that is more than this many articles (a small wiki links its hub)
STYLES = ("markdown", "wikilink")

_WORD = re.compile(r"\w++", re.UNICODE)
# Anchored at the start of a run (a lookbehind), so a long run of letters is read once, not
# once from every position: linear in the line.
_URL = re.compile(r"(?<![A-Za-z0-9+.-])(?:[A-Za-z][A-Za-z0-9+.-]*+://|www\.)\S++|(?<!\S)[^\s@]++@\S++")
_TAG = re.compile(r"<[^<>\n]*+>")
_BRACKETS = re.compile(r"\[[^\[\]\n]*+\]")
_QUOTE = re.compile(r" {0,3}+>")
_DELIMITER_ROW = re.compile(r"[ \t]*+\|?[ \t]*+:?-++:?[ \t]*+(?:\|[ \t]*+:?-++:?[ \t]*+)*+\|?[ \t]*+$")
_SETEXT = re.compile(r" {0,3}+(?:=++|-++)[ \t]*+$")
_PARENTHETICAL = re.compile(r"\s*\([^()]*\)\s*$")
_BEFORE_OK = frozenset(" \t([{\"'*“‘«")  # what may stand before a mention
_AFTER_OK = frozenset(" \t,;:!?)]}\"'*”’»")  # ... after one ("." only at a word's end)


@dataclass
class LinkNames:
    """The names pages may be linked by: key (``title_key``) -> the one page of that name and the
    spellings (``title_identity``) a mention must have. A key of two pages names neither."""

    pages: dict[str, tuple[str, frozenset[str]]]
    longest: int
    lower_ok: frozenset[str] = frozenset()  # one-word keys a lower-case word may mention

    @classmethod
    def of(cls, catalog: Catalog) -> LinkNames:
        found: dict[str, set[str]] = {}
        spelt: dict[str, set[str]] = {}
        lower: set[str] = set()
        for entry in catalog.entries:
            if entry.depends:
                continue  # a saved answer is not a subject an article mentions
            allowed = mention_keys(entry)
            for variant in {entry.title, _PARENTHETICAL.sub("", entry.title), *entry.aliases}:
                key = title_key(variant)
                if key in allowed and not _common_word(key):
                    found.setdefault(key, set()).add(entry.path)
                    spelt.setdefault(key, set()).add(title_identity(variant))
                    if variant.strip().islower():
                        lower.add(key)
        pages = {k: (next(iter(p)), frozenset(spelt[k])) for k, p in found.items() if len(p) == 1}
        return cls(pages, max((k.count(" ") + 1 for k in pages), default=0), frozenset(lower))

    def _names(self, key: str, text: str) -> bool:
        """Whether ``text`` (the words of ``key``) mentions the page: exactly one of its names but
        for case and spacing; a one-word name written in lower case only when the name is (the
        word "settings" is not the page "Settings"; "gevent" is the page "gevent")."""
        if title_identity(text) not in self.pages[key][1]:
            return False
        return " " in key or not text.islower() or key in self.lower_ok

    def find(self, line: str, masked: str) -> list[tuple[int, int, str]]:
        """(start, end, key) of each mention in ``line`` (``masked``: the same line with what may
        not be linked blanked), left to right, the longest name at each position."""
        if not self.pages:
            return []
        tokens = [(m.start(), m.end(), m.group().casefold()) for m in _WORD.finditer(masked)]
        out: list[tuple[int, int, str]] = []
        i = 0
        while i < len(tokens):
            hit = None
            for n in range(min(self.longest, len(tokens) - i), 0, -1):
                key = " ".join(t[2] for t in tokens[i:i + n])
                start, end = tokens[i][0], tokens[i + n - 1][1]
                if key in self.pages and _bounded(line, start, end) and self._names(key, line[start:end]):
                    hit = (start, end, key, n)
                    break
            if hit is None:
                i += 1
                continue
            out.append(hit[:3])
            i += hit[3]
        return out


def _common_word(key: str) -> bool:
    return " " not in key and (key in GENERIC_WORDS or key in STOP_WORDS)


def _bounded(line: str, start: int, end: int) -> bool:
    """The mention is a whole word run, not part of ``flask-login``, ``a/b``, ``x.y`` or ``a@b``."""
    before = line[start - 1] if start else " "
    after = line[end] if end < len(line) else " "
    if before not in _BEFORE_OK:
        return False
    if after == ".":
        return end + 1 >= len(line) or not line[end + 1].isalnum()
    return after in _AFTER_OK


# ---------------------------------------------------------------------------------------------
# the lines of a body that may hold a link


@dataclass(frozen=True)
class ProseLine:
    start: int  # offset in the body
    text: str
    masked: str  # the text with code, links, tags, URLs and brackets blanked


def prose_lines(body: str, links: list[Link], *, keep_link_text: bool = False, tables: bool = True) -> list[ProseLine]:
    """The lines of ``body`` a mention may be linked in (see the module docstring), masked.
    ``keep_link_text``: links' own text is not blanked (what a page mentions, for counting)."""
    lines = block_lines(body)
    blanks = _link_blanks(lines, links, keep_link_text)
    out: list[ProseLine] = []
    for index, line in enumerate(lines):
        following = lines[index + 1] if index + 1 < len(lines) else None
        if line.kind != "text" or not _prose(line.text, following, tables):
            continue
        if index and lines[index - 1].kind == "text" and _SETEXT.match(line.text):
            continue
        masked = _mask(line.start, line.text, blanks.get(index, ()))
        out.append(ProseLine(line.start, line.text, masked))
    return out


def _link_blanks(lines, links: list[Link], keep_link_text: bool) -> dict[int, list[tuple[int, int]]]:
    """Line index -> the (start, end) body offsets of link syntax on it to blank: each link is
    placed on its lines once (by bisection), so a page of many links and lines costs their sum."""
    starts = [line.start for line in lines]
    out: dict[int, list[tuple[int, int]]] = {}
    for link in links:
        spans = [(link.start, link.text_start), (link.text_end, link.end)] if keep_link_text and not link.image \
            else [(link.start, link.end)]
        first = max(0, bisect.bisect_right(starts, link.start) - 1)
        last = max(0, bisect.bisect_right(starts, max(link.start, link.end - 1)) - 1)
        for index in range(first, last + 1):
            out.setdefault(index, []).extend(spans)
    return out


def _prose(text: str, following, tables: bool) -> bool:
    stripped = text.strip()
    if _QUOTE.match(text) or stripped.startswith("<") or TRAIL.match(stripped) or _DELIMITER_ROW.match(text):
        return False
    if stripped.startswith("|") and not tables:
        return False
    if following is not None and following.kind == "text":
        if _DELIMITER_ROW.match(following.text) and "|" in following.text + text:
            return False  # a table's header row
        if _SETEXT.match(following.text):
            return False  # a setext heading
    return True


def _mask(start: int, text: str, spans) -> str:
    chars = list(code_blanked(text))
    end = start + len(text)
    for a, b in spans:
        for at in range(max(a, start) - start, min(b, end) - start):
            chars[at] = " "
    masked = "".join(chars)
    for pattern in (_URL, _TAG, _BRACKETS):
        masked = pattern.sub(lambda m: " " * len(m.group()), masked)
    return masked


# ---------------------------------------------------------------------------------------------
# one article


@dataclass
class Article:
    path: str
    text: str
    head: str  # the frontmatter, as it is in the file
    body: str
    entry: CatalogEntry


def linked_names(article: Article, links: list[Link], catalog: Catalog) -> tuple[set[str], int]:
    """(the catalog pages ``article`` links to, how many of its links read as a mention link:
    their text is a name of their target)."""
    targets: set[str] = set()
    mention_like = 0
    for link in links:
        if link.kind == "definition":
            continue
        page = resolve(article.path, link, lambda rel: rel in catalog, catalog.wiki_page).page
        entry = catalog.get(page) if page is not None else None
        if entry is None:
            continue
        targets.add(page)
        if page != article.path and title_key(link.text) in mention_keys(entry):
            mention_like += 1
    return targets, mention_like


def link_mentions(article: Article, catalog: Catalog, names: LinkNames, generic: set[str],
                  hand: set[str], style: str) -> tuple[str, int]:
    """The body of ``article`` with its first mentions linked (see the module docstring), and
    how many links were added."""
    links = find_links(article.body)
    already, count = linked_names(article, links, catalog)
    room = MAX_LINKS - count
    if room <= 0:
        return article.body, 0
    edits: list[tuple[int, int, str]] = []
    done = set(already)
    for line in prose_lines(article.body, links, tables=style == "markdown"):
        if _line_key(line.text.strip()) in hand:
            continue
        for start, end, key in names.find(line.text, line.masked):
            target = names.pages[key][0]
            if key in generic or target in done or target == article.path:
                continue
            entry = catalog.get(target)
            if entry is None or not holds(article.entry.access, entry.access):
                continue
            done.add(target)
            edits.append((line.start + start, line.start + end, written_link(article.path, target,
                                                                          line.text[start:end], style)))
            if len(edits) >= room:
                break
        if len(edits) >= room:
            break
    body = article.body
    for start, end, link in sorted(edits, reverse=True):
        body = body[:start] + link + body[end:]
    return body, len(edits)


def written_link(from_path: str, target: str, text: str, style: str) -> str:
    """The link kaas writes in the page at ``from_path`` to catalog page ``target``, showing ``text``."""
    if style == "wikilink":
        return wikilink_to(target, text)
    href = link_to(from_path, target)
    if any(c in href for c in " ()<>"):
        href = f"<{href}>"
    shown = text.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")
    return f"[{shown}]({href})"


def checked_links(article: Article, catalog: Catalog, hand: set[str]) -> tuple[str, list[str]]:
    """The body of ``article`` with each link (outside hand-written lines) to a wiki page that is
    not in ``catalog``, or is more restricted than the article, made its text; and a line for
    each (what was dropped and why). What a model writes is checked so."""
    links = find_links(article.body)
    lines = article.body.split("\n")
    drops: list[tuple[Link, None]] = []
    notes: list[str] = []
    for link in links:
        if link.kind == "reference" or link.image:
            continue
        target = resolve(article.path, link, lambda rel: rel in catalog, catalog.wiki_page)
        page = target.page
        if target.kind != "wiki" or page is None or page == article.path:
            continue
        entry = catalog.get(page)
        if entry is not None and holds(article.entry.access, entry.access):
            continue
        line = lines[link.line - 1] if 0 < link.line <= len(lines) else ""
        if _line_key(line.strip()) in hand:
            continue
        why = "no such page" if entry is None else "a page more restricted than this article"
        drops.append((link, None))
        notes.append(f"{article.path}: dropped the link to {page} ({why}); its text is kept")
    return apply_link_changes(article.body, drops, links), notes


def dropped_link_notes(dropped: dict[str, set[str]], written: list[str]) -> list[str]:
    """The report lines for the links of the articles ``written`` that led nowhere and were made
    their text when written (``SourceLinks.settle``)."""
    return [f"{path}: dropped the link to {target} (no such page); its text is kept"
            for path in sorted(set(written) & set(dropped)) for target in sorted(dropped[path])]


# ---------------------------------------------------------------------------------------------
# the pass


@dataclass
class AutolinkCounts:
    articles: int = 0
    linked: int = 0
    links: int = 0
    dropped: int = 0
    notes: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)


def autolink(run: CompileRun, written: bool, *, check: frozenset[str] | set[str] = frozenset()) -> bool:
    """The pass over the wiki after the write stage (when an article changed, or ``--full``):
    mention links in every article kaas wrote (their names from the wiki as it is now), and, for
    the articles in ``check`` (those the model wrote this run), links to no page or to a more
    restricted one dropped with a report line. Returns whether any file changed."""
    if not (written or run.full or run.state.resumed_units):
        return False
    style = run.settings.link_style if run.settings.link_style in STYLES else "markdown"
    with stage_timer(run.report, "autolink") as stage:
        counts = _autolink(run.kb.wiki_dir, run, style, check)
        stage.counts = {"articles": counts.articles, "linked": counts.linked, "links": counts.links,
                        "dropped": counts.dropped}
    run.report.warnings.extend(counts.notes)
    run.report.updated.extend(p for p in counts.changed if p not in run.report.updated and p not in run.report.created)
    return bool(counts.changed)


def _autolink(wiki_dir: Path, run: CompileRun, style: str, check: frozenset[str] | set[str]) -> AutolinkCounts:
    catalog = build_catalog(wiki_dir)
    names = LinkNames.of(catalog)
    counts = AutolinkCounts(articles=len(catalog))
    mentioned: Counter = Counter()
    ours: list[str] = []
    for entry in catalog.entries:
        article = _read(wiki_dir, entry)
        if article is None:
            continue
        keys = {key for line in prose_lines(article.body, find_links(article.body), keep_link_text=True)
                for _s, _e, key in names.find(line.text, line.masked)}
        mentioned.update(keys)
        if _kaas_wrote(run, article) and (keys or entry.path in check):
            ours.append(entry.path)
    cut = max(GENERIC_FLOOR, GENERIC_SHARE * len(catalog))
    generic = {key for key, n in mentioned.items() if n > cut}
    for path in ours:
        article = _read(wiki_dir, catalog.get(path))
        if article is None or not _kaas_wrote(run, article):
            continue
        record = run.state.articles[path]
        hand = set(record.hand_lines)
        body, notes = checked_links(article, catalog, hand) if path in check else (article.body, [])
        article = replace(article, body=body)
        body, added = link_mentions(article, catalog, names, generic, hand, style)
        if body == article.body and not notes:
            continue
        if _commit(run, wiki_dir, path, article.text, article.head + body):
            counts.changed.append(path)
            counts.linked += bool(added)
            counts.links += added
            counts.dropped += len(notes)
            counts.notes.extend(notes)
    return counts


def _read(wiki_dir: Path, entry: CatalogEntry | None) -> Article | None:
    if entry is None:
        return None
    try:
        rel, file = safe_wiki_file(wiki_dir, entry.path)
        text = read_article_text(file, rel)
        _meta, body = split_frontmatter(text, rel)
    except (ArticleFormatError, UnsafePathError, OSError):
        return None
    return Article(entry.path, text, text[:len(text) - len(body)], body, entry)


def _kaas_wrote(run: CompileRun, article: Article) -> bool:
    """The file is the text kaas last wrote (a person's edit since is theirs until kaas merges it)."""
    record = run.state.articles.get(article.path)
    return record is not None and record.written_hash == text_hash(article.text)


def _commit(run: CompileRun, wiki_dir: Path, path: str, old: str, new: str) -> bool:
    """Journal, keep and write ``new`` in place of ``old`` (still what the file holds)."""
    try:
        validate_article_text(new, path)
        rel, file = safe_wiki_file(wiki_dir, path)
        if read_article_text(file, rel) != old:
            return False  # changed since it was read: a person is editing it
    except (ArticleFormatError, UnsafePathError, OSError):
        return False
    record = run.state.articles[path]
    run.state.keep_written(new)
    run.state.record_article(replace(record, written_hash=text_hash(new)))
    try:
        write_article_text(wiki_dir, path, new)
    except (UnsafePathError, OSError):
        run.state.record_article(record)
        return False
    return True
