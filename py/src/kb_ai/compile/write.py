"""Write: create or merge articles, one article at a time, safely.

Per article (articles run in parallel; the sources feeding one article are merged one batch after
another, oldest first), kaas:

1. reads the file as it is *now* and compares its sha256 with the hash of the text kaas last
   wrote: a mismatch means a person edited it. The merge then works on the edited text; offline
   (no model to merge with) the article is left alone and reported.
2. asks a writer for the new text: ``OfflineWriter`` (the source itself, cleaned, with
   supersession trail lines by diff) or ``LLMWriter`` (the model rewrites small articles whole
   and edits only the affected sections of large or hand-edited ones).
3. guards it (``guard_body``, one check whatever the writer and mode): every line a person wrote
   (``HandText``) and every supersession trail line is still there, and model output does not
   drop half the article; frontmatter is rebuilt by kaas (a hand-written summary or tag is kept),
   the text passes the reader's own checks (``store.articles.validate_article_text``), the file
   is still what was read (else a person is editing it: left alone), then the new record is
   journaled and the file replaced atomically.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb_ai.compile.ingest import Source
from kb_ai.compile.offline import TRAIL, article_body, lead_summary, supersede
from kb_ai.compile.state import ArticleRecord, CompileState, PlanTarget, text_hash
from kb_ai.errors import ArticleFormatError, KaasError, LLMError, UnsafePathError
from kb_ai.llm.plausible import implausible, one_line
from kb_ai.llm.tokens import chars_for_tokens, estimate_tokens
from kb_ai.store.articles import (
    RESERVED_NAMES,
    SUMMARY_LIMIT,
    jsonable,
    parse_article,
    link_on_path,
    link_refusal,
    read_article_text,
    render_article,
    split_frontmatter,
    validate_article_text,
    write_article_text,
)
from kb_ai.store.markdown_text import atx_heading, clip, first_sentence, iter_lines_outside_fences, plain_text
from kb_ai.store.paths import safe_wiki_file, slugify

WRITE_PROMPT = "compile_write"
WRITE_SOURCE_TOKENS = 8_000  # source text per write call; a longer source is cut (and reported)
LARGE_ARTICLE_TOKENS = 2_500  # above this an article is edited by section, not rewritten whole
MAX_SECTIONS_SHOWN = 4
MAX_TAGS = 8
WRITE_MAX_TOKENS = 6_000  # one article; bounds a rambling model
SHRINK_LIMIT = 0.5  # a whole rewrite may not drop more than half of an article's words

BODY_SCHEMA = {
    "type": "object",
    "properties": {
        "summary": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "body": {"type": "string"},
    },
    "required": ["summary", "body"],
}
EDITS_SCHEMA = {
    "type": "object",
    "properties": {
        "summary": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "edits": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "heading": {"type": "string"},
                    "action": {"type": "string", "enum": ["replace", "add"]},
                    "text": {"type": "string"},
                },
                "required": ["heading", "action", "text"],
            },
        },
    },
    "required": ["summary", "edits"],
}


@dataclass
class Contribution:
    """A source version to merge into an article. ``status``: new, revised (a changed file the
    article already merged an earlier version of) or revision (a dated near-copy of another source)."""

    source: Source
    status: str

    @property
    def path(self) -> str:
        return self.source.path


@dataclass
class ArticleJob:
    path: str
    target: PlanTarget
    contributions: list[Contribution] = field(default_factory=list)
    detach: set[str] = field(default_factory=set)  # sources to remove from ``sources:``
    # Sources to add to ``sources:`` whose text the article already has (a source renamed in
    # raw/, same checksum): source path -> checksum. No writer is asked.
    adopt: dict[str, str] = field(default_factory=dict)


@dataclass
class ArticleOutcome:
    path: str
    action: str  # created, updated, unchanged, held, failed, detached
    reason: str = ""
    merged: list[str] = field(default_factory=list)
    orphaned: bool = False
    trails: int = 0
    warnings: list[str] = field(default_factory=list)


@dataclass
class CurrentArticle:
    """The article as it is on disk now, as a writer sees it."""

    path: str
    title: str
    topic: str
    summary: str
    meta: dict[str, Any]
    body: str | None  # None: does not exist yet
    hand_edited: bool
    latest_date: str | None  # newest date among the sources already merged
    rejected: str | None = None  # why the model's previous output for this article was refused
    hand: "HandText | None" = None  # what a person wrote in it (None: nothing)


@dataclass
class Draft:
    summary: str
    tags: list[str]
    body: str
    trails: int = 0
    warnings: list[str] = field(default_factory=list)


class WriteRefused(Exception):
    """The writer will not change this article; the message says why (reported, not fatal).
    ``tell_model``: the next attempt's prompt says why (a refused model output)."""

    tell_model = True


