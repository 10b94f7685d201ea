"""One question, start to finish, as a stream of events. ``ask_events`` produces them; ``ask``
(``records.ask``, re-exported here) folds them into one ``AskResult``, handing each to an
``on_event`` callback on the way: the CLI (in-process and through a running ``kaas serve``), the
MCP tools and ``kaas eval`` call ``ask``; the HTTP chat streams ``ask_events`` itself.

Order (DESIGN.md): rewrite?, pages (once per round of reading, ``navigate/rounds.py``), abstained? or offline?, token*, citations, suggestions?, usage, done — with
``notice`` events wherever something was degraded, trimmed or dropped, and ``error`` (then the
stream ends) when a ``KaasError`` stops the answer.

Model down, still an answer: when the model fails the answer step (it cannot be reached, times
out, answers 5xx after the retries, or did not answer an earlier step of this ask) before any of
the answer came, the answer is the offline extract of the pages already read, announced by one
``offline`` event ``{"reason", "message"}`` (beside the answer, never in its text) — the
one line of diagnosis: the notices of earlier steps that failed for the same reason (rewrite,
selection falling back to keywords) are folded into it, not shown as well. Unless the request is
``model_only`` (or the setting ``answer_fallback`` is false): then the failure is the error it
always was. A configuration error (``fatal``) is always an error.

The event loop only waits: a server answers many readers on one loop, so no step of an answer
reads page files or does CPU-heavy work on it. The catalog, the pages given or selected, the
reading budget and the navigators' keyword work (BM25 indexes and searches, extractive answers)
run in worker threads (``anyio.to_thread``); one slow question cannot freeze the others.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import AsyncIterator

import anyio

from kb_ai.config import Settings
from kb_ai.errors import (BadRequestError, EmptyCatalogError, KaasError, LLMError, LLMReplyCutOff, PageNotFoundError,
                          UnsafePathError)
from kb_ai.llm.usage import UsageMeter
from kb_ai.navigate.attribution import attribute
from kb_ai.navigate.citations import check_citations
from kb_ai.navigate.navigator import LexicalIndexCache, Navigator
from kb_ai.navigate.offline_navigator import OfflineNavigator
from kb_ai.navigate.read import read_pages
from kb_ai.navigate.records import AskEvent, AskRequest, Selection
from kb_ai.navigate.records import ask as ask  # the one fold of events into a result (re-exported)
from kb_ai.offline.lexical import index_folder
from kb_ai.navigate.rounds import further_rounds, pages_event, round_usage
from kb_ai.store.access import Reader
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.pages import load_page
from kb_ai.store.sentences import clip
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
    # The kinds of readers who asked lately (by ``Reader.key``), most recent last: their views of
    # the catalog are warmed too, so a reader who may not read everything does not wait either.
    recent_readers: OrderedDict = field(default_factory=OrderedDict, repr=False)

    RECENT_READERS = 8  # kinds of readers warmed after a re-index (each view is a keyword index)

    def warm(self) -> None:
        """Build now what the next question would otherwise build first: the catalog, its keyword
        index, and the views (and their indexes) of the kinds of readers who asked lately (the
        server's watcher calls this after it re-indexed a hand edit, so the first question after
        an edit does not wait for it). Blocking: call it in a worker thread."""
        catalog = self.kb.catalog()
        if self.lexical is None or not catalog.entries:
            return
        self.lexical.get(catalog)
        for reader in list(self.recent_readers.values()):
            view = catalog.visible_to(reader)
            if view.entries:
                self.lexical.get(view)

    def asked_by(self, reader: Reader) -> None:
        """Remember that ``reader``'s kind asked (for ``warm``)."""
        if reader.admin:
            return  # an admin reads the full catalog, warmed anyway
        self.recent_readers[reader.key] = reader
        self.recent_readers.move_to_end(reader.key)
        while len(self.recent_readers) > self.RECENT_READERS:
            self.recent_readers.popitem(last=False)

    @property
    def mode(self) -> str:
        return self.navigator.mode

    def events(self, request: AskRequest) -> AsyncIterator[AskEvent]:
        return ask_events(self, request)


def build_service(settings: Settings) -> AskService:
    """The navigator the settings call for: a model when one is configured, else offline."""
    kb = KnowledgeBase(settings.kb)
    lexical = LexicalIndexCache(kb.wiki_dir, index_folder(kb.state_dir))
    if settings.offline:
        from kb_ai.navigate.offline_navigator import OfflineNavigator

        return AskService(kb, settings, OfflineNavigator(lexical, rounds=settings.max_rounds), lexical)
    from kb_ai.llm.gateway import build_gateway
    from kb_ai.llm.prompts import PromptLibrary
    from kb_ai.navigate.llm_navigator import LLMNavigator
    from kb_ai.navigate.topic_select import TopicIndexCache

    gateway = build_gateway(settings, kb)
    navigator = LLMNavigator(gateway, PromptLibrary(settings.prompts_dir), lexical, settings.select_budget,
                             navigation=settings.navigation, topics=TopicIndexCache(kb.state_dir),
                             context_window=settings.context_window)
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


