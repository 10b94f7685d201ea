"""``.kaas/feedback.jsonl``: the votes, one JSON line each, kept so that no one user can erase
anyone else's.

The file is bounded in total (``Retention.max_bytes``), but what is dropped to stay within it is
chosen per user, never by total bytes alone:

- a vote older than ``Retention.days`` is dropped;
- each user keeps at most ``Retention.per_user`` votes: a new vote past that drops that user's
  own oldest;
- when the file would grow past ``max_bytes``, votes are dropped, oldest first, from whichever
  user holds the most bytes at that moment, until it is down to three quarters of it (so this
  happens once in a while, not at every vote). A user who floods the file therefore only pushes
  out their own votes, as long as anyone else holds less than they do.

A vote is appended as one line in one write (``files.append_state_text``: a failed write is cut
back, no torn line). When a rule above drops something, the whole file is rewritten atomically
(``files.write_state_bytes``: temp file, fsync, rename). Both happen under ``feedback.lock``
(``flock``), so worker processes of one server never lose each other's votes. A file
``feedback.1.jsonl`` left by earlier versions (which moved a full file aside) is read as the
older part and merged into ``feedback.jsonl`` at the next vote.

How many votes each user has in the file is counted once per process and kept while the file is
as this process left it (same inode, size and mtime); a change by anyone else is counted again.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import logging
import os
import threading
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from kb_ai.files import (DamagedFileError, append_state_text, open_state_file, read_state_bytes,
                         remove_state_entry, write_state_bytes)

log = logging.getLogger(__name__)

FEEDBACK_FILE = "feedback.jsonl"
OLDER_FILE = "feedback.1.jsonl"  # written by earlier versions only: read, then merged
LOCK_FILE = "feedback.lock"
MAX_FEEDBACK_BYTES = 5_000_000
READ_LIMIT = 4 * MAX_FEEDBACK_BYTES  # a file larger than this is not kaas's: treated as damaged


@dataclass(frozen=True)
class Retention:
    """Which votes are kept: per user (``per_user`` newest), by age (``days``), and the file in
    total (``max_bytes``). Settings ``feedback_user_votes`` and ``feedback_days``."""

    per_user: int = 500
    days: int = 365
    max_bytes: int = MAX_FEEDBACK_BYTES


@dataclass
class _Tally:
    """What this process knows of the file: votes per user and the oldest vote's time, valid
    while the file's stat is ``stamp``."""

    stamp: tuple[int, int, int] | None
    counts: dict[str, int] = field(default_factory=dict)
    oldest: dt.datetime | None = None


_lock = threading.Lock()
_tallies: dict[Path, _Tally] = {}


def vote_time(record: dict[str, Any]) -> dt.datetime | None:
    """The vote's time (aware, UTC), or None when it has none that reads as one."""
    try:
        stamp = dt.datetime.fromisoformat(str(record.get("time")).replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=dt.timezone.utc)


def read_lines(state_dir: Path) -> Iterator[str]:
    """Every non-empty line of the votes, oldest first (``feedback.1.jsonl`` before ``feedback.jsonl``).
    Raises ``DamagedFileError`` for a file that is not one kaas could have written."""
    for name in (OLDER_FILE, FEEDBACK_FILE):
        data = read_state_bytes(Path(state_dir) / name, READ_LIMIT) or b""
        for raw in data.decode("utf-8", "replace").splitlines():
            if raw.strip():
                yield raw


def _records(state_dir: Path) -> list[dict[str, Any]]:
    """The votes that parse as records, oldest first; anything else is left out."""
    found = []
    try:
        lines = list(read_lines(state_dir))
    except DamagedFileError as exc:
        log.warning(".kaas/%s is damaged (%s): votes start afresh", FEEDBACK_FILE, exc)
        return []
    for raw in lines:
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if isinstance(record, dict):
            found.append(record)
    return found


def _user(record: dict[str, Any]) -> str:
    return str(record.get("user") or "")


def _size(record: dict[str, Any]) -> int:
    return len(_line(record))


