"""``kaas lint --contradictions``: ask the model whether two related articles contradict each other.

Comparing every pair is quadratic in calls and money, so the check takes a bounded number of
pairs, the likeliest first: articles that share a source (most shared first), then articles of the
same topic whose words overlap most. One call per pair, a JSON reply validated against a schema;
what the model reports is a warning for a person to read, never an automatic edit.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

from kb_ai.config import Settings
from kb_ai.errors import LLMError
from kb_ai.llm.usage import UsageMeter
from kb_ai.offline.text_ranking import jaccard
from kb_ai.offline.text import tokenize
from kb_ai.quality.lint_context import INFO, WARNING, Finding, LintContext
from kb_ai.store.articles import Article
from kb_ai.store.kb import KnowledgeBase

DEFAULT_MAX_PAIRS = 20
PAGE_CHARS = 12_000  # of each article, per call
MIN_TOPIC_OVERLAP = 0.1  # Jaccard of word sets: below this, same-topic pages talk about different things
MAX_TOPIC_PAGES = 150  # per topic, for pair ranking (bounded work on big wikis)
MAX_PER_PAIR = 3
MAX_REPLY_TOKENS = 1_000  # three short claims and reasons; a runaway reply is cut, not waited for
PROMPT = "lint_contradictions"

SCHEMA = {
    "type": "object",
    "properties": {
        "contradictions": {
            "type": "array",
            "maxItems": 10,
            "items": {
                "type": "object",
                "properties": {
                    "claim_a": {"type": "string"},
                    "claim_b": {"type": "string"},
                    "explanation": {"type": "string"},
                },
                "required": ["claim_a", "claim_b"],
            },
        }
    },
    "required": ["contradictions"],
}


@dataclass(frozen=True)
class ArticlePair:
    a: str
    b: str
    reason: str  # "shared source raw/x.md" or "same topic"


def candidate_pairs(ctx: LintContext, max_pairs: int) -> list[ArticlePair]:
    """At most ``max_pairs`` pairs: sharing sources first (most shared), then same-topic overlap."""
    articles = ctx.articles
    by_source: dict[str, list[str]] = {}
    for path in sorted(articles):
        for source in set(articles[path].sources):
            by_source.setdefault(source, []).append(path)
    shared: dict[tuple[str, str], list[str]] = {}
    for source, paths in by_source.items():
        for a, b in itertools.combinations(paths, 2):
            shared.setdefault((a, b), []).append(source)
    words = {p: set(tokenize(f"{a.title} {a.summary} {a.body[:4000]}")) for p, a in articles.items()}

    def overlap(a: str, b: str) -> float:
        return jaccard(words[a], words[b])

    ranked = sorted(shared.items(), key=lambda item: (-len(item[1]), -overlap(*item[0]), item[0]))
    pairs = [ArticlePair(a, b, "shared source " + ", ".join(sorted(s)[:3])) for (a, b), s in ranked]
    if len(pairs) < max_pairs:
        by_topic: dict[str, list[str]] = {}
        for path in sorted(articles):
            by_topic.setdefault(articles[path].topic, []).append(path)
        topical = []
        for paths in by_topic.values():
            for a, b in itertools.combinations(paths[:MAX_TOPIC_PAGES], 2):
                if (a, b) not in shared:
                    score = overlap(a, b)
                    if score >= MIN_TOPIC_OVERLAP:
                        topical.append((score, a, b))
        topical.sort(key=lambda item: (-item[0], item[1], item[2]))
        pairs += [ArticlePair(a, b, "same topic") for _score, a, b in topical]
    return pairs[:max_pairs]


def _page(article: Article) -> dict:
    text = article.body
    return {"path": article.path, "title": article.title, "text": text[:PAGE_CHARS], "truncated": len(text) > PAGE_CHARS}


async def find_contradictions(settings: Settings, ctx: LintContext, max_pairs: int = DEFAULT_MAX_PAIRS
                              ) -> tuple[list[Finding], dict]:
    """One model call per candidate pair. Returns (findings, usage summary)."""
    from kb_ai.llm.gateway import LLMGateway, gateway_config  # noqa: PLC0415 (litellm only for --contradictions)
    from kb_ai.llm.prompts import PromptLibrary  # noqa: PLC0415

    # the gateway and prompts only: lint reaches the model, never the ask service (navigate)
    gateway = LLMGateway(gateway_config(settings, settings.model or "", KnowledgeBase(settings.kb).state_dir))
    prompts = PromptLibrary(settings.prompts_dir)
    gateway.preflight()
    meter = UsageMeter()
    pairs = candidate_pairs(ctx, max_pairs)

    async def review(pair: ArticlePair) -> list[Finding]:
        a, b = ctx.articles[pair.a], ctx.articles[pair.b]
        messages = prompts.render(PROMPT, page_a=_page(a), page_b=_page(b))
        try:
            reply = await gateway.complete_json(messages, schema=SCHEMA, schema_name="contradictions",
                                                purpose="lint", meter=meter, max_tokens=MAX_REPLY_TOKENS)
        except LLMError as exc:
            if exc.fatal:
                raise
            return [Finding("contradiction", INFO, pair.a, f"could not compare with {pair.b}: {exc.message}")]
        found = []
        for item in (reply.get("contradictions") or [])[:MAX_PER_PAIR]:
            claim_a, claim_b = " ".join(item["claim_a"].split()), " ".join(item["claim_b"].split())
            why = " ".join(str(item.get("explanation") or "").split())
            found.append(Finding("contradiction", WARNING, pair.a,
                                 f"may contradict {pair.b} ({pair.reason}): {claim_a!r} vs {claim_b!r}"
                                 + (f" — {why}" if why else "")))
        return found

    results = await asyncio.gather(*(review(pair) for pair in pairs))
    usage = meter.summary("llm")
    usage["pairs_compared"] = len(pairs)
    return [f for group in results for f in group], usage
