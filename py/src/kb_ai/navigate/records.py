"""The records that flow through an ask: request, selection, pages read, citations, events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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


@dataclass
class Selection:
    """The pages chosen for a question, best first, and how they were chosen."""

    paths: list[str]
    method: str  # "llm" | "lexical" | "lexical-fallback" | "given"
    dropped: list[str] = field(default_factory=list)  # paths the model invented or that left the wiki
    repaired: dict[str, str] = field(default_factory=dict)  # model's path -> catalog path
    notices: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ReadPage:
    """A page as the answerer saw it: whole, or trimmed with a visible note."""

    path: str
    title: str
    text: str
    truncated: bool = False
    omitted_sections: tuple[str, ...] = ()
    kind: str = "article"  # "answer" = a saved answer: navigation, never evidence

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
    path: str
    title: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "title": self.title}


@dataclass(frozen=True)
class AskEvent:
    """One event of an answer, named as the SSE events of the HTTP API."""

    name: str  # rewrite | pages | notice | token | citations | suggestions | usage | error | done
    data: dict[str, Any]


@dataclass
class AskResult:
    """Everything an ask produced, collected from its events (for --json, MCP, tests)."""

    answer: str = ""
    citations: list[dict[str, str]] = field(default_factory=list)
    invalid_citations: list[str] = field(default_factory=list)
    pages: list[dict[str, Any]] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    rewritten_query: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    mode: str = "offline"
    error: dict[str, str] | None = None
    saved_path: str | None = None  # set when the answer was filed into wiki/answers/

    def add(self, event: AskEvent) -> None:
        data = event.data
        if event.name == "token":
            self.answer += data["text"]
        elif event.name == "pages":
            self.pages = list(data["pages"])
        elif event.name == "citations":
            self.citations = list(data["citations"])
            self.invalid_citations = list(data.get("invalid", []))
        elif event.name == "suggestions":
            self.suggestions = list(data["questions"])
        elif event.name == "notice":
            self.notices.append(data["message"])
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
        }
        if self.rewritten_query is not None:
            out["rewritten_query"] = self.rewritten_query
        if self.saved_path is not None:
            out["saved_path"] = self.saved_path
        if self.error:
            out["error"] = self.error
        return out
