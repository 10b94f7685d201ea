"""Navigation with a model: selection, answer, rewrite and suggestions are one call each,
each with its own prompt file. Selection degrades to keyword ranking when the model fails.

When the model does not answer a call of an ask at all (a timeout, the call deadline, an
unreachable server, or the gateway's circuit breaker: ``UsageMeter.model_down``), the rest of
that ask does not wait for it again: pages are chosen by keyword, the answer step raises at once
(``navigate.ask`` then answers with the offline extract, its ``offline`` event saying why, unless the
request is model-only), suggestions are the offline ones. An ask against a server that never
answers so takes about one call deadline, not one per step."""

from __future__ import annotations

import logging
import re
from typing import AsyncIterator

import anyio

from kb_ai.errors import ConfigError, LLMError, LLMUnreachableError
from kb_ai.llm.context_window import ContextWindows
from kb_ai.llm.gateway import LLMGateway
from kb_ai.llm.plausible import one_line, plausible, unique
from kb_ai.llm.prompts import PromptLibrary
from kb_ai.llm.usage import UsageMeter
from kb_ai.navigate.follow_up import select_more_llm
from kb_ai.navigate.fusion import PickMemory, fuse, positional_reason
from kb_ai.navigate.navigator import LexicalIndexCache
from kb_ai.navigate.offline_navigator import OfflineNavigator, lexical_selection
from kb_ai.navigate.records import ReadPage, Selection, Turn
from kb_ai.navigate.select import (DEFAULT_SELECT_BUDGET, MIN_SELECT_BUDGET, catalog_tokens, known_to_fit,
                                   select_budget_for, select_pages_llm)
from kb_ai.navigate.topic_select import TopicIndexCache, select_pages_by_topic
from kb_ai.store.catalog import Catalog

log = logging.getLogger(__name__)

NOT_COVERED = "The wiki does not cover this: no page in its catalog looks relevant to the question."
HISTORY_TURNS = 6
HISTORY_CHARS = 1_500
# Reply limits (tokens): a runaway model is cut off, not waited for (the gateway also bounds
# every call's wall-clock time).
REWRITE_MAX_TOKENS = 300  # one query of at most 1,000 characters
SUGGEST_MAX_TOKENS = 300  # three short questions
ANSWER_MAX_TOKENS = 1_500  # a concise answer with citations; a longer one ends with a notice

REWRITE_SCHEMA = {"type": "object", "properties": {"query": {"type": "string", "minLength": 1}}, "required": ["query"]}
SUGGEST_SCHEMA = {
    "type": "object",
    "properties": {"questions": {"type": "array", "items": {"type": "string", "minLength": 3}, "minItems": 1, "maxItems": 5}},
    "required": ["questions"],
}


def example_citation(pages: list[ReadPage]) -> str:
    """The citation of the first page read that is evidence, as the answer must write it: a
    concrete example for the answer prompt (a weak model copies a placeholder literally)."""
    for page in pages:
        if page.is_evidence:
            title = " ".join(page.title.split()).replace("[", "\\[").replace("]", "\\]")
            return f"[{title}]({page.path})"
    return ""


def _history(history: list[Turn]) -> list[dict[str, str]]:
    recent = history[-HISTORY_TURNS:]
    return [{"role": t.role, "content": t.content[:HISTORY_CHARS]} for t in recent]


