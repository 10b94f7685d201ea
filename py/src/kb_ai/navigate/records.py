"""The records that flow through an ask: request, selection, pages read, citations, events, and
the result they fold into (``ask``). Light on purpose: ``kaas ask`` answered by a running
``kaas serve`` imports this and nothing of the pipeline."""

from __future__ import annotations

import inspect
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Protocol

from kb_ai.store.access import OWNER, Reader


@dataclass(frozen=True)
class Turn:
    role: str  # "user" | "assistant"
    content: str


@dataclass
class AskRequest:
    question: str
    history: list[Turn] = field(default_factory=list)
    rewrite: bool = False
    suggest: bool = False
    max_pages: int | None = None
    paths: list[str] | None = None  # read exactly these pages, skipping navigation
    reader: Reader = OWNER  # who asks: only the pages this reader may read exist for the question
    model_only: bool = False  # a model's answer or an error: never the offline extract in its place


@dataclass
class Selection:
    """The pages chosen for a question, best first, and how they were chosen."""

    paths: list[str]
    method: str  # "llm" | "lexical" | "lexical-fallback" | "given"
    dropped: list[str] = field(default_factory=list)  # paths the model invented or that left the wiki
    repaired: dict[str, str] = field(default_factory=dict)  # model's path -> catalog path
    notices: list[str] = field(default_factory=list)
    why: str = ""  # one line for the reader: why these pages (the ``pages`` event's ``why``)
    # The navigator judged that the wiki does not cover the question (``offline.coverage``):
    # nothing is read, and ``related`` (the closest pages) are shown as related, not as an answer.
    abstained: bool = False
    related: list[str] = field(default_factory=list)
    # How strongly the keyword evidence matches the question (``offline.coverage.Coverage.match``):
    # "strong" | "weak"; "" when not judged (a model's selection, given pages).
    match: str = ""
    shown: list[str] = field(default_factory=list)  # catalog paths the model chose from, in its order


@dataclass(frozen=True)
class ReadPage:
    """A page as the answerer saw it: whole, or trimmed with a visible note."""

    path: str
    title: str
    text: str
    truncated: bool = False
    omitted_sections: tuple[str, ...] = ()
    kind: str = "article"  # "answer" = a saved answer: navigation, never evidence
    body: str = ""  # the page's whole body as stored (``text`` may be shortened): citations' offsets are in it

    @property
    def is_evidence(self) -> bool:
        return self.kind != "answer"

    def ref(self) -> dict[str, Any]:
        ref: dict[str, Any] = {"path": self.path, "title": self.title}
        if self.truncated:
            ref["truncated"] = True
        if not self.is_evidence:
            ref["kind"] = self.kind
        return ref


@dataclass(frozen=True)
class Citation:
    """A page an answer cites, and where in it: ``passages`` are the passages its links' sentences
    stand on (``navigate.citations``), each ``{"anchor", "heading", "quote", "start", "end",
    "links"}`` — ``anchor`` the id of the heading it is under in the rendered page (None: the
    page's lead), ``quote`` its text as a reader sees it, ``start``/``end`` its offsets in the
    page body (frontmatter removed), ``links`` which links to this page in the answer cite it
    (0: the first). The first passage is also given at the top (``anchor``, ``quote``, ...)."""

    path: str
    title: str
    passages: tuple[dict[str, Any], ...] = ()
    # kaas attached it (``navigate.attribution``): the answer restates the page but cites it nowhere.
    attributed: bool = False

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "title": self.title}
        if self.attributed:
            out["attributed"] = True
        if self.passages:
            first = self.passages[0]
            out.update({key: first[key] for key in ("anchor", "heading", "quote", "start", "end")})
            out["passages"] = [dict(p) for p in self.passages]
        return out


@dataclass(frozen=True)
class AskEvent:
    """One event of an answer, named as the SSE events of the HTTP API."""

    name: str  # rewrite | pages | notice | abstained | offline | token | citations | suggestions | usage | error | done
    data: dict[str, Any]


