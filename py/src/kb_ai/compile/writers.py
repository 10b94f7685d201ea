"""Writers: the new text of one article from the sources that feed it.

``OfflineWriter`` (the source itself, cleaned, with supersession trail lines by diff) or
``LLMWriter`` (the model rewrites small articles whole and edits only the affected sections of
large or hand-edited ones; ``apply_edits`` is all or nothing). Every new body passes
``guard_body``, whatever wrote it. ``write.ArticleWriter`` runs them, one article at a time."""


import re
from dataclasses import dataclass, field
from typing import Any

from kb_ai.compile.content_check import summary_contradicts
from kb_ai.compile.hand_text import HandText, _string_list, hand_conflict, merge_around_hand, merge_base
from kb_ai.compile.ingest import Source
from kb_ai.compile.offline import (
    TRAIL,
    article_body,
    hand_note,
    lead_summary,
    section_of,
    source_heading,
    source_sections,
    supersede,
    trail_lines,
)
from kb_ai.llm.plausible import implausible, one_line
from kb_ai.llm.tokens import chars_for_tokens, estimate_tokens
from kb_ai.offline.text_ranking import by_shared_terms
from kb_ai.store.articles import MAX_QUESTIONS, SUMMARY_LIMIT, clean_summary, questions_of
from kb_ai.store.markdown_text import iter_lines_outside_fences, plain_text, split_sections
from kb_ai.store.sentences import clip
from kb_ai.store.paths import slugify

WRITE_PROMPT = "compile_write"
WRITE_SOURCE_TOKENS = 8_000  # source text per write call; a longer source is cut (and reported)
LARGE_ARTICLE_TOKENS = 2_500  # above this an article is edited by section, not rewritten whole
MAX_SECTIONS_SHOWN = 4
MAX_TAGS = 8
MAX_MODEL_TAGS = 6  # the write prompt asks for "up to 6"; the schema says so too
WRITE_MAX_TOKENS = 6_000  # one article; bounds a rambling model
SHRINK_LIMIT = 0.5  # a whole rewrite may not drop more than half of an article's words

