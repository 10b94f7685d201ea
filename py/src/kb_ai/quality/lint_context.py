"""What ``kaas lint``'s checks read and return: the ``LintContext`` (the articles, the catalog, the
compile manifest, read once), the ``Finding`` records, the severities and the limits."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from kb_ai.errors import ArticleFormatError, UnsafePathError
from kb_ai.store.articles import SUMMARY_LIMIT, Article, iter_article_paths, parse_article, read_article_text
from kb_ai.store.catalog import Catalog, entry_from_article, parse_master_index, read_master_index, sort_key
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.links import LinkTarget, resolve
from kb_ai.store.markdown_text import Link, find_links
from kb_ai.store.paths import safe_wiki_file

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITIES = (ERROR, WARNING, INFO)

MAX_ARTICLE_CHARS = 50_000  # a page this long is a book chapter: split it
NEAR_DUPLICATE_RATIO = 0.85  # difflib ratio of the one word two titles spell differently
KIND_ANSWER = "answer"  # saved answers: navigation pages, expected to have neither sources nor inbound links


@dataclass(frozen=True)
class Finding:
    """One problem. ``path`` is relative to ``wiki/`` (an article, or ``master-index.md``)."""

    check: str
    severity: str
    path: str
    message: str
    fixable: bool = False
    line: int | None = None

    def to_json(self) -> dict[str, Any]:
        data = {"check": self.check, "severity": self.severity, "path": self.path,
                "message": self.message, "fixable": self.fixable}
        if self.line is not None:
            data["line"] = self.line
        return data

    def render(self) -> str:
        where = f"wiki/{self.path}" + (f":{self.line}" if self.line is not None else "")
        fix = " [fixable]" if self.fixable else ""
        return f"{where}: {self.severity}: {self.check}: {self.message}{fix}"


@dataclass(frozen=True)
class LintConfig:
    summary_limit: int = SUMMARY_LIMIT
    max_article_chars: int = MAX_ARTICLE_CHARS
    max_article_tokens: int = 12_000  # the default reading budget: a longer page is read trimmed
    near_duplicate_ratio: float = NEAR_DUPLICATE_RATIO


# ---------------------------------------------------------------------------------------------
# what the checks read


@dataclass
class ArticleFile:
    """An article as read from disk: its text, and the parsed article or why it did not parse."""

    path: str
    text: str | None
    article: Article | None
    error: str | None = None


class LintContext:
    """Everything the checks need, read once. Properties that cost something are computed lazily."""

    def __init__(self, kb: KnowledgeBase, config: LintConfig):
        self.kb = kb
        self.config = config
        self.files: dict[str, ArticleFile] = {}
        for path in iter_article_paths(kb.wiki_dir):
            self.files[path] = _read_file(kb, path)
        self.articles: dict[str, Article] = {p: f.article for p, f in self.files.items() if f.article is not None}
        self.catalog_text: str | None = read_master_index(kb.wiki_dir)  # None: missing or not a file
        self.catalog = parse_master_index(self.catalog_text) if self.catalog_text is not None else None
        self.raw_exists = kb.raw_dir.is_dir()

    @cached_property
    def links(self) -> dict[str, list[tuple[Link, LinkTarget]]]:
        """Each article's links, resolved as the renderer resolves them (``store.links``)."""
        in_wiki = lambda rel: self.exists(f"wiki/{rel}")  # noqa: E731
        names = self.pages.wiki_page
        return {path: [(link, resolve(path, link, in_wiki, names)) for link in find_links(article.body)]
                for path, article in self.articles.items()}

    @cached_property
    def pages(self) -> Catalog:
        """The catalog the articles make (what ``kaas index`` writes): what wikilinks name."""
        return Catalog(sorted((entry_from_article(a) for a in self.articles.values()), key=sort_key))

    @cached_property
    def manifest(self):
        """The compile manifest (``compile/state.py``), or None when this KB was never compiled."""
        from kb_ai.compile.state import JOURNAL, MANIFEST, CompileState

        if not any((self.kb.state_dir / name).is_file() for name in (MANIFEST, JOURNAL)):
            return None
        return CompileState.load(self.kb.state_dir, self.kb.wiki_dir, read_only=True)

    def exists(self, kb_path: str) -> bool:
        return (self.kb.root / kb_path).exists()


def _read_file(kb: KnowledgeBase, path: str) -> ArticleFile:
    try:
        rel, file = safe_wiki_file(kb.wiki_dir, path)
        text = read_article_text(file, rel)
    except (ArticleFormatError, UnsafePathError) as exc:
        return ArticleFile(path, None, None, exc.message)
    except OSError as exc:
        return ArticleFile(path, None, None, f"{path}: cannot read ({exc.strerror or exc})")
    try:
        return ArticleFile(path, text, parse_article(text, path))
    except ArticleFormatError as exc:
        return ArticleFile(path, text, None, exc.message)


def dead_links(ctx: LintContext, path: str) -> list[tuple[Link, LinkTarget]]:
    """The links of article ``path`` that point inside the KB at nothing (what ``--fix`` removes),
    each with where it points."""
    return [(link, target) for link, target in ctx.links.get(path, [])
            if target.kind in ("wiki", "kb") and not ctx.exists(target.kb_path or "")]


def as_date(value: Any) -> dt.date | None:
    """A frontmatter date (``updated:``) as a date, or None when it is not one."""
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value.strip()[:10])
        except ValueError:
            return None
    return None