def _loaded_catalog_for(kb: KnowledgeBase, reader: Reader):
    """``_catalog_for`` when that costs no disk read or cut (the current catalog is in memory
    and ``reader`` sees all of it); None otherwise."""
    if not kb.wiki_dir.is_dir():
        return None
    catalog = kb.catalog_store.loaded()
    if catalog is None or not catalog.entries or not (reader.admin or not catalog.restricted):
        return None
    return catalog


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


MODEL_DOWN_LINE = "Model unavailable ({reason}): answer extracted from the pages without a model."
MODEL_DOWN_KEYWORDS_LINE = ("Model unavailable ({reason}): pages chosen by keyword search and the answer extracted "
                            "from them without a model.")


def _fallback_allowed(service: AskService, request: AskRequest) -> bool:
    """Whether a failed model answer may be replaced by the offline extract (not ``model_only``)."""
    return service.navigator.mode == "llm" and service.settings.answer_fallback and not request.model_only


UNSUPPORTED_ANSWER = ("The pages read do not answer this question: no sentence of the answer is supported by "
                      "them, so it is not the wiki's answer.")


def _sentences(n: int) -> str:
    return "1 sentence" if n == 1 else f"{n} sentences"


def _citation_events(answer: str, pages, grounded: bool = False) -> list[AskEvent]:
    """The answer's citations (those of pages read, repaired ones among them, and those that are
    not valid), with a notice when some are not valid or when the answer cites none of the pages
    it read. ``grounded`` (a model's answer): kaas attributes it (``navigate.attribution``):
    sources attached to sentences that restate a page, sentences no page supports, and, when
    none is supported, ``abstained`` and a notice saying the pages do not answer it (the answer
    streamed already: the correction is the ``citations`` event and its notices)."""
    check = check_citations(answer, pages)
    data: dict = {"citations": [c.as_dict() for c in check.valid], "invalid": check.invalid}
    events: list[AskEvent] = []
    if check.repaired:
        data["repaired"] = dict(check.repaired)
    if check.placeholders:
        data["placeholders"] = list(check.placeholders)
    citations = check.valid
    if grounded and pages:
        found = attribute(answer, pages, check)
        citations = found.citations
        data.update(citations=[c.as_dict() for c in citations], attributed=found.attributed,
                    unsupported=found.unsupported, abstained=found.abstained)
    events.append(AskEvent("citations", data))
    if data.get("abstained") and not found.model_abstained:
        events.append(AskEvent("notice", {"message": UNSUPPORTED_ANSWER}))
    if check.invalid:
        events.append(AskEvent("notice", {"message": "The answer cited pages that were not read; those links are not valid citations: " + ", ".join(check.invalid[:5])}))
    if data.get("attributed"):
        titles = list(dict.fromkeys(c.title for c in citations if c.attributed)) or ["pages it cited elsewhere"]
        events.append(AskEvent("notice", {"message": f"No page cited by {_sentences(len(data['attributed']))} of "
                                                     "the answer; kaas attached the pages they restate: " + ", ".join(titles[:5])}))
    if data.get("unsupported") and not data.get("abstained"):
        quoted = "; ".join("“" + clip(u["text"], 80) + "”" for u in data["unsupported"][:3])
        events.append(AskEvent("notice", {"message": "Not supported by the pages read "
                                                     f"({_sentences(len(data['unsupported']))} of the answer): {quoted}"}))
    if not check.invalid and pages and not citations:
        events.append(AskEvent("notice", {"message": "The answer cites none of the pages it read."}))
    return events


def _abstention(not_covered: str, selection: Selection, catalog) -> tuple[AskEvent, str]:
    """The ``abstained`` event and the answer's text when no page is read: the wiki does not
    cover the question. The closest pages (when the navigator named some) are listed as related,
    not as an answer: by title and path, not as links (they were not read: no citation)."""
    related = [catalog.by_path[p].record("path", "title") for p in selection.related if p in catalog]
    text = not_covered
    if related:
        text += "\n\nRelated pages, not an answer: " + "; ".join(f"{r['title']} ({r['path']})" for r in related) + "."
    return AskEvent("abstained", {"message": not_covered, "related": related}), text