class LinkRefused(WriteRefused):
    """The article's path is (or goes through) a symbolic link: kaas never writes through one."""

    tell_model = False


class ArticleChanged(WriteRefused):
    """The file changed on disk while kaas was working on it: a person is editing it."""

    tell_model = False


# ---------------------------------------------------------------------------------------------
# hand-written text


_SUMMARY_MARK = "\x00summary\x00"
_TAG_MARK = "\x00tag\x00"


def _line_key(line: str) -> str:
    return hashlib.sha256(line.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _text_lines(meta: dict[str, Any], body: str) -> tuple[Counter, Counter, dict[str, str]]:
    """(body line keys, frontmatter keys: summary and tags, key -> line): the units a person's
    edit is tracked in. A line is compared stripped; blank lines do not count."""
    shown: dict[str, str] = {}
    lines: Counter = Counter()
    for line in body.splitlines():
        if line.strip():
            key = _line_key(line.strip())
            lines[key] += 1
            shown.setdefault(key, line.strip())
    fields: Counter = Counter()
    summary = meta.get("summary")
    if _present(summary):
        key = _summary_key(summary)
        fields[key] = 1
        shown[key] = f"summary: {clip(_value_text(summary), 200)}"
    tags = meta.get("tags")
    if isinstance(tags, list):
        for tag in _string_list(tags):
            key = _line_key(_TAG_MARK + tag)
            fields[key] = 1
            shown[key] = f"tag: {tag}"
    elif _present(tags):  # ``tags: release`` (one string, as Jekyll and Hugo take it), or any other value
        key = _tags_value_key(tags)
        fields[key] = 1
        shown[key] = f"tags: {clip(_value_text(tags), 200)}"
    return lines, fields, shown


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, str) and not value.strip()) and value != [] and value != {}


def _value_text(value: Any) -> str:
    """A frontmatter value as one comparable line: a string as shown (one line), anything else
    (a number, a list, a date) as its JSON, so ``1984`` and ``"1984"`` are different values."""
    if isinstance(value, str):
        return one_line(value)
    return json.dumps(jsonable(value), sort_keys=True, ensure_ascii=False)


def _summary_key(value: Any) -> str:
    return _line_key(_SUMMARY_MARK + _value_text(value))


def _tags_value_key(value: Any) -> str:
    return _line_key(_TAG_MARK + "\x00value\x00" + _value_text(value))


@dataclass
class HandText:
    """The lines (and summary, tags) of an article a person wrote: those of the file now that are
    not in the text kaas last wrote (``.kaas/written/``; without it, every line), plus those
    recorded as hand-written by earlier runs that are still there. Kept by hash in the manifest
    (``ArticleRecord.hand_lines``), so text merged once stays protected from later model edits."""

    lines: Counter  # body line key -> count
    fields: Counter  # summary/tag key -> 1
    shown: dict[str, str]

    @classmethod
    def of(cls, meta: dict[str, Any], body: str, written: str | None, carried: list[str], edited: bool,
           label: str) -> "HandText":
        lines, fields, shown = _text_lines(meta, body)
        if not edited:
            fresh_lines, fresh_fields = Counter(), Counter()
        elif written is None:
            fresh_lines, fresh_fields = lines, fields  # what kaas wrote is not known: all of it
        else:
            try:
                old_meta, old_body = split_frontmatter(written, label)
            except ArticleFormatError:
                old_meta, old_body = {}, written
            old_lines, old_fields, _ = _text_lines(old_meta, old_body)
            fresh_lines, fresh_fields = lines - old_lines, fields - old_fields
        kept = Counter(carried)
        return cls(fresh_lines | (kept & lines), fresh_fields | (kept & fields), shown)

    def __bool__(self) -> bool:
        return bool(self.lines or self.fields)

    def keys(self) -> list[str]:
        return sorted((self.lines + self.fields).elements())

    def summary_kept(self, summary: Any) -> bool:
        return _present(summary) and _summary_key(summary) in self.fields

    def tags_value_kept(self, tags: Any) -> bool:
        """Whether ``tags`` is a value a person wrote that is not a list (kept as it is)."""
        return not isinstance(tags, list) and _present(tags) and _tags_value_key(tags) in self.fields

    def tags_kept(self, tags: list[str]) -> list[str]:
        return [t for t in tags if _line_key(_TAG_MARK + t) in self.fields]

    def lost_in(self, body: str) -> list[str]:
        """The hand-written lines ``body`` no longer has."""
        now, _, _ = _text_lines({}, body)
        return [self.shown.get(k, k) for k, n in self.lines.items() if now[k] < n]


