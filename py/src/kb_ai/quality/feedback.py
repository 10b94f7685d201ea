"""Thumbs up/down on answers: ``.kaas/feedback.jsonl``, and which questions the wiki failed.

The chat UI sends a vote with the question, the pages read for the answer and those it cited
(``POST /api/feedback``); ``kaas feedback`` reports the questions voted down, most recent first,
with the pages that were read and cited, so the owner can see what to add or fix.

A record is validated before it is written (types, lengths, page paths in wiki/ form; a vote
larger than ``MAX_VOTE_BYTES`` stored, or a text over its length, is ``VoteTooLargeError``, HTTP
413 ``vote_too_large``), then kept by ``feedback_store.record_feedback``: one line per vote, the
file bounded, and what is dropped to bound it chosen per user, so that no one user can push
anyone else's votes out.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb_ai.errors import BadRequestError, KaasError, UnsafePathError
from kb_ai.quality.feedback_store import FEEDBACK_FILE, Retention, read_lines, record_feedback
from kb_ai.store.paths import normalize_wiki_path

__all__ = ["FEEDBACK_FILE", "Retention", "VoteTooLargeError", "feedback_record", "feedback_report", "record_feedback"]

MAX_QUESTION_CHARS = 4_000  # as for asking (navigate/ask.py)
MAX_ANSWER_CHARS = 2_000  # what the answer said, enough to recognise it; the UI sends its first 2,000 characters
MAX_COMMENT_CHARS = 2_000
MAX_PATHS = 50
MAX_VOTE_BYTES = 16_000  # one stored vote, its JSON line in UTF-8
VOTES = ("up", "down")


class VoteTooLargeError(KaasError):
    """A vote, or one of its texts, is larger than a vote may be."""

    code = "vote_too_large"
    http_status = 413


def _text(payload: dict, name: str, limit: int, *, required: bool) -> str:
    value = payload.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise BadRequestError(f"'{name}' must be a non-empty string" if required else f"'{name}' must be a string")
    if len(value) > limit:
        raise VoteTooLargeError(f"'{name}' is longer than {limit:,} characters")
    return value.strip()


def _paths(payload: dict, name: str) -> list[str]:
    value = payload.get(name) or []
    if not isinstance(value, list) or len(value) > MAX_PATHS:
        raise BadRequestError(f"'{name}' must be a list of at most {MAX_PATHS} page paths")
    paths: list[str] = []
    for item in value:
        raw = item.get("path") if isinstance(item, dict) else item
        if not isinstance(raw, str):
            raise BadRequestError(f"'{name}' must hold page paths")
        try:
            path = normalize_wiki_path(raw)
        except UnsafePathError as exc:
            raise BadRequestError(f"not a page path in '{name}': {exc.message}") from None
        if path not in paths:
            paths.append(path)
    return paths


def feedback_record(payload: Any, user: str, *, now: dt.datetime | None = None) -> dict[str, Any]:
    """The line to store for a vote sent from outside, or ``BadRequestError``."""
    if not isinstance(payload, dict):
        raise BadRequestError('send {"vote": "up"|"down", "question", "answer", "pages": [...], "citations": [...]}')
    vote = payload.get("vote")
    if vote not in VOTES:
        raise BadRequestError("'vote' must be \"up\" or \"down\"")
    mode = payload.get("mode") if payload.get("mode") in ("llm", "offline") else None
    stamp = (now or dt.datetime.now(dt.timezone.utc)).replace(microsecond=0)
    record = {
        "time": stamp.isoformat().replace("+00:00", "Z"),
        "vote": vote,
        "question": _text(payload, "question", MAX_QUESTION_CHARS, required=True),
        "answer": _text(payload, "answer", MAX_ANSWER_CHARS, required=False),
        "comment": _text(payload, "comment", MAX_COMMENT_CHARS, required=False),
        "pages": _paths(payload, "pages"),
        "citations": _paths(payload, "citations"),
        "mode": mode,
        "user": user,
    }
    size = len(json.dumps(record, ensure_ascii=False).encode("utf-8"))
    if size > MAX_VOTE_BYTES:
        raise VoteTooLargeError(f"the vote is {size:,} bytes; a vote may be at most {MAX_VOTE_BYTES:,} "
                                "(a shorter comment, answer or list of pages)")
    return record


@dataclass
class QuestionFeedback:
    question: str
    down: int = 0
    up: int = 0
    last: str = ""
    pages: list[str] = field(default_factory=list)
    citations: list[str] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class FeedbackReport:
    votes: int = 0
    down: int = 0
    up: int = 0
    damaged_lines: int = 0
    questions: list[QuestionFeedback] = field(default_factory=list)  # voted down at least once

    def to_json(self) -> dict[str, Any]:
        return {"votes": self.votes, "down": self.down, "up": self.up, "damaged_lines": self.damaged_lines,
                "failed_questions": [q.to_json() for q in self.questions]}

    def render_text(self) -> str:
        lines = [f"feedback: {self.votes} votes ({self.up} up, {self.down} down) in .kaas/{FEEDBACK_FILE}"]
        if self.damaged_lines:
            lines.append(f"warning: {self.damaged_lines} lines could not be read and were left out")
        if not self.questions:
            lines.append("no question was voted down")
            return "\n".join(lines)
        lines += ["", "questions the wiki failed (voted down), most recent first:"]
        for q in self.questions:
            lines.append(f"  - {q.question}")
            lines.append(f"      {q.down} down, {q.up} up; last {q.last}")
            lines.append(f"      pages read: {', '.join(q.pages) or 'none'}")
            lines.append(f"      cited: {', '.join(q.citations) or 'none'}")
            for comment in q.comments[-3:]:
                lines.append(f"      comment: {comment}")
        return "\n".join(lines)


def feedback_report(state_dir: Path) -> FeedbackReport:
    """Every vote of ``.kaas/feedback.jsonl`` (and a ``feedback.1.jsonl`` of an earlier version), by question."""
    report = FeedbackReport()
    by_question: OrderedDict[str, QuestionFeedback] = OrderedDict()
    for raw in read_lines(Path(state_dir)):
        try:
            record = json.loads(raw)
            vote, question = record["vote"], " ".join(str(record["question"]).split())
            if vote not in VOTES or not question:
                raise ValueError(vote)
        except (ValueError, KeyError, TypeError):
            report.damaged_lines += 1
            continue
        report.votes += 1
        entry = by_question.pop(question.casefold(), None) or QuestionFeedback(question)
        by_question[question.casefold()] = entry  # moved to the end: most recent last
        setattr(entry, vote, getattr(entry, vote) + 1)
        setattr(report, vote, getattr(report, vote) + 1)
        entry.last = str(record.get("time") or "")
        if vote == "down":
            entry.pages = [str(p) for p in record.get("pages") or []][:MAX_PATHS]
            entry.citations = [str(p) for p in record.get("citations") or []][:MAX_PATHS]
            if record.get("comment"):
                entry.comments.append(str(record["comment"]))
    report.questions = [q for q in reversed(by_question.values()) if q.down]
    return report