async def ask_events(service: AskService, request: AskRequest) -> AsyncIterator[AskEvent]:
    """Answer ``request`` as events. Never raises a ``KaasError``: it becomes an ``error`` event."""
    meter = UsageMeter()
    navigator = service.navigator
    try:
        question = _checked_question(request)
        # Authorization is part of the query: from here on, pages this reader may not read do
        # not exist — not for navigation, the model, counts, reading, citations or suggestions.
        # Blocking work (loading the catalog, cutting a reader's view) in a worker thread; when
        # the catalog in memory is current and the reader sees all of it, nothing blocks: no
        # thread hop (under 200 concurrent chats each hop cost the event loop its turn at the GIL).
        catalog = _loaded_catalog_for(service.kb, request.reader)
        if catalog is None:
            catalog = await anyio.to_thread.run_sync(_catalog_for, service.kb, request.reader)
        service.asked_by(request.reader)
        # A model that cannot be called at all fails here, before any work. In a worker thread: the
        # first check of a litellm model imports litellm (seconds), which must not stall other streams.
        await anyio.to_thread.run_sync(navigator.preflight)
        max_pages = request.max_pages or service.settings.max_pages

        fallback = _fallback_allowed(service, request)
        # Notices of steps the model failed (did not answer) are held until it is known whether
        # the answer is made without it: then the ``offline`` line says it once, for all of them.
        held: list[str] = []

        query = question
        if request.rewrite:
            query, notices = await navigator.rewrite(question, request.history, meter)
            yield AskEvent("rewrite", {"query": query})
            for message in notices:
                if fallback and meter.model_down:
                    held.append(message)
                else:
                    yield AskEvent("notice", {"message": message})

        if request.paths:
            selection = await anyio.to_thread.run_sync(_given_selection, service.kb, request.paths, request.reader)
        else:
            selection = await navigator.select(query, catalog, max_pages, meter)
        for message in selection.notices:
            if fallback and selection.method == "lexical-fallback":
                held.append(message)
            else:
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
        offline_reason: str | None = None
        if not pages:
            event, text = _abstention(navigator.not_covered(), selection, catalog)
            yield event
            answer_parts.append(text)
            for message in held:
                yield AskEvent("notice", {"message": message})
            yield AskEvent("token", {"text": text})
        else:
            # aclosing: a consumer that stops early (a disconnected client) closes the model
            # stream now, not whenever the garbage collector gets to it.
            try:
                async with aclosing(navigator.answer(query, request.history, pages, catalog, meter)) as stream:
                    async for delta in stream:
                        if delta:
                            if not answer_parts:
                                for message in held:
                                    yield AskEvent("notice", {"message": message})
                            answer_parts.append(delta)
                            yield AskEvent("token", {"text": delta})
            except LLMReplyCutOff as exc:
                if not answer_parts and fallback:
                    offline_reason = exc.message  # cut off before any of it came: nothing to keep
                else:
                    # What came is kept (it is already out); the reader is told it stops short.
                    yield AskEvent("notice", {"message": f"The answer was cut off: {exc.message}. It may be incomplete."})
            except LLMError as exc:
                if answer_parts or exc.fatal or not fallback:
                    raise
                offline_reason = meter.model_down or exc.message
            if offline_reason is not None:
                meter.model_down = meter.model_down or offline_reason  # suggestions: without it too
                line = (MODEL_DOWN_LINE if selection.method != "lexical-fallback"
                        else MODEL_DOWN_KEYWORDS_LINE).format(reason=offline_reason)
                log.info("%s", line)  # the person reads it beside the answer (its mode), not in it
                held = []  # said once, by the line
                yield AskEvent("offline", {"reason": offline_reason, "message": line})
                lexical = service.lexical or LexicalIndexCache(service.kb.wiki_dir, None)
                extract = OfflineNavigator(lexical)
                async with aclosing(extract.answer(query, request.history, pages, catalog, meter)) as stream:
                    async for delta in stream:
                        answer_parts.append(delta)
                        yield AskEvent("token", {"text": delta})
        for message in held if not answer_parts else []:  # a model that answered nothing at all
            yield AskEvent("notice", {"message": message})
        answer = "".join(answer_parts)

        grounded = navigator.mode == "llm" and offline_reason is None
        for event in await anyio.to_thread.run_sync(_citation_events, answer, pages, grounded):
            yield event

        if request.suggest:
            questions, notices = await navigator.suggest(query, answer, pages, catalog, meter)
            for message in notices:
                yield AskEvent("notice", {"message": message})
            yield AskEvent("suggestions", {"questions": questions})

        yield AskEvent("usage", meter.summary("offline" if offline_reason else navigator.mode))
        yield AskEvent("done", {})
    except KaasError as exc:
        log.info("ask failed: %s", exc.message)
        yield AskEvent("usage", meter.summary(navigator.mode))
        yield AskEvent("error", {"code": exc.code, "message": exc.message})
