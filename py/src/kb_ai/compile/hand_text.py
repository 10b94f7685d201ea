"""What a person wrote in an article: the lines (and summary, tags) of the file now that are
not in the text kaas last wrote, tracked by hash from run to run (``HandText``), so that no writer
can drop them (``writers.guard_body``)."""


import hashlib
import json
from collections import Counter
from difflib import SequenceMatcher
from dataclasses import dataclass
from typing import Any

from kb_ai.compile.dedup import blocks
from kb_ai.errors import ArticleFormatError
from kb_ai.llm.plausible import one_line
from kb_ai.store.articles import (
    jsonable,
    split_frontmatter,
)
from kb_ai.store.sentences import clip
from kb_ai.store.words import words


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
    # The body kaas last wrote (what the hand edits were made to); None when it is not known.
    base: str | None = None

    @classmethod
    def of(cls, meta: dict[str, Any], body: str, written: str | None, carried: list[str], edited: bool,
           label: str) -> "HandText":
        lines, fields, shown = _text_lines(meta, body)
        base: str | None = body
        if not edited:
            fresh_lines, fresh_fields = Counter(), Counter()
        elif written is None:
            fresh_lines, fresh_fields = lines, fields  # what kaas wrote is not known: all of it
            base = None
        else:
            try:
                old_meta, old_body = split_frontmatter(written, label)
            except ArticleFormatError:
                old_meta, old_body = {}, written
            old_lines, old_fields, _ = _text_lines(old_meta, old_body)
            fresh_lines, fresh_fields = lines - old_lines, fields - old_fields
            base = old_body
        kept = Counter(carried)
        return cls(fresh_lines | (kept & lines), fresh_fields | (kept & fields), shown, base)

    def in_block(self, block: str) -> bool:
        """Whether a person wrote any line of ``block``."""
        return any(line.strip() and _line_key(line.strip()) in self.lines for line in block.splitlines())

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


# ---------------------------------------------------------------------------------------------
# offline: the source's new text merged around what a person wrote


def merge_base(hand: "HandText | None", body: str) -> str:
    """What a source's new text is merged into when the article ``body`` was edited by hand:
    the body kaas last wrote without the blocks a person wrote earlier (they are the person's,
    not the source's, so a new source version never supersedes them); ``body`` itself when what
    kaas wrote is not known (every line then counts as hand-written)."""
    if hand is None or hand.base is None:
        return body
    return "\n\n".join(b for b in blocks(hand.base) if not hand.in_block(b)) + "\n"


def hand_conflict(source: str, count: int) -> str:
    """The report line of a merge with conflicts (said once: the next run finds nothing to merge)."""
    parts = "a part" if count == 1 else f"{count} parts"
    return (f"{source} changed {parts} that had been edited by hand: the hand-edited text is kept and the "
            "source's new text added below it, after a line \"[New in ...]\"; edit the article to keep "
            "the version you want (and delete that line)")


def merge_around_hand(base: str, ours: str, theirs: str, hand: "HandText | None", note: str) -> tuple[str, int]:
    """A three-way merge by block (blank-line separated; a fenced block is one): ``base`` (from
    ``merge_base``), ``ours`` (the article as a person left it), ``theirs`` (``base`` with the
    source's new text merged in: changed sentences replaced with trail lines, new sections).

    A part only the person changed keeps the person's text, a part only the source changed
    takes the source's, text both added goes in (the person's first). Where both changed the
    same part (or the source changed a part a person wrote), the person's text is kept verbatim,
    then ``note`` (a line saying what follows), then the source's new text: a conflict. Returns
    (body, number of conflicts)."""
    old, mine, new = blocks(base), blocks(ours), blocks(theirs)
    mine_changes, mine_same = _changes(old, mine)
    new_changes = _changes(old, new)[0]
    out: list[str] = []
    conflicts = 0
    position = 0
    for lo, hi, group in _groups(mine_changes, new_changes):
        out += [mine[mine_same[i]] for i in range(position, lo)]
        position = hi
        sides = {side for side, _ in group}
        mine_part = _region(old, mine, mine_same, [c for s, c in group if s == "mine"], lo, hi)
        new_part = _region(old, mine, mine_same, [c for s, c in group if s == "new"], lo, hi)
        touches_hand = hand is not None and any(hand.in_block(b) for b in old[lo:hi])
        if sides == {"mine"}:
            out += mine_part
        elif sides == {"new"} and not touches_hand:
            out += new_part
        elif [_norm(b) for b in mine_part] == [_norm(b) for b in new_part]:
            out += mine_part
        else:
            kept = {_norm(b) for b in mine_part}
            added = [b for s, c in group if s == "new" for b in c[2] if _norm(b) not in kept]
            out += mine_part + ([note] + added if added else [])
            conflicts += 1 if added else 0
    out += [mine[mine_same[i]] for i in range(position, len(old))]
    return "\n\n".join(b.strip("\n") for b in out if b.strip()).strip() + "\n", conflicts