def _line(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")


def retained(records: list[dict[str, Any]], retention: Retention, now: dt.datetime,
             *, shrink: bool = False) -> list[dict[str, Any]]:
    """``records`` (oldest first) less what the rules drop: votes older than ``days`` or without
    a time, each user's beyond their ``per_user`` newest, then (over ``max_bytes``, or with
    ``shrink``, over three quarters of it) the oldest votes of whoever holds the most bytes."""
    cutoff = now - dt.timedelta(days=retention.days)
    fresh = [r for r in records if (stamp := vote_time(r)) is not None and stamp >= cutoff]
    seen: dict[str, int] = {}
    newest_first = []
    for record in reversed(fresh):
        user = _user(record)
        seen[user] = seen.get(user, 0) + 1
        if seen[user] <= retention.per_user:
            newest_first.append(record)
    kept = newest_first[::-1]
    sizes = [_size(r) for r in kept]
    total = sum(sizes)
    if total <= retention.max_bytes and not shrink:
        return kept
    target = retention.max_bytes * 3 // 4
    held: dict[str, int] = {}
    order: dict[str, deque[int]] = {}
    for index, record in enumerate(kept):
        held[_user(record)] = held.get(_user(record), 0) + sizes[index]
        order.setdefault(_user(record), deque()).append(index)
    dropped: set[int] = set()
    while total > target and held:
        heaviest = max(held, key=lambda u: (held[u], u))
        index = order[heaviest].popleft()
        dropped.add(index)
        total -= sizes[index]
        held[heaviest] -= sizes[index]
        if not order[heaviest]:
            del held[heaviest]
    return [r for i, r in enumerate(kept) if i not in dropped]


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


_NO_TIME = dt.datetime.min.replace(tzinfo=dt.timezone.utc)  # a vote without a time: dropped at the next rewrite
_LATEST = dt.datetime.max.replace(tzinfo=dt.timezone.utc)


def _tally_of(records: list[dict[str, Any]], stamp: tuple[int, int, int] | None) -> _Tally:
    tally = _Tally(stamp)
    for record in records:
        tally.counts[_user(record)] = tally.counts.get(_user(record), 0) + 1
        tally.oldest = min(tally.oldest or _LATEST, vote_time(record) or _NO_TIME)
    return tally


def _current_tally(state_dir: Path, retention: Retention, now: dt.datetime) -> _Tally:
    """The tally of the file as it is now: this process's own if nobody changed the file since,
    else counted again (and a ``feedback.1.jsonl`` of an earlier version merged in)."""
    target = state_dir / FEEDBACK_FILE
    tally = _tallies.get(target)
    older = _stamp(state_dir / OLDER_FILE) is not None
    if tally is not None and tally.stamp == _stamp(target) and not older:
        return tally
    records = _records(state_dir)
    if older:
        _rewrite(state_dir, retained(records, retention, now))
    else:
        _tallies[target] = _tally_of(records, _stamp(target))
    return _tallies[target]


@contextmanager
def _file_lock(state_dir: Path) -> Iterator[None]:
    fd, _ = open_state_file(Path(state_dir) / LOCK_FILE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def _rewrite(state_dir: Path, records: list[dict[str, Any]]) -> None:
    target = state_dir / FEEDBACK_FILE
    write_state_bytes(target, b"".join(_line(r) for r in records))
    remove_state_entry(state_dir / OLDER_FILE)  # merged into the file just written
    _tallies[target] = _tally_of(records, _stamp(target))


def record_feedback(state_dir: Path, record: dict[str, Any], retention: Retention = Retention(), *,
                    now: dt.datetime | None = None) -> None:
    """Keep one vote: appended, or, when a rule of ``retained`` drops something, the file
    rewritten with the vote and without what is dropped."""
    state_dir = Path(state_dir)
    target = state_dir / FEEDBACK_FILE
    line = _line(record)
    now = now or dt.datetime.now(dt.timezone.utc)
    with _lock, _file_lock(state_dir):
        tally = _current_tally(state_dir, retention, now)
        user = _user(record)
        size = (tally.stamp[1] if tally.stamp else 0) + len(line)
        stale = tally.oldest is not None and tally.oldest < now - dt.timedelta(days=retention.days)
        if tally.counts.get(user, 0) >= retention.per_user or size > retention.max_bytes or stale:
            _rewrite(state_dir, retained([*_records(state_dir), record], retention, now,
                                         shrink=size > retention.max_bytes))
            return
        append_state_text(target, line.decode("utf-8"))
        tally.counts[user] = tally.counts.get(user, 0) + 1
        tally.stamp = _stamp(target)
        tally.oldest = min(tally.oldest or _LATEST, vote_time(record) or _NO_TIME)