def guard_body(article: "CurrentArticle", body: str, *, model: bool) -> None:
    """The one check every new body passes before it is written, whatever wrote it (a whole
    rewrite, section edits, the offline writer): raises ``WriteRefused`` when it would lose a
    line a person wrote, a supersession trail line, or (model output) half the article's words."""
    if article.body is None:
        return
    if article.hand:
        lost = article.hand.lost_in(body)
        if lost:
            raise WriteRefused(f"the new text would remove {len(lost)} hand-written line(s), e.g. "
                               f"{clip(lost[0], 120)!r}; hand-written text must be kept word for word")
    new_lines = {line.strip() for line in body.splitlines()}
    trails = [line.strip() for line in article.body.splitlines() if TRAIL_LINE.match(line.strip())]
    dropped = [t for t in trails if t not in new_lines]
    if dropped:
        raise WriteRefused(f"the new text would drop {len(dropped)} supersession trail line(s), e.g. "
                           f"{clip(dropped[0], 120)!r}; trail lines must be kept as they are")
    if model:
        old_words = len(re.findall(r"\w+", article.body))
        new_words = len(re.findall(r"\w+", body))
        if new_words < old_words * SHRINK_LIMIT:
            raise WriteRefused(f"the model's text would cut the article from {old_words} to {new_words} "
                               "words; left unchanged")


# ---------------------------------------------------------------------------------------------
# writers


class OfflineWriter:
    """The article is the newest version of its source, with trail lines for what changed."""

    mode = "offline"
    prompt_version = "offline-1"

    def __init__(self, today: str):
        self.today = today

    async def write(self, article: CurrentArticle, chunk: list[Contribution]) -> Draft:
        body = article.body
        trails = 0
        warnings: list[str] = []
        latest = article.latest_date
        for contribution in chunk:
            source = contribution.source
            fresh = article_body(article.title, source.text)
            if body is None:
                body = fresh
            elif latest and source.date and source.date < latest:
                warnings.append(f"{source.path} ({source.date}) is older than what the article states "
                                f"({latest}); listed as a source, text not applied")
                continue
            else:
                body, added = supersede(body, fresh, date=source.date or self.today, source=source.path)
                trails += added
            if source.date and (latest is None or source.date > latest):
                latest = source.date
        assert body is not None
        if article.body is not None and article.hand_edited and body != article.body:
            # (A hand-edited article that already says what its sources say needs no merge: an
            # article kaas wrote whose record was lost with .kaas/ is kept as it is.)
            raise WriteRefused("edited by hand since kaas last wrote it; offline compile cannot merge "
                               "into hand edits, so it was left unchanged")
        tags = [str(t) for t in article.meta.get("tags") or []] if isinstance(article.meta.get("tags"), list) else []
        for contribution in chunk:
            tags += [t for t in clean_tags(contribution.source.tags) if t not in tags]
        return Draft(lead_summary(body.split("\n", 1)[-1], article.title), tags, body, trails, warnings)


