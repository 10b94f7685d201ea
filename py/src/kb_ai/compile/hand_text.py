"""What a person wrote in an article: the lines (and summary, tags) of the file now that are
not in the text kaas last wrote, tracked by hash from run to run (``HandText``), so that no writer
can drop them (``writers.guard_body``)."""


import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from kb_ai.errors import ArticleFormatError
from kb_ai.llm.plausible import one_line
from kb_ai.store.articles import (
    jsonable,
    split_frontmatter,
)
from kb_ai.store.sentences import clip


# hand-written text


_SUMMARY_MARK = "\x00summary\x00"
_TAG_MARK = "\x00tag\x00"


def _line_key(line: str) -> str:
    return hashlib.sha256(line.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _text_lines(meta: dict[str, Any], body: str) -> tuple[Counter, Counter, dict[str, str]]:
    """(body line keys, frontmatter keys: summary and tags, key -> line): the units a person's
    edit is tracked in. A line is compared stripped; blank lines do not count."""
    shown: dict[str, str] = {}
    lines: Counter = Counter()
    for line in body.splitlines():
        if line.strip():
            key = _line_key(line.strip())
            lines[key] += 1
            shown.setdefault(key, line.strip())
    fields: Counter = Counter()
    summary = meta.get("summary")
    if _present(summary):
        key = _summary_key(summary)
        fields[key] = 1
        shown[key] = f"summary: {clip(_value_text(summary), 200)}"
    tags = meta.get("tags")
    if isinstance(tags, list):
        for tag in _string_list(tags):
            key = _line_key(_TAG_MARK + tag)
            fields[key] = 1
            shown[key] = f"tag: {tag}"
    elif _present(tags):  # ``tags: release`` (one string, as Jekyll and Hugo take it), or any other value
        key = _tags_value_key(tags)
        fields[key] = 1
        shown[key] = f"tags: {clip(_value_text(tags), 200)}"
    return lines, fields, shown


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, str) and not value.strip()) and value != [] and value != {}


def _value_text(value: Any) -> str:
    """A frontmatter value as one comparable line: a string as shown (one line), anything else
    (a number, a list, a date) as its JSON, so ``1984`` and ``"1984"`` are different values."""
    if isinstance(value, str):
        return one_line(value)
    return json.dumps(jsonable(value), sort_keys=True, ensure_ascii=False)


def _summary_key(value: Any) -> str:
    return _line_key(_SUMMARY_MARK + _value_text(value))


def _tags_value_key(value: Any) -> str:
    return _line_key(_TAG_MARK + "\x00value\x00" + _value_text(value))


@dataclass
class HandText:
    """The lines (and summary, tags) of an article a person wrote: those of the file now that are
    not in the text kaas last wrote (``.kaas/written/``; without it, every line), plus those
    recorded as hand-written by earlier runs that are still there. Kept by hash in the manifest
    (``ArticleRecord.hand_lines``), so text merged once stays protected from later model edits."""

    lines: Counter  # body line key -> count
    fields: Counter  # summary/tag key -> 1
    shown: dict[str, str]

    @classmethod
    def of(cls, meta: dict[str, Any], body: str, written: str | None, carried: list[str], edited: bool,
           label: str) -> "HandText":
        lines, fields, shown = _text_lines(meta, body)
        if not edited:
            fresh_lines, fresh_fields = Counter(), Counter()
        elif written is None:
            fresh_lines, fresh_fields = lines, fields  # what kaas wrote is not known: all of it
        else:
            try:
                old_meta, old_body = split_frontmatter(written, label)
            except ArticleFormatError:
                old_meta, old_body = {}, written
            old_lines, old_fields, _ = _text_lines(old_meta, old_body)
            fresh_lines, fresh_fields = lines - old_lines, fields - old_fields
        kept = Counter(carried)
        return cls(fresh_lines | (kept & lines), fresh_fields | (kept & fields), shown)

    def __bool__(self) -> bool:
        return bool(self.lines or self.fields)

    def keys(self) -> list[str]:
        return sorted((self.lines + self.fields).elements())

    def summary_kept(self, summary: Any) -> bool:
        return _present(summary) and _summary_key(summary) in self.fields

    def tags_value_kept(self, tags: Any) -> bool:
        """Whether ``tags`` is a value a person wrote that is not a list (kept as it is)."""
        return not isinstance(tags, list) and _present(tags) and _tags_value_key(tags) in self.fields

    def tags_kept(self, tags: list[str]) -> list[str]:
        return [t for t in tags if _line_key(_TAG_MARK + t) in self.fields]

    def lost_in(self, body: str) -> list[str]:
        """The hand-written lines ``body`` no longer has."""
        now, _, _ = _text_lines({}, body)
        return [self.shown.get(k, k) for k, n in self.lines.items() if now[k] < n]


def _string_list(value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value if v is not None and str(v).strip()]
    return [str(value)] if value else []
