"""One question, start to finish, as a stream of events. ``ask_events`` produces them; ``ask``
(``records.ask``, re-exported here) folds them into one ``AskResult``, handing each to an
``on_event`` callback on the way: the CLI (in-process and through a running ``kaas serve``), the
MCP tools and ``kaas eval`` call ``ask``; the HTTP chat streams ``ask_events`` itself.

Order (DESIGN.md): rewrite?, pages (once per round of reading, ``navigate/rounds.py``), token*, citations, suggestions?, usage, done — with
``notice`` events wherever something was degraded, trimmed or dropped, and ``error`` (then the
stream ends) when a ``KaasError`` stops the answer.

The event loop only waits: a server answers many readers on one loop, so no step of an answer
reads page files or does CPU-heavy work on it. The catalog, the pages given or selected, the
reading budget and the navigators' keyword work (BM25 indexes and searches, extractive answers)
run in worker threads (``anyio.to_thread``); one slow question cannot freeze the others.
"""

from __future__ import annotations

import logging
from contextlib import aclosing
from dataclasses import dataclass
from typing import AsyncIterator

import anyio

from kb_ai.config import Settings
from kb_ai.errors import (BadRequestError, EmptyCatalogError, KaasError, LLMReplyCutOff, PageNotFoundError,
                          UnsafePathError)
from kb_ai.llm.usage import UsageMeter
from kb_ai.navigate.citations import validate_citations
from kb_ai.navigate.navigator import LexicalIndexCache, Navigator
from kb_ai.navigate.read import read_pages
from kb_ai.navigate.records import AskEvent, AskRequest, Selection
from kb_ai.navigate.records import ask as ask  # the one fold of events into a result (re-exported)
from kb_ai.navigate.rounds import further_rounds, pages_event, round_usage
from kb_ai.navigate.topic_select import TopicIndexCache
from kb_ai.store.access import Reader
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.pages import load_page
from kb_ai.untrusted_text import lone_surrogate

log = logging.getLogger(__name__)

MAX_QUESTION_CHARS = 4_000
# Pages one question may read: selected (``max_pages`` over HTTP) or named (``paths`` over MCP,
# ``kaas ask --page``). Named pages are refused beyond it, before any is loaded.
MAX_PAGES_PER_QUESTION = 20


@dataclass
class AskService:
    """A knowledge base, its settings and a navigator: build once, ask many times."""

    kb: KnowledgeBase
    settings: Settings
    navigator: Navigator
    lexical: LexicalIndexCache | None = None  # the keyword indexes the navigator ranks with

    def warm(self) -> None:
        """Build now what the next question would otherwise build first: the catalog and its
        keyword index (the server's watcher calls this after it re-indexed a hand edit, so the
        first question after an edit does not wait for it). Blocking: call it in a worker thread."""
        catalog = self.kb.catalog()
        if self.lexical is not None and catalog.entries:
            self.lexical.get(catalog)

    @property
    def mode(self) -> str:
        return self.navigator.mode

    def events(self, request: AskRequest) -> AsyncIterator[AskEvent]:
        return ask_events(self, request)


def build_service(settings: Settings) -> AskService:
    """The navigator the settings call for: a model when one is configured, else offline."""
    kb = KnowledgeBase(settings.kb)
    lexical = LexicalIndexCache(kb.wiki_dir, kb.state_dir / "lexical-index")
    if settings.offline:
        from kb_ai.navigate.offline_navigator import OfflineNavigator

        return AskService(kb, settings, OfflineNavigator(lexical, rounds=settings.max_rounds), lexical)
    from kb_ai.llm.gateway import build_gateway
    from kb_ai.llm.prompts import PromptLibrary
    from kb_ai.navigate.llm_navigator import LLMNavigator

    gateway = build_gateway(settings, kb)
    navigator = LLMNavigator(gateway, PromptLibrary(settings.prompts_dir), lexical, settings.select_budget,
                             navigation=settings.navigation, topics=TopicIndexCache(kb.state_dir))
    return AskService(kb, settings, navigator, lexical)


def _given_selection(kb: KnowledgeBase, paths: list[str], reader: Reader) -> Selection:
    """The pages a caller named (``paths=``, ``kaas ask --page``), checked by ``_check_given``;
    each must be a page this reader may read (``load_page``: a hidden page is refused exactly
    like a missing one). Blocking: reads files."""
    chosen: list[str] = []
    for raw in dict.fromkeys(paths):  # a repeated path is read once
        try:
            path = load_page(kb, raw, reader).path
        except UnsafePathError as exc:
            raise PageNotFoundError(f"not a page of the wiki: {raw!r} ({exc.message})") from None
        if path not in chosen:
            chosen.append(path)
    return Selection(paths=chosen, method="given")


def _check_given(paths: object) -> None:
    """Refuse named pages beyond ``MAX_PAGES_PER_QUESTION`` (repeats count), before any work."""
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise BadRequestError("the pages to read must be a list of page paths")
    if len(paths) > MAX_PAGES_PER_QUESTION:
        raise BadRequestError(f"at most {MAX_PAGES_PER_QUESTION} pages can be named for one question "
                              f"({len(paths)} given)")