class LLMWriter:
    """The model writes; every output is validated before it reaches the file."""

    mode = "llm"

    def __init__(self, gateway, prompts, meter, today: str):
        self.gateway = gateway
        self.prompts = prompts
        self.meter = meter
        self.today = today
        self.prompt_version = prompts.version(WRITE_PROMPT)

    def choose_mode(self, article: CurrentArticle) -> str:
        if article.body is None:
            return "create"
        if article.hand_edited or estimate_tokens(article.body) > LARGE_ARTICLE_TOKENS:
            return "sections"
        return "rewrite"

    def messages(self, article: CurrentArticle, chunk: list[Contribution]) -> tuple[list[dict], str, bool]:
        mode = self.choose_mode(article)
        text, outline, partial = article.body or "", [], False
        if mode == "sections" and estimate_tokens(text) > LARGE_ARTICLE_TOKENS:
            query = " ".join(c.source.title + " " + c.source.text[:4000] for c in chunk)
            text, outline = relevant_sections(text, query)
            partial = True
        contributions = []
        for contribution in chunk:
            source_text, truncated = cut(contribution.source.text, WRITE_SOURCE_TOKENS // max(1, len(chunk)))
            contributions.append({
                "path": contribution.path, "title": contribution.source.title, "date": contribution.source.date,
                "status": contribution.status, "text": source_text, "truncated": truncated,
            })
        messages = self.prompts.render(
            WRITE_PROMPT, mode=mode,
            article={"path": article.path, "title": article.title, "topic": article.topic,
                     "summary": article.summary, "text": text, "outline": outline,
                     "partial": partial, "hand_edited": article.hand_edited},
            contributions=contributions, today=self.today, summary_limit=SUMMARY_LIMIT,
            rejected=article.rejected,
        )
        return messages, mode, any(c["truncated"] for c in contributions)

    def instructions(self, mode: str, article: CurrentArticle) -> str:
        """kaas's own words in this write prompt, its data left out (llm/plausible.py)."""
        return "\n".join(m["content"] for m in self.prompts.render(
            WRITE_PROMPT, mode=mode,
            article={"path": "", "title": "", "topic": "", "summary": "", "text": "", "outline": [],
                     "partial": False, "hand_edited": article.hand_edited},
            contributions=[], today=self.today, summary_limit=SUMMARY_LIMIT, rejected=article.rejected))

    async def write(self, article: CurrentArticle, chunk: list[Contribution]) -> Draft:
        messages, mode, truncated = self.messages(article, chunk)
        schema = EDITS_SCHEMA if mode == "sections" else BODY_SCHEMA
        reply = await self.gateway.complete_json(messages, schema=schema, schema_name=f"compile_write_{mode}",
                                                 purpose="compile.write", meter=self.meter,
                                                 max_tokens=WRITE_MAX_TOKENS)
        known_sources = {c.path for c in chunk} | set(_string_list(article.meta.get("sources")))
        warnings = ["a source was cut to fit the write budget"] if truncated else []
        if mode == "sections":
            edits = reply.get("edits") or []
            if not isinstance(edits, list) or not edits:
                raise WriteRefused("the model proposed no edit")
            body = apply_edits(article.body or "", edits, article.title)
        else:
            body = clean_body(str(reply.get("body") or ""), article.title)
            if len(re.findall(r"\w+", body)) < 5:
                raise WriteRefused("the model returned an empty article")
        body, dropped = check_trails(body, known_sources, keep=article.body or "")
        if dropped:
            warnings.append(f"removed {dropped} trail line(s) citing a source outside this article")
        instructions = self.instructions(mode, article)
        why = implausible(reply.get("summary"), instructions) if one_line(reply.get("summary")) else None
        if why:
            warnings.append(f"the model's summary {why}; used the lead sentence")
        summary = clean_summary(reply.get("summary"), body, article.title, instructions)
        tags = clean_tags(reply.get("tags"))
        trails_before = len(TRAIL_LINE.findall(article.body or ""))
        return Draft(summary, tags, body, max(0, len(TRAIL_LINE.findall(body)) - trails_before), warnings)


TRAIL_LINE = re.compile(r"^\[Superseded \d{4}-\d{2}-\d{2} by raw/", re.M)


# ---------------------------------------------------------------------------------------------
# validation helpers


def _string_list(value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value if v is not None and str(v).strip()]
    return [str(value)] if value else []


def cut(text: str, tokens: int) -> tuple[str, bool]:
    limit = chars_for_tokens(tokens)
    if len(text) <= limit:
        return text, False
    return text[:limit].rsplit("\n", 1)[0] + "\n\n[...]", True


def clean_body(text: str, title: str) -> str:
    """Model Markdown into an article body: no wrapping fence or frontmatter, ``# title`` first,
    no second H1."""
    text = text.strip()
    fenced = re.match(r"^```(?:markdown|md)?\s*\n(.*)\n```$", text, re.S)
    if fenced:
        text = fenced.group(1).strip()
    if text.startswith("---\n"):
        end = text.find("\n---", 4)
        if end != -1:
            text = text[end + 4:].strip()
    lines = text.splitlines()
    out: list[str] = []
    seen_h1 = False
    for line, in_fence in iter_lines_outside_fences("\n".join(lines)):
        if not in_fence and re.match(r"^#\s", line):
            if not seen_h1 and not any(x.strip() for x in out):
                seen_h1 = True
                continue  # replaced by kaas's own title line below
            line = "#" + line  # a second H1 becomes a section
        out.append(line)
    body = "\n".join(out).strip()
    return f"# {title}\n\n{body}\n" if body else f"# {title}\n"


def clean_summary(value: Any, body: str, title: str, instructions: str = "") -> str:
    """A plausible one-line summary (llm/plausible.py: no echo of ``instructions``, no
    placeholder), else the article's lead sentence."""
    text = one_line(value)
    if not text or implausible(text, instructions):
        text = lead_summary(body.split("\n", 1)[-1], title)
    return clip(text, SUMMARY_LIMIT)


def clean_tags(value: Any) -> list[str]:
    tags: list[str] = []
    for tag in _string_list(value):
        slug = slugify(tag, fallback="")
        if slug and slug not in tags and len(slug) <= 40:
            tags.append(slug)
    return tags[:MAX_TAGS]


def check_trails(body: str, known_sources: set[str], keep: str = "") -> tuple[str, int]:
    """Drop new trail lines that cite a source not feeding this article (a hostile source could
    otherwise fake provenance); keep well-formed ones and those already in ``keep`` (the
    article as it was: its trail lines are kept as they are)."""
    existing = {line.strip() for line in keep.splitlines()} if keep else set()
    out, dropped = [], 0
    for line in body.splitlines():
        stripped = line.strip()
        if stripped.startswith("[Superseded") and stripped not in existing:
            match = TRAIL.match(stripped)
            if match and match.group(2) not in known_sources:
                dropped += 1
                continue
        out.append(line)
    return "\n".join(out).strip() + "\n", dropped


def split_top_sections(body: str) -> list[tuple[str, str]]:
    """(heading, text) at H1/H2 level; heading "" for the part before the first ``##``."""
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line, in_fence in iter_lines_outside_fences(body):
        heading = None if in_fence else atx_heading(line, max_level=2)
        if heading and heading[0] == 2 and heading[1]:
            sections.append((plain_text(heading[1]), [line]))
        else:
            sections[-1][1].append(line)
    return [(h, "\n".join(lines).strip("\n")) for h, lines in sections if "\n".join(lines).strip()]


def relevant_sections(body: str, query: str) -> tuple[str, list[str]]:
    """The lead plus the sections sharing most words with ``query``, and the full outline."""
    sections = split_top_sections(body)
    outline = [h for h, _ in sections if h]
    terms = set(re.findall(r"\w{4,}", query.casefold()))

    def score(text: str) -> int:
        return len(terms & set(re.findall(r"\w{4,}", text.casefold())))

    lead = [s for s in sections if not s[0]]
    rest = sorted((s for s in sections if s[0]), key=lambda s: -score(s[1]))[:MAX_SECTIONS_SHOWN]
    shown = set(id(s) for s in lead + rest)
    text = "\n\n".join(s[1] for s in sections if id(s) in shown)
    return text, outline


def apply_edits(body: str, edits: list[Any], title: str) -> str:
    """Apply section edits to ``body``; sections not named stay byte-for-byte as they were.

    All or nothing: an edit that cannot be applied (not a table, no heading, no text) raises
    ``WriteRefused`` naming it, so the article is held and its sources are retried (the next
    prompt says why), never counted as merged with part of the answer dropped."""
    unusable: list[str] = []
    for number, edit in enumerate(edits, 1):
        if not isinstance(edit, dict):
            unusable.append(f"edit {number} is not an object")
            continue
        if not _edit_heading(edit):
            unusable.append(f"edit {number} has no heading")
        if not str(edit.get("text") or "").strip():
            unusable.append(f"edit {number} has no text")
    if unusable:
        raise WriteRefused(f"the model's section edits cannot all be applied ({'; '.join(unusable[:3])}"
                           f"{'; ...' if len(unusable) > 3 else ''}); every edit needs a heading and text")
    sections = [[h, t] for h, t in split_top_sections(body)]
    if not sections or sections[0][0]:
        sections.insert(0, ["", f"# {title}"])
    for edit in edits:
        heading = _edit_heading(edit)
        text = str(edit.get("text") or "").strip()
        lines = text.splitlines()
        if lines and re.match(r"^#{1,6}\s", lines[0]) and plain_text(lines[0].lstrip("#")).casefold() == heading.casefold():
            text = "\n".join(lines[1:]).strip()
        text = re.sub(r"^(#{1,2})(\s)", r"###\2", text, flags=re.M)  # no H1/H2 inside a section
        action = edit.get("action")
        index = next((i for i, (h, _) in enumerate(sections) if h and h.casefold() == heading.casefold()), None)
        if index is None:
            sections.append([heading, f"## {heading}\n\n{text}"])
        elif action == "replace":
            sections[index][1] = f"## {sections[index][0]}\n\n{text}"
        else:
            sections[index][1] = sections[index][1].rstrip() + "\n\n" + text
    return "\n\n".join(t.strip("\n") for _, t in sections).strip() + "\n"


def _edit_heading(edit: dict[str, Any]) -> str:
    return " ".join(plain_text(str(edit.get("heading") or "")).split()).lstrip("#").strip()


def compose_meta(existing: dict[str, Any], *, title: str, summary: Any, topic: str, tags: Any,
                 sources: list[str], updated: str, access: list[str] | None = None) -> dict[str, Any]:
    """The article's frontmatter: kaas's keys in the documented order, then any other keys a
    person added, in their order. An existing title and topic are never changed, whatever their
    form (``title: 1984`` stays the number a person wrote). ``access``: the rule a *new* article
    is created with (an existing article keeps whatever its frontmatter says)."""
    if _present(existing.get("title")):
        title = existing["title"]
    if _present(existing.get("topic")):
        topic = existing["topic"]
    meta: dict[str, Any] = {
        "title": title,
        "summary": summary,
        "topic": topic,
        "tags": tags,
        "sources": sources,
        "updated": dt.date.fromisoformat(updated),
    }
    if access is not None and "access" not in existing:
        meta["access"] = list(access)
    for key, value in existing.items():
        if key not in meta:
            meta[key] = value
    return meta


# ---------------------------------------------------------------------------------------------
# the per-article unit of work


class ArticleWriter:
    """Runs the jobs of one compile: reads, asks the writer, validates, journals, writes."""

    def __init__(self, wiki_dir: Path, state: CompileState, writer, today: str, dry_run: bool = False):
        self.wiki_dir = wiki_dir
        self.state = state
        self.writer = writer
        self.today = today
        self.dry_run = dry_run

    def current(self, job: ArticleJob) -> tuple[CurrentArticle, str | None]:
        rel, file = safe_wiki_file(self.wiki_dir, job.path)
        if Path(rel).name in RESERVED_NAMES:
            raise UnsafePathError(f"{rel} is a reserved file name")
        if link_on_path(self.wiki_dir, rel):
            # An alias of another file: reading or writing through it would merge this article's
            # sources into the page it points to. Left alone, and said (exit 1) until resolved.
            raise LinkRefused(link_refusal(self.wiki_dir, rel))
        record = self.state.articles.get(rel)
        text = _read(file, rel)
        merged_dates = [self.state.sources[s].date for s in (record.merged if record else {})
                        if s in self.state.sources and self.state.sources[s].date]
        latest = max(merged_dates) if merged_dates else None
        rejected = self.state.rejections.get(rel)
        if text is None:
            if job.target is not None and not job.target.new and job.contributions:
                # Planned as an update of an article that existed; its file is gone: a person
                # deleted it. It is not brought back with only the new material in it.
                raise ArticleChanged("deleted since it was planned (by hand?); not recreated: the source is "
                                     "planned again on the next run")
            return CurrentArticle(rel, job.target.title, job.target.topic, job.target.summary, {}, None, False, None,
                                  rejected), None
        article = parse_article(text, rel)  # malformed frontmatter: ArticleFormatError, the file is left alone
        hand_edited = bool(record and record.hand_edited) or record is None or text_hash(text) != record.written_hash
        written = self.state.written_text(record.written_hash) if record is not None else None
        hand = HandText.of(article.meta, article.body, written, record.hand_lines if record else [],
                           record is None or text_hash(text) != record.written_hash, rel)
        title = article.title if _present(article.meta.get("title")) else job.target.title
        topic = article.topic if _present(article.meta.get("topic")) else job.target.topic
        return CurrentArticle(rel, one_line(title), one_line(topic), article.summary, dict(article.meta),
                              article.body, hand_edited, latest, rejected, hand), text

    def _commit(self, article: CurrentArticle, old_text: str | None, meta: dict[str, Any], body: str,
                merged: dict[str, str], orphaned: bool) -> tuple[bool, str]:
        """Check, keep, journal, then replace the file. Returns (file changed, text now on disk).

        Refused (``WriteRefused``) when the text would not read back as an article (the reader's
        own checks) or the file is no longer what was read (a person is editing it)."""
        text = render_article(meta, body, like=old_text)  # a person's frontmatter stays as written
        try:
            validate_article_text(text, article.path)
        except ArticleFormatError as exc:
            raise WriteRefused(f"the new text is not a valid article ({exc.message})") from None
        record = self.state.articles.get(article.path)
        same = old_text is not None and _without_updated(old_text) == _without_updated(text)
        if same:
            text = old_text  # keep the old date: nothing changed
        hand_lines = article.hand.keys() if article.hand else []
        new_record = ArticleRecord(article.path, text_hash(text), merged, article.hand_edited, orphaned, hand_lines)
        if same and record is not None and record.to_json() == new_record.to_json():
            return False, text
        _, file = safe_wiki_file(self.wiki_dir, article.path)
        try:
            now = _read(file, article.path)
        except ArticleFormatError:
            now = "\x00unreadable"
        if now != old_text:
            what = "deleted" if now is None else "created" if old_text is None else "changed"
            raise ArticleChanged(f"{what} on disk while kaas was writing it (a hand edit?); left as it is, "
                                 "the new material is merged on the next run")
        self.state.keep_written(text)
        self.state.record_article(new_record)
        if not same:
            try:
                write_article_text(self.wiki_dir, article.path, text)
            except UnsafePathError as exc:  # a link put in its place since it was read
                if record is not None:
                    self.state.record_article(record)
                else:
                    self.state.drop_article(article.path)
                raise LinkRefused(exc.message) from None
        return not same, text

    async def run(self, job: ArticleJob) -> ArticleOutcome:
        try:
            outcome = await self._run(job)
        except WriteRefused as exc:
            if exc.tell_model and getattr(self.writer, "mode", "") == "llm":
                self.state.set_rejection(job.path, str(exc))
            return ArticleOutcome(job.path, "held", str(exc))
        except LLMError as exc:
            if exc.code in ("unknown_model", "missing_api_key", "llm_auth", "llm_unreachable"):
                raise
            return ArticleOutcome(job.path, "failed", exc.message)
        except KaasError as exc:
            return ArticleOutcome(job.path, "failed", exc.message)
        if job.path in self.state.rejections:
            self.state.set_rejection(job.path, None)
        return outcome

    async def _run(self, job: ArticleJob) -> ArticleOutcome:
        article, old_text = self.current(job)
        record = self.state.articles.get(article.path)
        merged = dict(record.merged) if record else {}
        existed = article.body is not None
        outcome = ArticleOutcome(article.path, "unchanged")
        wrote = False
        model = getattr(self.writer, "mode", "") == "llm"
        for chunk in _chunks(sorted(job.contributions, key=lambda c: (c.source.date or "", c.path))):
            draft = await self.writer.write(article, chunk)
            guard_body(article, draft.body, model=model)
            summary, tags = draft.summary, draft.tags
            if article.hand:  # a summary or tag a person wrote is theirs, whatever its form
                written_summary = article.meta.get("summary")
                if article.hand.summary_kept(written_summary):
                    summary = written_summary
                written_tags = article.meta.get("tags")
                if article.hand.tags_value_kept(written_tags):
                    tags = written_tags
                else:
                    kept = article.hand.tags_kept(_string_list(written_tags) if isinstance(written_tags, list) else [])
                    tags = kept + [t for t in tags if t not in kept]
            sources = _string_list(article.meta.get("sources"))
            for contribution in chunk:
                if contribution.path not in sources:
                    sources.append(contribution.path)
                merged[contribution.path] = contribution.source.checksum
            for path, checksum in job.adopt.items():
                if path not in sources:
                    sources.append(path)
                merged[path] = checksum
            sources = sorted(s for s in sources if s not in job.detach)
            for path in job.detach:
                merged.pop(path, None)
            meta = compose_meta(article.meta, title=article.title, summary=summary, topic=article.topic,
                                tags=tags, sources=sources, updated=self.today,
                                access=job.target.access if article.body is None else None)
            changed, old_text = self._commit(article, old_text, meta, draft.body, dict(merged), orphaned=not sources)
            wrote = wrote or changed
            outcome.merged.extend(c.path for c in chunk)
            outcome.trails += draft.trails
            outcome.warnings.extend(draft.warnings)
            article = CurrentArticle(article.path, article.title, article.topic, summary, meta,
                                     draft.body, article.hand_edited, article.latest_date, None, article.hand)
            dates = [c.source.date for c in chunk if c.source.date]
            if dates and (article.latest_date is None or max(dates) > article.latest_date):
                article.latest_date = max(dates)
        if (job.detach or job.adopt) and not job.contributions:
            return self._detach(job, article, old_text, merged)
        if wrote:
            outcome.action = "updated" if existed else "created"
        return outcome

    def _detach(self, job: ArticleJob, article: CurrentArticle, old_text: str | None,
                merged: dict[str, str]) -> ArticleOutcome:
        """Remove deleted (or no longer planned) sources from ``sources:``, add renamed ones
        (``job.adopt``); flag an orphan."""
        if article.body is None:
            if article.path in self.state.articles:
                self.state.drop_article(article.path)
            return ArticleOutcome(article.path, "unchanged", "file no longer exists")
        sources = [s for s in _string_list(article.meta.get("sources")) if s not in job.detach]
        for path in job.detach:
            merged.pop(path, None)
        for path, checksum in job.adopt.items():
            if path not in sources:
                sources.append(path)
            merged[path] = checksum
        meta = dict(article.meta)
        meta["sources"] = sources
        orphaned = not sources
        wrote, _ = self._commit(article, old_text, meta, article.body, merged, orphaned)
        reason = "no source left: flagged, not deleted" if orphaned else ""
        return ArticleOutcome(article.path, "detached" if wrote else "unchanged", reason,
                              orphaned=orphaned)


def _read(file: Path, rel: str) -> str | None:
    """An article's text as the reader reads it (size limit, UTF-8), None when there is none."""
    try:
        return read_article_text(file, rel)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise ArticleFormatError(f"{rel}: unreadable ({exc.strerror or exc})") from None


def _without_updated(text: str) -> str:
    return re.sub(r"^updated: .*$", "", text, count=1, flags=re.M)


def _chunks(contributions: list[Contribution]) -> list[list[Contribution]]:
    """Batches of contributions whose text fits one write call."""
    chunks: list[list[Contribution]] = []
    size = 0
    for contribution in contributions:
        tokens = min(estimate_tokens(contribution.source.text), WRITE_SOURCE_TOKENS)
        if chunks and size + tokens <= WRITE_SOURCE_TOKENS and len(chunks[-1]) < 4:
            chunks[-1].append(contribution)
            size += tokens
        else:
            chunks.append([contribution])
            size = tokens
    return chunks
