"""Planners: decide, per source, which articles it updates and which it creates.

Two planners share one shape: ``OfflinePlanner`` (deterministic: one article per source, topic
from the ``raw/`` subfolder, title from the document) and ``LLMPlanner`` (the model, asked with a
JSON schema at temperature 0 and shown a *bounded* catalog: the candidates most related to the
source by BM25 over titles and summaries, plus the articles the source fed before).

Whatever the model answers goes through ``resolve_plan``: paths are rebuilt from validated slugs
(never taken from the source), updates must name an article that was offered, and a new title
that is near-identical to an existing or already planned one becomes an update of that article
instead of a twin. The stage that runs them is ``plan.plan``.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath

from kb_ai.compile.content_check import UPDATE_MIN_SHARE, affinity, term_frequencies
from kb_ai.compile.ingest import Source
from kb_ai.compile.plan_catalog import PlanCatalog, twin_key
from kb_ai.compile.records import PlanTarget
from kb_ai.errors import UnsafePathError
from kb_ai.llm.plausible import implausible, one_line
from kb_ai.llm.tokens import chars_for_tokens
from kb_ai.store.access import derived_access
from kb_ai.store.articles import RESERVED_NAMES, SUMMARY_LIMIT
from kb_ai.store.catalog import CatalogEntry
from kb_ai.store.markdown_text import first_sentence
from kb_ai.store.sentences import clip
from kb_ai.store.paths import normalize_wiki_path, slugify, topic_folder
from kb_ai.store.words import title_key

PLAN_PROMPT = "compile_plan"
MAX_UPDATES = 4
MAX_NEW = 3
PLAN_SOURCE_TOKENS = 2_500  # excerpt of the source shown to the planner
PLAN_MAX_TOKENS = 1_000  # a plan is a few lines of JSON; bounds a rambling model
MAX_TOPIC_LENGTH = 40
MAX_TITLE_LENGTH = 120

_SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")

# Every limit the plan prompt states is in the schema (a server that constrains its output to
# the schema cannot loop past it) and nothing is required that a right answer may leave out: no
# candidate fits (no update) or every subject has its article (no new one).
PLAN_SCHEMA = {
    "type": "object",
    "properties": {
        "updates": {
            "type": "array",
            "maxItems": MAX_UPDATES,
            "items": {
                "type": "object",
                "properties": {"path": {"type": "string", "maxLength": 300},
                               "reason": {"type": "string", "maxLength": 200}},
                "required": ["path"],
            },
        },
        "creates": {
            "type": "array",
            "maxItems": MAX_NEW,
            "items": {
                "type": "object",
                "properties": {
                    "topic": {"type": "string", "maxLength": MAX_TOPIC_LENGTH},
                    "slug": {"type": "string", "maxLength": MAX_TITLE_LENGTH},
                    "title": {"type": "string", "maxLength": MAX_TITLE_LENGTH},
                    "summary": {"type": "string", "maxLength": SUMMARY_LIMIT},
                },
                "required": ["topic", "slug", "title"],
            },
        },
    },
    "required": [],
}



# ---------------------------------------------------------------------------------------------
# offline planner


def offline_target(source: Source) -> PlanTarget:
    """One article per source: topic from the folder, slug from the title."""
    topic = source.topic_hint
    slug = source_slug(source)
    if f"{slug}.md" in RESERVED_NAMES:
        slug = f"{slug}-page"
    summary = first_sentence(source.text, SUMMARY_LIMIT) or source.title
    return PlanTarget(path=f"{topic}/{slug}.md", title=source.title, summary=summary, topic=topic, new=True)


def source_slug(source: Source) -> str:
    """The slug of a source's article: from its title; from its file name when the title has no
    Latin letters (Cyrillic, CJK: ``slugify`` keeps ASCII only); else ``untitled-`` and a short
    hash of the source's path, stable and distinct per source (not ``untitled-2``, ``-3`` in
    the order the sources happen to come)."""
    slug = slugify(source.title, fallback="") or slugify(PurePosixPath(source.path).stem, fallback="")
    return slug or f"untitled-{hashlib.sha256(source.path.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


class OfflinePlanner:
    """Deterministic structuring: no model, no cost."""

    mode = "offline"
    prompt_version = "offline-1"

    async def propose(self, source: Source, catalog: PlanCatalog, previous: list[str]) -> None:
        return None

    def resolve(self, proposal: None, source: Source, catalog: PlanCatalog, previous: list[str]) -> "PlanResult":
        target = offline_target(source)
        # A changed source keeps its article. A title collision with another source's article gets
        # a distinct slug rather than a merge: offline there is no model to merge two texts.
        kept = [p for p in previous if p in catalog.items]
        if kept:
            return PlanResult([replace(PlanTarget.update_of(catalog.items[kept[0]]), summary=target.summary)])
        slug, folder = source_slug(source), slugify(PurePosixPath(source.path).parent.name, fallback="")
        # Taken by another subject: the name of its own folder first ("docs/cli-overview.md"
        # beside "docs/overview.md"), then a number.
        own_folder = [f"{target.topic}/{folder}-{slug}.md"] if folder and folder != target.topic else []
        for path in itertools.chain([target.path], own_folder, (f"{target.topic}/{slug}-{n}.md" for n in itertools.count(2))):
            if path not in catalog.items:
                target.path = path
                return PlanResult([target])
            if same_subject(catalog, path, source):
                return PlanResult([PlanTarget.update_of(catalog.items[path], reason=SAME_TITLE)],
                                  notes=[f"same title as the other source(s) of {path} in its folder: one article"])
        raise AssertionError("unreachable")


SAME_TITLE = "same title"  # a PlanTarget's reason: the source joins the article of its title
_MARKUP_TITLE = re.compile(r"\s*(?:[.:<{\[!#|>=~`*_-]|.*::)")  # markup read as a title


def same_subject(catalog: PlanCatalog, path: str, source: Source) -> bool:
    """THE offline identity rule for a source whose article path is taken: it is about the same
    subject as article ``path`` (and joins it, a section each, or a supersession trail for a
    later-dated revision) when the article has the same title (``title_key``: case, accents,
    punctuation ignored) and is made from a source in the same raw/ folder. The same title in
    another folder (``api/overview.md``, ``cli/overview.md``) is another subject."""
    entry = catalog.items[path]
    if _MARKUP_TITLE.match(source.title):
        return False  # ".. currentmodule:: flask", ":orphan:": a reader's misreading, not a title to share
    return (bool(title_key(source.title)) and title_key(entry.title) == title_key(source.title)
            and PurePosixPath(source.path).parent.as_posix() in catalog.source_folders.get(path, ()))


# ---------------------------------------------------------------------------------------------
# LLM planner


@dataclass
class PlanResult:
    targets: list[PlanTarget]
    rejected: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def source_excerpt(source: Source, tokens: int = PLAN_SOURCE_TOKENS) -> tuple[str, bool]:
    """The beginning of the source plus the outline of the rest, within ``tokens``."""
    limit = chars_for_tokens(tokens)
    text = source.text
    if len(text) <= limit:
        return text, False
    head = text[: int(limit * 0.75)].rsplit("\n", 1)[0]
    rest_headings = [line for line in text[len(head):].splitlines() if re.match(r"^#{1,6}\s", line)]
    outline = "\n".join(rest_headings)[: limit - len(head)]
    return f"{head}\n\n[...]\n\nLater headings:\n{outline}".rstrip(), True


@dataclass
class PlanView:
    """What one plan prompt shows of the wiki, and the access a page written from it must have."""

    candidates: list[CatalogEntry]
    topics: list[str]
    access: tuple[str, ...] | None  # derived_access of every article shown; None: all public


def plan_view(catalog: PlanCatalog, query: str, title: str, previous: list[str]) -> PlanView:
    """THE rule for what a compile prompt may show of the wiki (the write prompt shows only the
    article being written and the sources, so this is the only place that chooses).

    A model may copy anything it is shown into what it writes, and what it writes here (the title
    and summary of a new article) lands in a page. So: an article with an ``access`` rule is not
    shown, unless the source fed it before (``previous``: the planner must be able to keep routing
    the source there); the topics shown are those of public articles and of the articles shown; and
    ``access`` is the rule of everything shown (``store.access.derived_access``), which every new
    article this prompt plans is created with. Routing a source *into* a restricted article (an
    update, a twin merge) needs no showing and is fine: text flows into a more restricted page."""
    hidden = catalog.restricted - set(previous) if catalog.restricted else frozenset()
    candidates = catalog.related(query, exclude=hidden)
    shown = {c.path for c in candidates}
    for path in previous:
        if path in catalog.items and path not in shown:
            candidates.append(catalog.items[path])
            shown.add(path)
    twin = catalog.twin_of(title)
    if twin and twin not in shown and twin not in hidden:
        candidates.append(catalog.items[twin])
    topics = sorted(catalog.public_topics | {c.topic for c in candidates})[:60]
    return PlanView(candidates, topics, derived_access([c.access for c in candidates]))


class LLMPlanner:
    """Asks the model for a plan (JSON schema, temperature 0) and validates it."""

    mode = "llm"

    def __init__(self, gateway, prompts, meter):
        self.gateway = gateway
        self.prompts = prompts
        self.meter = meter
        self.prompt_version = prompts.version(PLAN_PROMPT)
        # kaas's own words in the plan prompt (its data left out): a title or summary that
        # repeats them is an echo, not a plan (llm/plausible.py).
        self.instructions = "\n".join(m["content"] for m in prompts.render(
            PLAN_PROMPT, source={"path": "", "title": "", "date": None, "topic_hint": "", "text": "",
                                 "truncated": False},
            candidates=[], previous=[], topics=[], max_new=MAX_NEW, max_updates=MAX_UPDATES))

    frequency = None  # term -> documents of this compile using it (``use_corpus``)
    documents = 0

    def use_corpus(self, texts: list[str]) -> None:
        """The documents of this compile: an update's terms are weighted by how few use them."""
        self.frequency = term_frequencies(texts)
        self.documents = len(texts)

    def messages(self, source: Source, catalog: PlanCatalog, previous: list[str]) -> tuple[list[dict], PlanView]:
        excerpt, truncated = source_excerpt(source)
        view = plan_view(catalog, f"{source.title}\n{excerpt}", source.title, previous)
        messages = self.prompts.render(
            PLAN_PROMPT,
            source={"path": source.path, "title": source.title, "date": source.date,
                    "topic_hint": source.topic_hint, "text": excerpt, "truncated": truncated},
            candidates=[c.record("path", "title", "summary") for c in view.candidates],
            previous=previous,
            topics=view.topics,
            max_new=MAX_NEW,
            max_updates=MAX_UPDATES,
        )
        return messages, view

    async def propose(self, source: Source, catalog: PlanCatalog, previous: list[str]) -> "Proposal":
        """The model's raw plan. Resolved later, in path order, against the catalog as it then is."""
        messages, view = self.messages(source, catalog, previous)
        raw = await self.gateway.complete_json(messages, schema=PLAN_SCHEMA, schema_name="compile_plan",
                                               purpose="compile.plan", meter=self.meter,
                                               max_tokens=PLAN_MAX_TOKENS, stream=True)
        return Proposal(raw, {c.path for c in view.candidates} | set(previous), view.access)

    def resolve(self, proposal: "Proposal", source: Source, catalog: PlanCatalog, previous: list[str]) -> PlanResult:
        return resolve_plan(proposal.raw, source, catalog, proposal.offered, access=proposal.access,
                            instructions=self.instructions, previous=previous,
                            affinity=lambda text: affinity(source, text, self.frequency, self.documents))