def _norm(block: str) -> str:
    return " ".join(words(block)) or block.strip()


def _changes(old: list[str], side: list[str]) -> tuple[list[tuple[int, int, list[str]]], dict[int, int]]:
    """The changes of ``side`` against ``old``: ([(start, end, blocks in their place)], the
    index in ``side`` of each block of ``old`` kept as it is)."""
    matcher = SequenceMatcher(None, [_norm(b) for b in old], [_norm(b) for b in side], autojunk=False)
    changes: list[tuple[int, int, list[str]]] = []
    same: dict[int, int] = {}
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            same.update({i1 + k: j1 + k for k in range(i2 - i1)})
        elif op == "replace":
            changes += _paired(old, side, i1, i2, j1, j2)
        else:
            changes.append((i1, i2, side[j1:j2]))
    return changes, same


MAX_PAIRING = 400  # block pairs compared to split one replaced run; a larger run stays one change


def _paired(old: list[str], side: list[str], i1: int, i2: int, j1: int, j2: int) -> list[tuple[int, int, list[str]]]:
    """A run of blocks ``old[i1:i2]`` replaced by ``side[j1:j2]`` split into one change per old
    block: each new block goes with the old block it is most like (in order; a trail line quotes
    the block it replaced), so a person's edit of one paragraph conflicts only with a change of
    that paragraph, not with its neighbours'."""
    if (i2 - i1) * (j2 - j1) > MAX_PAIRING or i2 - i1 < 2:
        return [(i1, i2, side[j1:j2])]
    assigned: dict[int, list[str]] = {i: [] for i in range(i1, i2)}
    floor = i1
    for j in range(j1, j2):
        new_words = words(side[j])
        scores = [(SequenceMatcher(None, words(old[i]), new_words, autojunk=False).ratio(), i) for i in range(floor, i2)]
        score, best = max(scores, key=lambda t: (t[0], -t[1]))
        floor = best if score >= 0.4 else floor
        assigned[floor].append(side[j])
    return [(i, i + 1, assigned[i]) for i in range(i1, i2)]


def _groups(mine: list, new: list) -> list[tuple[int, int, list[tuple[str, tuple]]]]:
    """The changes of both sides in order, those that overlap one another grouped: [(start,
    end, [(side, change)])]. Two insertions at one place, or an insertion where the other side's
    change begins or ends, do not overlap (both go in)."""
    tagged = sorted([("mine", c) for c in mine] + [("new", c) for c in new],
                    key=lambda t: (t[1][0], t[1][1] > t[1][0], t[0] != "mine"))
    groups: list[tuple[int, int, list]] = []
    for side, change in tagged:
        lo, hi = change[0], change[1]
        if groups and _overlaps(groups[-1][0], groups[-1][1], lo, hi):
            start, end, members = groups[-1]
            groups[-1] = (min(start, lo), max(end, hi), members + [(side, change)])
        else:
            groups.append((lo, hi, [(side, change)]))
    return groups


def _overlaps(start: int, end: int, lo: int, hi: int) -> bool:
    if start == end or lo == hi:  # an insertion: inside the other change only
        return start < lo < end or lo < start < hi
    return lo < end and start < hi


def _region(old: list[str], mine: list[str], mine_same: dict[int, int], changes: list, lo: int,
            hi: int) -> list[str]:
    """One side's text for the blocks ``lo``..``hi`` of ``old``: its ``changes`` there applied,
    the blocks it did not change as the person has them."""
    out: list[str] = []
    position = lo
    for start, end, replacement in sorted(changes, key=lambda c: (c[0], c[1] > c[0])):
        out += [mine[mine_same[i]] if i in mine_same else old[i] for i in range(position, start)]
        out += replacement
        position = max(position, end)
    out += [mine[mine_same[i]] if i in mine_same else old[i] for i in range(position, hi)]
    return out