class LLMNavigator:
    mode = "llm"

    def __init__(self, gateway: LLMGateway, prompts: PromptLibrary, lexical: LexicalIndexCache,
                 select_budget: int | None = None, *, navigation: str = "shortlist",
                 topics: TopicIndexCache | None = None, context_window: int | None = None):
        self.gateway = gateway
        self.prompts = prompts
        self.lexical = lexical
        self.select_budget = select_budget
        self.navigation = navigation  # "shortlist" | "topics": what happens over the budget
        self.topics = topics or TopicIndexCache(None)
        self.context_window_setting = context_window
        self._windows: ContextWindows | None = None
        self.picks = PickMemory()  # the pages picked for recent questions: a model answering all alike

    async def _budget(self, catalog: Catalog | None = None) -> tuple[int, str | None]:
        """The selection budget, and a notice when it is the default for an unknown context window.
        The window: litellm's model map, else the ``context_window`` setting, else the server's
        own report (``llm.context_window``, probed once per navigator, and only once a catalog is
        larger than the smallest budget: below it the window cannot change what is shown)."""
        if self.select_budget:
            return self.select_budget, None
        if catalog is not None and catalog.line_chars_known and catalog_tokens(catalog) <= MIN_SELECT_BUDGET:
            return MIN_SELECT_BUDGET, None
        if self._windows is None:
            config = self.gateway.config
            self._windows = ContextWindows(self.gateway.context_window(), self.context_window_setting,
                                           config.api_base, config.model, config.api_key)
        window = await self._windows.get()
        if window.tokens:
            return select_budget_for(window.tokens, None), None
        return DEFAULT_SELECT_BUDGET, (
            f"The model's context window is unknown (litellm does not know {self.gateway.config.model} and the "
            f"server does not report it): the selection used the default budget of {DEFAULT_SELECT_BUDGET:,} tokens "
            "of catalog. Set context_window in kaas.toml or KAAS_CONTEXT_WINDOW.")

    def preflight(self) -> None:
        self.gateway.preflight()

    async def rewrite(self, question: str, history: list[Turn], meter: UsageMeter) -> tuple[str, list[str]]:
        messages = self.prompts.render("rewrite", question=question, history=_history(history))
        try:
            reply = await self.gateway.complete_json(
                messages, schema=REWRITE_SCHEMA, schema_name="rewrite", purpose="rewrite", meter=meter,
                max_tokens=REWRITE_MAX_TOKENS,
            )
        except LLMError as exc:
            if exc.fatal:  # degrading cannot help: the configuration is wrong, tell the person
                raise
            return question, [f"Query rewrite failed ({exc.message}); the question was used as asked."]
        query = " ".join(str(reply.get("query", "")).split())[:1_000]
        if len(re.findall(r"\w", query)) < 3:
            return question, ["Query rewrite returned no usable query; the question was used as asked."]
        return query, []

    async def select(self, question: str, catalog: Catalog, max_pages: int, meter: UsageMeter) -> Selection:
        if meter.model_down:
            return await self._fallback(question, catalog, max_pages, f"The model did not answer ({meter.model_down})")
        budget, unknown_window = await self._budget(catalog)
        notices: list[str] = []  # degradations on the way, for the reader (not only the log)
        if unknown_window and not known_to_fit(catalog, budget):
            notices.append(unknown_window)  # the budget may have mattered: the catalog is cut to it
        # The keyword index (loaded or built from every page) is what the shortlist ranks with:
        # made in a worker thread, not on the event loop; not needed when the whole catalog fits.
        lexical = None
        if not known_to_fit(catalog, budget):
            lexical = await anyio.to_thread.run_sync(self.lexical.get, catalog)
        try:
            selection = None
            if self.navigation == "topics" and catalog_tokens(catalog) > budget:
                topics = await anyio.to_thread.run_sync(self.topics.get, catalog)
                selection = await select_pages_by_topic(
                    question, catalog, gateway=self.gateway, prompts=self.prompts, topics=topics,
                    lexical_for=self.lexical.get, max_pages=max_pages, budget_tokens=budget, meter=meter,
                )
                if selection is None:
                    notices.append("The model named no topic of the wiki; the pages were chosen from a keyword "
                                   "shortlist instead of by topic.")
                    log.warning("the model named no topic of the wiki; using the keyword shortlist")
            if selection is None:
                selection = await select_pages_llm(
                    question, catalog, gateway=self.gateway, prompts=self.prompts, max_pages=max_pages,
                    budget_tokens=budget, lexical=lexical, meter=meter,
                )
                selection.notices[:0] = notices
        except LLMError as exc:
            if exc.fatal:  # degrading cannot help: the configuration is wrong, tell the person
                raise
            fallback = await self._fallback(question, catalog, max_pages, f"Page selection by the model failed ({exc.message})")
            fallback.notices[:0] = notices
            return fallback
        if selection.dropped and not selection.paths:
            # The model tried to choose but named no real page: that is a failed selection, not
            # the model's judgement that the wiki lacks the answer (an empty list is that).
            fallback = await self._fallback(question, catalog, max_pages, "The model named no page of the catalog")
            fallback.notices[:0] = selection.notices
            return fallback
        if not selection.paths:
            return selection  # the model's judgement that no page fits: honoured (no answer call)
        return await anyio.to_thread.run_sync(self._kept_honest, question, catalog, max_pages, selection)

    def _kept_honest(self, question: str, catalog: Catalog, max_pages: int, selection: Selection) -> Selection:
        """The model's picks checked against the keyword ranking (``navigate.fusion``): positional
        picks replaced by it, with a notice; others fused with it. Blocking (BM25)."""
        lexical = lexical_selection(self.lexical.get(catalog), question, max_pages, "lexical").paths
        shown = selection.shown or [e.path for e in catalog.entries]
        reason = positional_reason(selection.paths, shown, question, lexical, self.picks)
        if reason:
            log.info("%s; using keyword selection", reason)
            fallback = Selection(paths=lexical, method="lexical-fallback", notices=list(selection.notices))
            fallback.notices.append(f"The model's page choice did not depend on the question ({reason}); "
                                    "the pages were chosen by keyword search instead.")
            return fallback
        if not lexical or lexical[0] in selection.paths:
            return selection  # the keyword ranking's best page is among the picks: nothing to add
        fused = fuse(selection.paths, lexical, min(max_pages, len(selection.paths) + 1))
        if fused != selection.paths:
            selection.why = "chosen by the model from the catalog, fused with keyword search"
            selection.paths = fused
        return selection

    async def follow_up(self, question: str, catalog: Catalog, pages: list[ReadPage], latest: list[ReadPage],
                        max_pages: int, meter: UsageMeter) -> Selection:
        """The model, having read ``pages``, names the pages they lead to (``follow_up.select_more_llm``).
        A model that does not answer is not asked again: the offline bridge expansion instead. A
        failed call ends the rounds with a notice: the answer is made from the pages read."""
        if meter.model_down:
            return await self._offline().follow_up(question, catalog, pages, latest, max_pages, meter)
        budget, _ = await self._budget(catalog)
        lexical = await anyio.to_thread.run_sync(self.lexical.get, catalog)
        try:
            return await select_more_llm(question, catalog, pages, gateway=self.gateway, prompts=self.prompts,
                                         max_pages=max_pages, budget_tokens=budget, lexical=lexical, meter=meter)
        except ConfigError as exc:  # a prompts folder of one's own without select_more.md
            return Selection(paths=[], method="llm", notices=[f"No further round of reading: {exc.message}"])
        except LLMError as exc:
            if exc.fatal:
                raise
            if meter.model_down:
                return await self._offline().follow_up(question, catalog, pages, latest, max_pages, meter)
            return Selection(paths=[], method="llm", notices=[
                f"A further round of page selection failed ({exc.message}); the answer uses the pages read."])

    async def _fallback(self, question: str, catalog: Catalog, max_pages: int, reason: str) -> Selection:
        log.info("%s; falling back to keyword selection", reason)  # the person reads it as a notice
        selection = await anyio.to_thread.run_sync(
            lambda: lexical_selection(self.lexical.get(catalog), question, max_pages, "lexical-fallback"))
        selection.notices.append(f"{reason}; fell back to keyword selection.")
        return selection

    async def answer(self, question: str, history: list[Turn], pages: list[ReadPage], catalog: Catalog,
                     meter: UsageMeter) -> AsyncIterator[str]:
        if meter.model_down:
            # An earlier step of this ask got no answer: not asked again (the ask answers without it).
            raise LLMUnreachableError(meter.model_down)
        messages = self.prompts.render(
            "answer",
            question=question,
            history=_history(history),
            pages=[{"path": p.path, "title": p.title, "text": p.text, "truncated": p.truncated,
                    "saved_answer": not p.is_evidence} for p in pages],
            example=example_citation(pages),
        )
        async for delta in self.gateway.stream(messages, purpose="answer", meter=meter, max_tokens=ANSWER_MAX_TOKENS):
            yield delta

    def _offline(self) -> OfflineNavigator:
        return OfflineNavigator(self.lexical)

    async def suggest(self, question: str, answer: str, pages: list[ReadPage], catalog: Catalog,
                      meter: UsageMeter) -> tuple[list[str], list[str]]:
        if meter.model_down:
            return await self._offline().suggest(question, answer, pages, catalog, meter)
        read = {p.path for p in pages}
        related = await anyio.to_thread.run_sync(lambda: self.lexical.get(catalog).search(question, 12))
        other_titles = [catalog.by_path[h.path].title for h in related if h.path not in read and h.path in catalog][:8]
        messages = self.prompts.render(
            "suggest", question=question, answer=answer[:4_000],
            pages=[{"path": p.path, "title": p.title} for p in pages], other_titles=other_titles,
        )
        try:
            reply = await self.gateway.complete_json(
                messages, schema=SUGGEST_SCHEMA, schema_name="suggestions", purpose="suggest", meter=meter,
                max_tokens=SUGGEST_MAX_TOKENS,
            )
        except LLMError as exc:
            if exc.fatal:  # degrading cannot help: the configuration is wrong, tell the person
                raise
            return [], [f"Follow-up suggestions failed: {exc.message}"]
        # An echo of the prompt, a placeholder, the question itself or a repeat is no suggestion.
        instructions = "\n".join(m["content"] for m in self.prompts.render(
            "suggest", question="", answer="", pages=[], other_titles=[]))
        raw = reply.get("questions") if isinstance(reply.get("questions"), list) else []
        questions = unique([one_line(q) for q in raw if plausible(q, instructions)], seen=[question])
        return questions[:3], []

    def not_covered(self) -> str:
        return NOT_COVERED