@dataclass
class Proposal:
    raw: object
    offered: set[str]
    access: tuple[str, ...] | None = None  # of what the prompt showed: every new article gets it


def _clean_slug(value: object, what: str) -> str:
    """A model-supplied topic or slug: tolerated when only case/spaces differ, else refused."""
    if not isinstance(value, str):
        raise UnsafePathError(f"{what} is not a string")
    text = value.strip()
    if not text or any(ch in text for ch in "/\\.") or any(ord(ch) < 32 for ch in text):
        raise UnsafePathError(f"{what} {value!r} is not a slug")
    slug = slugify(text, fallback="")
    if not slug or not _SLUG.match(slug):
        raise UnsafePathError(f"{what} {value!r} is not a slug")
    return slug


def resolve_plan(raw: object, source: Source, catalog: PlanCatalog, offered: set[str], *,
                 access: tuple[str, ...] | None = None, instructions: str = "", previous: list[str] = (),
                 affinity=None) -> PlanResult:
    """Validate a model's plan into safe targets; anything unusable is rejected with a reason.
    New articles get ``access`` (see ``plan_view``); an implausible title (``llm/plausible.py``)
    falls back to the source's own title, an implausible summary to the source's first sentence.
    ``affinity(article text)``: how much of an article's title, summary and topic the source
    shares (``content_check.share``); an update of an article the source did not feed before
    that shares less than ``UPDATE_MIN_SHARE`` is refused (a plan with no target left gets the
    offline one: a new article)."""
    result = PlanResult([])
    if not isinstance(raw, dict):
        raw = {}
    chosen: dict[str, PlanTarget] = {}
    for item in (raw.get("updates") or [])[: MAX_UPDATES * 2]:
        _resolve_update(item, catalog, offered, chosen, result)
    for path in [p for p, t in chosen.items() if affinity is not None and p not in previous]:
        entry = catalog.items[path]
        score = affinity(f"{entry.title} {entry.summary} {entry.topic}")
        if score < UPDATE_MIN_SHARE:
            del chosen[path]
            result.rejected.append(f"update {path}: the source shares too little with it ({score:.2f} of its "
                                   f"title, summary and topic; {UPDATE_MIN_SHARE} needed); not merged into it")
    new_keys: set[str] = set()
    fallback_summary = first_sentence(source.text, SUMMARY_LIMIT) or source.title
    for item in (raw.get("creates") or [])[: MAX_NEW * 2]:
        if not isinstance(item, dict):
            continue
        target = _resolve_create(item, source, catalog, result, instructions, fallback_summary)
        if target is None:
            continue
        twin = target.path if target.path in catalog.items else catalog.twin_of(target.title)
        if twin is not None:
            if twin not in chosen:
                chosen[twin] = PlanTarget.update_of(catalog.items[twin],
                                                    reason=f"merged: planned new article {target.title!r} matches it")
                result.notes.append(f"new article {target.title!r} merged into {twin} (near-identical title)")
            continue
        key = twin_key(target.title) or target.path
        if target.path in chosen or len(new_keys) >= MAX_NEW or key in new_keys:
            continue  # (two new articles with one title would be twins)
        new_keys.add(key)
        target.access = list(access) if access is not None else None
        chosen[target.path] = target
    result.targets = list(chosen.values())
    if not result.targets:
        fallback = offline_target(source)
        twin = fallback.path if fallback.path in catalog.items else catalog.twin_of(fallback.title)
        if twin is not None:
            fallback = PlanTarget.update_of(catalog.items[twin])
        result.targets = [fallback]
        result.notes.append("the model's plan had no usable target; used the offline plan (one article)")
    return result


