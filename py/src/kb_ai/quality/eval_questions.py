"""The questions file of ``kaas eval`` (JSON lines), read and checked.

Each line of the file is one JSON object::

    {"question": "...", "gold_pages": ["topic/page.md" or "Page title", ...],
     "answer": "short gold answer", "answer_aliases": ["..."], "answerable": true, "id": "..."}

Only ``question`` is required. ``gold_titles`` is accepted for ``gold_pages`` (HotpotQA files).
Any other key is ignored with a warning that names it and the keys expected (in the table, the
JSON report and on stderr): a typo such as ``gold`` must not silently leave recall unmeasured.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb_ai.errors import KaasError
from kb_ai.files import read_named_text
from kb_ai.untrusted_text import parse_json

MAX_QUESTIONS_FILE_BYTES = 50_000_000
MAX_QUESTION_DEPTH = 16  # a question line is an object of strings and lists of strings
MAX_KEY_SHOWN = 60  # characters of an unknown key named in a warning

KNOWN_KEYS = ("question", "gold_pages", "gold_titles", "answer", "answer_aliases", "facts", "answerable", "id")


@dataclass
class EvalQuestion:
    question: str
    gold_pages: list[str] = field(default_factory=list)
    answer: str | None = None
    aliases: list[str] = field(default_factory=list)
    answerable: bool = True
    id: str = ""
    facts: list[str] = field(default_factory=list)  # every one must be in a correct answer


def _string_list(value: Any, name: str, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise KaasError(f"{where}: {name} must be a list of strings")


def parse_questions(text: str, label: str = "questions", warnings: list[str] | None = None) -> list[EvalQuestion]:
    """Parse JSON lines (blank lines and ``#`` comments skipped); errors name the line. Keys
    that are not ``KNOWN_KEYS`` are ignored, one warning per key appended to ``warnings``."""
    questions: list[EvalQuestion] = []
    unknown: dict[str, list[int]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{label} line {number}"
        try:
            data = parse_json(line, MAX_QUESTION_DEPTH)
        except ValueError as exc:
            raise KaasError(f"{where}: {exc}") from None
        if not isinstance(data, dict):
            raise KaasError(f"{where}: expected a JSON object")
        for key in data:
            if key not in KNOWN_KEYS:
                unknown.setdefault(str(key), []).append(number)
        question = data.get("question")
        if not isinstance(question, str) or not question.strip():
            raise KaasError(f"{where}: missing \"question\"")
        gold = data.get("gold_pages", data.get("gold_titles"))
        answer = data.get("answer")
        if answer is not None and not isinstance(answer, str):
            answer = str(answer)
        answerable = data.get("answerable", True)
        if not isinstance(answerable, bool):
            raise KaasError(f"{where}: answerable must be true or false")
        questions.append(EvalQuestion(
            question=question.strip(),
            gold_pages=_string_list(gold, "gold_pages", where),
            answer=answer if answer else None,
            aliases=_string_list(data.get("answer_aliases"), "answer_aliases", where),
            answerable=answerable,
            id=str(data.get("id", number)),
            facts=_string_list(data.get("facts"), "facts", where),
        ))
    if warnings is not None:
        warnings.extend(_unknown_key_warning(label, key, lines) for key, lines in unknown.items())
    return questions


def _unknown_key_warning(label: str, key: str, lines: list[int]) -> str:
    where = ", ".join(str(n) for n in lines[:5]) + (f" and {len(lines) - 5} more" if len(lines) > 5 else "")
    close = [k for k in KNOWN_KEYS if k.startswith(key.lower()) or key.lower().startswith(k)]
    close = close or difflib.get_close_matches(key.lower(), KNOWN_KEYS, n=1, cutoff=0.6)
    hint = f" — did you mean {close[0]!r}?" if close else ""
    if len(key) > MAX_KEY_SHOWN:
        key = key[:MAX_KEY_SHOWN] + f"… ({len(key):,} characters)"
    return (f"{label}: unknown key {key!r} ignored (line{'s' if len(lines) > 1 else ''} {where}){hint}; "
            f"expected keys: {', '.join(KNOWN_KEYS)}")


def load_questions(path: Path, warnings: list[str] | None = None) -> list[EvalQuestion]:
    text = read_named_text(path, MAX_QUESTIONS_FILE_BYTES)
    questions = parse_questions(text, path.name, warnings)
    if not questions:
        raise KaasError(f"{path}: no questions")
    return questions