# The limits the write prompt states (summary length, number of tags) are in its schemas.
_SUMMARY = {"type": "string", "maxLength": SUMMARY_LIMIT}
_TAGS = {"type": "array", "maxItems": MAX_MODEL_TAGS, "items": {"type": "string", "maxLength": 40}}
# Questions the article answers, in a reader's words (frontmatter ``questions:``): searched by the
# offline keyword index, never shown in the catalog (store/articles.py: questions_of).
QUESTIONS_SCHEMA = {"type": "array", "items": {"type": "string"}, "maxItems": MAX_QUESTIONS}
BODY_SCHEMA = {
    "type": "object",
    "properties": {
        "summary": _SUMMARY,
        "tags": _TAGS,
        "questions": QUESTIONS_SCHEMA,
        "body": {"type": "string"},
    },
    "required": ["summary", "body"],
}
EDITS_SCHEMA = {
    "type": "object",
    "properties": {
        "summary": _SUMMARY,
        "tags": _TAGS,
        "questions": QUESTIONS_SCHEMA,
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
    join: bool = False  # a source with the article's title joining it (``planners.same_subject``)
    was: str | None = None  # the path it had before a rename (``relink.find_renames``)

    @property
    def path(self) -> str:
        return self.source.path


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
    # Sources listed in ``sources:`` that are copies dedup dropped (their text is their original's):
    # they list the article but have no part of their own in it.
    copies: frozenset[str] = frozenset()


@dataclass
class Draft:
    summary: str
    tags: list[str]
    body: str
    trails: int = 0
    warnings: list[str] = field(default_factory=list)
    questions: list[str] | None = None  # None: the writer proposes none (the article keeps its own)


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
    trails = trail_lines(article.body)
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
        # A hand-edited article: the new source text is merged into what kaas wrote, then that
        # merged around the person's edits (``hand_text.merge_around_hand``).
        hand = article.body is not None and article.hand_edited
        body = merge_base(article.hand, article.body) if hand else article.body
        trails = 0
        warnings: list[str] = []
        latest = article.latest_date
        listed = _string_list(article.meta.get("sources"))
        for contribution in chunk:
            source = contribution.source
            fresh = article_body(article.title, source.text)
            others = [s for s in listed if s != source.path and s not in article.copies]
            if body is None:
                body = fresh
            elif latest and source.date and source.date < latest:
                warnings.append(f"{source.path} ({source.date}) is older than what the article states "
                                f"({latest}); listed as a source, text not applied")
                continue
            elif others and contribution.status != "revision" and \
                    not (contribution.join and source.date and latest and source.date > latest):
                # an article of several sources: this source's own part (its section, or the
                # lead for the source that made it); a new one of the same title adds a section
                body, added, _ = _into_section(body, article.title, source, others, self.today, contribution.was)
                trails += added
            else:  # the article's one source, changed, or a later-dated revision: trail lines
                body, added = supersede(body, fresh, date=source.date or self.today, source=source.path)
                trails += added
            if source.path not in listed:
                listed.append(source.path)
            if source.date and (latest is None or source.date > latest):
                latest = source.date
        assert body is not None
        if hand:
            source = chunk[-1].source
            body, conflicts = merge_around_hand(merge_base(article.hand, article.body), article.body, body,
                                                article.hand, hand_note(source.path, source.date or self.today))
            if conflicts:
                warnings.append(hand_conflict(source.path, conflicts))
        tags = [str(t) for t in article.meta.get("tags") or []] if isinstance(article.meta.get("tags"), list) else []
        for contribution in chunk:
            tags += [t for t in clean_tags(contribution.source.tags) if t not in tags]
        return Draft(lead_summary(body.split("\n", 1)[-1], article.title), tags, body, trails, warnings)


def _into_section(body: str, title: str, source: Source, others: list[str], today: str,
                  was: str | None = None) -> tuple[str, int, bool]:
    """``body`` of an article several sources of one title feed, with ``source``'s text in its
    own ``##`` section (added at the end the first time; later versions superseded within it) or,
    for the source that made the article, in the lead before those sections. ``was``: the path
    the source had before a rename (its section is found under that name). Returns (body, trail
    lines added, whether text already there changed)."""
    headings = {source_heading(title, s): s for s in others if s != was}
    headings[source_heading(title, source.path)] = source.path
    if was:
        headings.setdefault(source_heading(title, was), source.path)
    lead, sections = source_sections(body, headings)
    section = section_of(title, source.path, source.text)
    if source.path in sections:
        old = sections[source.path]
        new, added = supersede(old, section, date=source.date or today, source=source.path)
        return body.replace(old, new.strip("\n"), 1), added, True
    if source_is_lead(lead, sections, [s for s in others if s != was]):
        new, added = supersede(lead, article_body(title, source.text), date=source.date or today, source=source.path)
        return new.strip("\n") + body[len(lead):], added, True
    return body.rstrip("\n") + "\n\n" + section + "\n", 0, False


def renamed_section(body: str, title: str, old: str, new: str) -> str:
    """``body`` with the ``##`` heading of source ``old``'s section named for ``new`` (a source
    renamed in raw/ keeps its section, under its new name)."""
    before, after = source_heading(title, old), source_heading(title, new)
    if before == after:
        return body
    lines = body.split("\n")
    for i, line in enumerate(lines):
        if line.rstrip() == f"## {before}":
            lines[i] = f"## {after}"
            return "\n".join(lines)
    return body


def source_is_lead(lead: str, sections: dict[str, str], others: list[str]) -> bool:
    """Whether a source without a section of its own is the one whose text is the lead: every
    other source of the article has its section (the lead's source is the one left)."""
    return all(s in sections for s in others)


class LLMWriter:
    """The model writes; every output is validated before it reaches the file."""

    mode = "llm"
    related = None  # (article, chunk) -> pages it may link (compile/related.py), set by the pipeline

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
            rejected=article.rejected, related=self.related(article, chunk) if self.related else [],
        )
        return messages, mode, any(c["truncated"] for c in contributions)

    def instructions(self, mode: str, article: CurrentArticle) -> str:
        """kaas's own words in this write prompt, its data left out (llm/plausible.py)."""
        return "\n".join(m["content"] for m in self.prompts.render(
            WRITE_PROMPT, mode=mode,
            article={"path": "", "title": "", "topic": "", "summary": "", "text": "", "outline": [],
                     "partial": False, "hand_edited": article.hand_edited},
            contributions=[], today=self.today, summary_limit=SUMMARY_LIMIT, rejected=article.rejected, related=[]))

    async def write(self, article: CurrentArticle, chunk: list[Contribution]) -> Draft:
        messages, mode, truncated = self.messages(article, chunk)
        schema = EDITS_SCHEMA if mode == "sections" else BODY_SCHEMA
        reply = await self.gateway.complete_json(messages, schema=schema, schema_name=f"compile_write_{mode}",
                                                 purpose="compile.write", meter=self.meter,
                                                 max_tokens=WRITE_MAX_TOKENS, stream=True)
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
        summary = summary_or_lead(reply.get("summary"), body, article.title, instructions)
        wrong = summary_contradicts(summary, body)
        if wrong:  # a summary saying $9 of a page that says $12
            warnings.append(f"the model's summary states {', '.join(repr(w) for w in wrong[:3])}, which the "
                            "article does not; used the lead sentence")
            summary = clip(lead_summary(body.split("\n", 1)[-1], article.title), SUMMARY_LIMIT)
        tags = clean_tags(reply.get("tags"))
        trails_before = len(trail_lines(article.body or ""))
        return Draft(summary, tags, body, max(0, len(trail_lines(body)) - trails_before), warnings,
                     clean_questions(reply.get("questions"), instructions))


# ---------------------------------------------------------------------------------------------
# validation helpers


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


def summary_or_lead(value: Any, body: str, title: str, instructions: str = "") -> str:
    """The model's summary as one plain line (``store.articles.clean_summary``) when it is
    plausible (llm/plausible.py: no echo of ``instructions``, no placeholder), else the article's
    lead sentence."""
    text = clean_summary(value)
    if text is None or implausible(text, instructions):
        text = clip(lead_summary(body.split("\n", 1)[-1], title), SUMMARY_LIMIT)
    return text


def clean_questions(value: Any, instructions: str = "") -> list[str] | None:
    """The model's ``questions`` as frontmatter items (``store.articles.questions_of``: one line
    each, at most ``MAX_QUESTIONS``), less any that is not plausible text (an echo of the prompt, a
    placeholder: llm/plausible.py); None when it gave none."""
    if not isinstance(value, list):
        return None
    kept = [q for q in questions_of({"questions": value}) if not implausible(q, instructions)]
    return kept or None


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


def relevant_sections(body: str, query: str) -> tuple[str, list[str]]:
    """The lead plus the sections sharing most words with ``query``, and the full outline."""
    sections = [(s.heading, s.text) for s in split_sections(body, level=2)]
    outline = [h for h, _ in sections if h]
    lead = [s for s in sections if not s[0]]
    headed = [s for s in sections if s[0]]
    rest = [headed[i] for i in by_shared_terms(query, [s[1] for s in headed])[:MAX_SECTIONS_SHOWN]]
    shown = set(id(s) for s in lead + rest)
    text = "\n\n".join(s[1] for s in sections if id(s) in shown)
    return text, outline


def apply_edits(body: str, edits: list[Any], title: str) -> str:
    """Apply section edits to ``body``; sections not named stay byte-for-byte as they were.

    All or nothing: an edit that cannot be applied (not a table, no heading, no text) raises
    ``WriteRefused`` naming it, so the article is held and its sources are retried (the next
    prompt says why), never counted as merged with part of the answer dropped."""
    unusable = _unusable_edits(edits)
    if unusable:
        raise WriteRefused(f"the model's section edits cannot all be applied ({'; '.join(unusable[:3])}"
                           f"{'; ...' if len(unusable) > 3 else ''}); every edit needs a heading and text")
    sections = [[s.heading, s.text] for s in split_sections(body, level=2)]
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


def _unusable_edits(edits: list[Any]) -> list[str]:
    """Why each edit that cannot be applied cannot (all or nothing: see ``apply_edits``)."""
    unusable: list[str] = []
    for number, edit in enumerate(edits, 1):
        if not isinstance(edit, dict):
            unusable.append(f"edit {number} is not an object")
            continue
        if not _edit_heading(edit):
            unusable.append(f"edit {number} has no heading")
        if not str(edit.get("text") or "").strip():
            unusable.append(f"edit {number} has no text")
    return unusable


def _edit_heading(edit: dict[str, Any]) -> str:
    return " ".join(plain_text(str(edit.get("heading") or "")).split()).lstrip("#").strip()