def _catalog_for(kb: KnowledgeBase, reader: Reader):
    """The catalog ``reader`` may see (blocking: loads and cuts it)."""
    catalog = kb.catalog().visible_to(reader)
    if not catalog.entries:
        if reader.admin:
            kb.require_catalog()  # the message that says how to fill an empty wiki
        raise EmptyCatalogError("the wiki has no pages you can read")  # same whether or not others exist
    return catalog


def _checked_question(request: AskRequest) -> str:
    """The question with its whitespace folded; ``KaasError`` when it is empty, too long or not
    valid text, or when the pages it names cannot be named (``_check_given``)."""
    question = " ".join(request.question.split())
    if not question:
        raise KaasError("the question is empty")
    if len(question) > MAX_QUESTION_CHARS:
        raise KaasError(f"the question is longer than {MAX_QUESTION_CHARS} characters")
    if lone_surrogate(question):
        # Bytes that are not UTF-8 in a command line (Python keeps them as lone surrogates),
        # or an escaped lone surrogate: no model request, saved page or log line can hold it.
        raise KaasError("the question is not valid text (it holds bytes that are not UTF-8)")
    if request.paths:
        _check_given(request.paths)
    return question


def _citation_events(answer: str, pages) -> list[AskEvent]:
    """The answer's citations (those of pages read, and those that are not valid), with a notice
    when some are not valid or when the answer cites none of the pages it read."""
    citations, invalid = validate_citations(answer, pages)
    events = [AskEvent("citations", {"citations": [c.as_dict() for c in citations], "invalid": invalid})]
    if invalid:
        events.append(AskEvent("notice", {"message": "The answer cited pages that were not read; those links are not valid citations: " + ", ".join(invalid[:5])}))
    elif pages and not citations:
        events.append(AskEvent("notice", {"message": "The answer cites none of the pages it read."}))
    return events


async def ask_events(service: AskService, request: AskRequest) -> AsyncIterator[AskEvent]:
    """Answer ``request`` as events. Never raises a ``KaasError``: it becomes an ``error`` event."""
    meter = UsageMeter()
    navigator = service.navigator
    try:
        question = _checked_question(request)
        # Authorization is part of the query: from here on, pages this reader may not read do
        # not exist — not for navigation, the model, counts, reading, citations or suggestions.
        catalog = await anyio.to_thread.run_sync(_catalog_for, service.kb, request.reader)
        navigator.preflight()  # a model that cannot be called at all fails here, before any work
        max_pages = request.max_pages or service.settings.max_pages

        query = question
        if request.rewrite:
            query, notices = await navigator.rewrite(question, request.history, meter)
            yield AskEvent("rewrite", {"query": query})
            for message in notices:
                yield AskEvent("notice", {"message": message})

        if request.paths:
            selection = await anyio.to_thread.run_sync(_given_selection, service.kb, request.paths, request.reader)
        else:
            selection = await navigator.select(query, catalog, max_pages, meter)
        for message in selection.notices:
            yield AskEvent("notice", {"message": message})

        pages, read_notices = await anyio.to_thread.run_sync(
            lambda: read_pages(service.kb, selection.paths, service.settings.read_budget, query,
                               catalog=catalog, reader=request.reader))
        yield pages_event(pages, selection, 1, pages, round_usage(meter, (0, 0, 0)))
        for message in read_notices:
            yield AskEvent("notice", {"message": message})
        async with aclosing(further_rounds(service, request, query, catalog, pages, list(pages), meter)) as rounds:
            async for event in rounds:  # multi-hop: the pages the pages read lead to (navigate/rounds.py)
                yield event

        answer_parts: list[str] = []
        if not pages:
            text = navigator.not_covered()
            answer_parts.append(text)
            yield AskEvent("token", {"text": text})
        else:
            # aclosing: a consumer that stops early (a disconnected client) closes the model
            # stream now, not whenever the garbage collector gets to it.
            try:
                async with aclosing(navigator.answer(query, request.history, pages, catalog, meter)) as stream:
                    async for delta in stream:
                        if delta:
                            answer_parts.append(delta)
                            yield AskEvent("token", {"text": delta})
            except LLMReplyCutOff as exc:
                # What came is kept (it is already out); the reader is told it stops short.
                yield AskEvent("notice", {"message": f"The answer was cut off: {exc.message}. It may be incomplete."})
        answer = "".join(answer_parts)

        for event in _citation_events(answer, pages):
            yield event

        if request.suggest:
            questions, notices = await navigator.suggest(query, answer, pages, catalog, meter)
            for message in notices:
                yield AskEvent("notice", {"message": message})
            yield AskEvent("suggestions", {"questions": questions})

        yield AskEvent("usage", meter.summary(navigator.mode))
        yield AskEvent("done", {})
    except KaasError as exc:
        log.info("ask failed: %s", exc.message)
        yield AskEvent("usage", meter.summary(navigator.mode))
        yield AskEvent("error", {"code": exc.code, "message": exc.message})