@dataclass
class AskResult:
    """Everything an ask produced, collected from its events (for --json, MCP, tests)."""

    answer: str = ""
    citations: list[dict[str, Any]] = field(default_factory=list)
    invalid_citations: list[str] = field(default_factory=list)
    pages: list[dict[str, Any]] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    rewritten_query: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    mode: str = "offline"
    error: dict[str, str] | None = None
    saved_path: str | None = None  # set when the answer was filed into wiki/answers/
    method: str | None = None  # how the pages were chosen (``Selection.method``); not in to_json
    # One entry per ``pages`` event (round of reading): {"round", "why", "added", "method", "usage"}.
    rounds: list[dict[str, Any]] = field(default_factory=list)
    abstained: bool = False  # the answer is "the wiki does not cover this" (an ``abstained`` event, or
    # a ``citations`` event saying no sentence of the answer is supported by the pages read)
    unsupported: list[dict[str, Any]] = field(default_factory=list)  # answer sentences no page read supports
    related: list[dict[str, Any]] = field(default_factory=list)  # closest pages then: not an answer
    offline: dict[str, str] | None = None  # {"reason", "message"}: the model failed, the answer is the offline extract
    match: str | None = None  # "strong" | "weak": how well the keyword evidence matches (offline selection)

    def add(self, event: AskEvent) -> None:
        """Fold one event into the result (what ``navigate.ask.ask`` does with each)."""
        data = event.data
        if event.name == "token":
            self.answer += data["text"]
        elif event.name == "pages":
            self.pages = list(data["pages"])  # every page read so far: the last event has them all
            if self.method is None or data.get("round", 1) == 1:
                self.method = data.get("method", self.method)
                self.match = data.get("match", self.match)
            self.rounds.append({"round": data.get("round", len(self.rounds) + 1), "why": data.get("why", ""),
                                "added": list(data.get("added", [p["path"] for p in data["pages"]])),
                                "method": data.get("method"), "usage": dict(data.get("usage") or {})})
        elif event.name == "citations":
            self.citations = list(data["citations"])
            self.invalid_citations = list(data.get("invalid", []))
            self.unsupported = list(data.get("unsupported", []))
            if data.get("abstained"):  # no sentence of the answer is supported by the pages read
                self.abstained = True
        elif event.name == "suggestions":
            self.suggestions = list(data["questions"])
        elif event.name == "notice":
            self.notices.append(data["message"])
        elif event.name == "abstained":
            self.abstained = True
            self.related = list(data.get("related", []))
        elif event.name == "offline":
            self.offline = {"reason": data["reason"], "message": data["message"]}
        elif event.name == "rewrite":
            self.rewritten_query = data["query"]
        elif event.name == "usage":
            self.usage = dict(data)
            self.mode = data.get("mode", self.mode)
        elif event.name == "error":
            self.error = dict(data)

    def to_json(self) -> dict[str, Any]:
        """The object printed by ``kaas ask --json`` (DESIGN.md), plus diagnostic keys."""
        out: dict[str, Any] = {
            "answer": self.answer,
            "citations": self.citations,
            "pages": self.pages,
            "mode": self.mode,
            "usage": self.usage,
            "invalid_citations": self.invalid_citations,
            "notices": self.notices,
            "suggestions": self.suggestions,
            "rounds": self.rounds,
            "abstained": self.abstained,
            "related": self.related,
            "unsupported": self.unsupported,
        }
        if self.rewritten_query is not None:
            out["rewritten_query"] = self.rewritten_query
        if self.saved_path is not None:
            out["saved_path"] = self.saved_path
        if self.offline is not None:
            out["offline"] = self.offline
        if self.match is not None:
            out["match"] = self.match
        if self.error:
            out["error"] = self.error
        return out


class EventSource(Protocol):
    """Where the events of one question come from: this process's ``navigate.ask.AskService``,
    or a running ``kaas serve`` asked over loopback (``cli.py``)."""

    @property
    def mode(self) -> str:
        """"llm" | "offline": the result's mode until its ``usage`` event says otherwise."""

    def events(self, request: AskRequest) -> AsyncIterator[AskEvent]:
        """The events of ``request``, in the order ``navigate.ask.ask_events`` documents."""


OnEvent = Callable[[AskEvent], "Awaitable[None] | None"]


async def ask(service: EventSource, request: AskRequest, on_event: OnEvent | None = None) -> AskResult:
    """Answer ``request`` and fold every event into one result. ``on_event`` (plain or async) sees
    each event as it arrives, after it was added to the result: to print tokens, report progress.
    An ask that fails is a result with ``error`` set, not an exception; what ``service`` raises
    before its first event (a server that is gone) is raised."""
    result = AskResult(mode=service.mode)
    async with aclosing(service.events(request)) as events:
        async for event in events:
            result.add(event)
            if on_event is not None:
                shown = on_event(event)
                if inspect.isawaitable(shown):
                    await shown
    return result
