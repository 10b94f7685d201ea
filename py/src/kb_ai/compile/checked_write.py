"""The model's article, checked against the sources it was given (``content_check``).

``CheckedWriter`` wraps ``writers.LLMWriter``: after the model writes an article, every source
of the batch must have its facts (``content_check.facts_of``, of the text the prompt showed)
in the new body, all but ``allowed_missing`` of them. When one does not, the model is asked once
more, told exactly which facts it dropped; when the second answer drops them too, the offline
article is kept for the batch (``writers.OfflineWriter``: the sources' own text) and the report
says so ("raw/x.md: the model's article dropped N facts (...); kept the offline article"). No
source is lost without a line saying so. A model answer ``writers.guard_body`` refuses (it
would drop hand-written lines, trail lines or half the article) is refused as before: the
article is left alone (held) and retried on the next run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from kb_ai.compile.content_check import Facts, allowed_missing, corpus_frequencies, facts_of, missing_facts
from kb_ai.compile.writers import WRITE_SOURCE_TOKENS, Contribution, CurrentArticle, Draft, OfflineWriter, cut, guard_body

SHOWN_IN_RETRY = 12  # dropped facts named in the retry prompt


class CheckedWriter:
    """An ``LLMWriter`` whose every article holds its sources' facts, or is the offline one."""

    mode = "llm"
    checked_by_driver = True  # on a cluster, ``writer`` runs as tasks and these checks on the driver

    def __init__(self, writer):
        self.writer = writer
        self.offline = OfflineWriter(writer.today)
        self.frequency: Counter[str] | None = None
        self.documents = 0
        self.retried = 0
        self.replaced = 0

    @property
    def prompt_version(self) -> str:
        return self.writer.prompt_version

    def __getattr__(self, name: str):
        return getattr(self.writer, name)

    def use_corpus(self, texts: list[str]) -> None:
        """The documents of this compile: a source's key terms are its words few of them use."""
        self.frequency = corpus_frequencies(texts)
        self.documents = len(texts)

    def facts(self, chunk: list[Contribution]) -> dict[str, Facts]:
        """Each source's facts, of the text the write prompt shows of it (a long one is cut)."""
        share = WRITE_SOURCE_TOKENS // max(1, len(chunk))
        return {c.path: facts_of(cut(c.source.text, share)[0], self.frequency, self.documents) for c in chunk}

    async def write(self, article: CurrentArticle, chunk: list[Contribution]) -> Draft:
        facts = self.facts(chunk)
        draft = await self.writer.write(article, chunk)
        guard_body(article, draft.body, model=True)  # refused outright (held): checked first, as ever
        dropped = _dropped(facts, draft.body)
        if not dropped:
            return draft
        self.retried += 1
        named = "; ".join(f"{path}: " + ", ".join(repr(i) for i in items[:SHOWN_IN_RETRY])
                          for path, items in dropped.items())
        retry = replace(article, rejected=f"your article left out facts of its sources ({named}); state every "
                                          "one of them in the article")
        draft = await self.writer.write(retry, chunk)
        guard_body(article, draft.body, model=True)
        first = sorted(dropped)
        dropped = _dropped(facts, draft.body)
        if not dropped:
            draft.warnings.append(f"the model's first article dropped facts of {', '.join(first)}; "
                                  "asked again, it kept them")
            return draft
        self.replaced += 1
        kept = await self.offline.write(article, chunk)
        kept.warnings = kept.warnings + [
            f"{path}: the model's article dropped {len(items)} fact(s) ({', '.join(repr(i) for i in items[:5])}"
            f"{', ...' if len(items) > 5 else ''}); kept the offline article" for path, items in dropped.items()]
        return kept


def _dropped(facts: dict[str, Facts], body: str) -> dict[str, list[str]]:
    """Source path -> the facts ``body`` left out, for the sources that left out too many."""
    out: dict[str, list[str]] = {}
    for path, items in facts.items():
        missing = missing_facts(items, body)
        if len(missing) > allowed_missing(items):
            out[path] = missing
    return out

