"""Multi-hop reading: after the first pages are read, further rounds may read the pages they lead to.

A question that needs a chain of pages ("the waterfall in the country where the Bubye River is
found") cannot be served by one selection: the page that answers names something the question
never does. ``further_rounds`` asks the navigator, after each round, for the pages the pages read
lead to (``Navigator.follow_up``: the model with ``select_more.md``, or offline bridge expansion,
``navigate.bridge``), reads them and says so in a ``pages`` event carrying every page read so far
and ``round``, ``why``, ``added`` and the round's ``usage``.

Bounds: at most ``max_rounds`` rounds (settings), ``max_pages`` pages and ``read_budget`` tokens
for all rounds together, and, with a model, at most ``max_calls`` model calls spent choosing pages
(a further round is started only when its call fits). A round that adds no page ends the loop.
Pages named by the caller (``paths``) are read as named: no further round. Every page is read
through ``read_pages`` (``store.pages.load_page`` with the reader), and only pages of the
reader's catalog are ever candidates.
"""

from __future__ import annotations

from functools import partial
from typing import AsyncIterator

import anyio

from kb_ai.llm.tokens import estimate_tokens
from kb_ai.llm.usage import UsageMeter
from kb_ai.navigate.read import MIN_USEFUL_TOKENS, read_pages
from kb_ai.navigate.records import AskEvent, ReadPage, Selection

FIRST_ROUND_WHY = {
    "llm": "chosen by the model from the catalog",
    "lexical": "keyword search",
    "lexical-fallback": "keyword search (the model's selection failed)",
    "given": "named in the request",
}


def round_usage(meter: UsageMeter, before: tuple[int, int, int]) -> dict[str, int]:
    """The model calls and tokens spent since ``before`` (``usage_mark``)."""
    calls, prompt, completion = usage_mark(meter)
    return {"llm_calls": calls - before[0], "prompt_tokens": prompt - before[1], "completion_tokens": completion - before[2]}


def usage_mark(meter: UsageMeter) -> tuple[int, int, int]:
    return meter.llm_calls, meter.prompt_tokens, meter.completion_tokens


def pages_event(pages: list[ReadPage], selection: Selection, number: int, added: list[ReadPage],
                usage: dict[str, int]) -> AskEvent:
    """The ``pages`` event of round ``number``: every page read so far, and what this round added, why."""
    why = selection.why or FIRST_ROUND_WHY.get(selection.method, selection.method)
    data = {"pages": [p.ref() for p in pages], "method": selection.method, "round": number,
            "why": why, "added": [p.path for p in added], "usage": usage}
    if selection.match:  # how strongly the keyword evidence matches ("strong" | "weak")
        data["match"] = selection.match
    return AskEvent("pages", data)


async def further_rounds(service, request, query: str, catalog, pages: list[ReadPage], latest: list[ReadPage],
                         meter: UsageMeter) -> AsyncIterator[AskEvent]:
    """Rounds 2..``max_rounds``: events (``notice``, ``pages``); ``pages`` grows in place."""
    settings = service.settings
    navigator = service.navigator
    follow_up = getattr(navigator, "follow_up", None)
    if follow_up is None or request.paths:
        return
    max_pages = request.max_pages or settings.max_pages
    for number in range(2, settings.max_rounds + 1):
        # Each round after this one keeps a page of its own (offline round 1 leaves them too).
        slots = min(max_pages - len(pages), max(1, max_pages - len(pages) - (settings.max_rounds - number)))
        remaining = settings.read_budget - sum(estimate_tokens(p.text) for p in pages)
        if not latest or slots <= 0 or remaining < MIN_USEFUL_TOKENS:
            return
        if navigator.mode == "llm" and not meter.model_down and meter.llm_calls + 1 > settings.max_calls:
            yield AskEvent("notice", {"message": f"No further round of reading: the {settings.max_calls} model calls "
                                                 "a question may spend choosing pages are used up."})
            return
        mark = usage_mark(meter)
        selection = await follow_up(query, catalog, pages, latest, slots, meter)
        for message in selection.notices:
            yield AskEvent("notice", {"message": message})
        read = {p.path for p in pages}
        wanted = [p for p in selection.paths if p not in read][:slots]
        if not wanted:
            return  # the round adds nothing: the pages read are all there is to read
        more, notices = await anyio.to_thread.run_sync(
            partial(read_pages, service.kb, wanted, remaining, query, catalog=catalog, reader=request.reader))
        more = [p for p in more if p.path not in read][:slots]
        for message in notices:
            yield AskEvent("notice", {"message": message})
        if not more:
            return
        pages.extend(more)
        latest = more
        yield pages_event(pages, selection, number, more, round_usage(meter, mark))