def _resolve_update(item: object, catalog: PlanCatalog, offered: set[str], chosen: dict[str, PlanTarget],
                    result: PlanResult) -> None:
    """One ``updates`` entry: an article that was offered, at most ``MAX_UPDATES`` of them."""
    path_value = item.get("path") if isinstance(item, dict) else None
    try:
        path = normalize_wiki_path(str(path_value))
    except UnsafePathError as exc:
        result.rejected.append(f"update {path_value!r}: {exc.message}")
        return
    if path not in offered or path not in catalog.items:
        result.rejected.append(f"update {path_value!r}: not one of the articles offered")
        return
    if path in chosen or len([t for t in chosen.values() if not t.new]) >= MAX_UPDATES:
        return
    chosen[path] = PlanTarget.update_of(catalog.items[path], reason=clip(str(item.get("reason") or ""), 200))


def _resolve_create(item: dict, source: Source, catalog: PlanCatalog, result: PlanResult, instructions: str,
                    fallback_summary: str) -> PlanTarget | None:
    """One ``creates`` entry as a new target (a safe path, a plausible title and summary), or
    None when it cannot be used (the reason is in ``result.rejected``)."""
    try:
        topic = topic_folder(_clean_slug(item.get("topic"), "topic")[:MAX_TOPIC_LENGTH].strip("-"))
        slug = _clean_slug(item.get("slug"), "slug")
        if f"{slug}.md" in RESERVED_NAMES:
            raise UnsafePathError(f"slug {slug!r} is a reserved name")
        path = normalize_wiki_path(f"{topic}/{slug}.md")
    except UnsafePathError as exc:
        result.rejected.append(f"create: {exc.message}")
        return None
    title = clip(one_line(item.get("title")), MAX_TITLE_LENGTH)
    if not title:
        result.rejected.append(f"create {path}: empty title")
        return None
    why = implausible(title, instructions)
    if why:
        result.rejected.append(f"create {path}: title {why}; used the source's title")
        title = clip(source.title, MAX_TITLE_LENGTH)
    summary = clip(one_line(item.get("summary")), SUMMARY_LIMIT)
    if summary and (why := implausible(summary, instructions)):
        result.rejected.append(f"create {path}: summary {why}; used the source's first sentence")
        summary = fallback_summary
    return PlanTarget(path, title, summary or title, topic, new=True)
