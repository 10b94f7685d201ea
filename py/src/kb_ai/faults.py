"""Named crash points for fault-injection trials (kill tests), switched on by ``KAAS_FAULT``.

The code calls ``fault_point("compile.write.after_file")`` at the moments a crash matters. Without
``KAAS_FAULT`` (always, in normal use) that is one environment lookup and nothing else. With it,
the variable names what to do where, as comma-separated specs ``<point>[@<n>][:<action>]``:

- ``<point>``: the name given to ``fault_point`` (see ``git grep fault_point`` for the list);
- ``@<n>``: act on the n-th time the point is passed in this process (default 1), and only then;
- ``<action>``: ``kill`` (default) sends the process SIGKILL, as a crash or power cut would find
  it (no ``finally``, no ``atexit``, no buffered output flushed); ``raise`` raises
  ``InjectedFault``, a BaseException that nothing in kaas catches (in-process tests);
  ``sleep=<seconds>`` pauses every time the point is passed (a slow run to kill at any moment).

In-process, a test can also make something happen at a point (``with faults.at(point, action)``:
``action()`` runs each time the point is passed), e.g. replace a file between the scan of raw/ and
its read, instead of patching a private function by name.

Example: ``KAAS_FAULT=compile.journal.before_line@9 kaas compile`` dies just before the ninth journal
line is written. Tests name the points they use in ``tests/helpers.py:FAULT_POINTS``, and a test
fails when one of them is no longer called in the code, so a rename cannot silently disable a
trial. Names are ``<area>.<stage>.<moment>``; pass a literal string (the test reads the source).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Callable, Iterator

ENV = "KAAS_FAULT"


class InjectedFault(BaseException):
    """Raised at a fault point by the ``raise`` action: stands in for SIGKILL or Ctrl-C, so it is
    not an ``Exception`` and no handler on the way catches it."""


_lock = threading.Lock()
_spec = ""  # the value of KAAS_FAULT the counters below belong to
_passes: dict[str, int] = {}
_actions: dict[str, Callable[[], None]] = {}  # in-process actions (``at``), by point


@contextlib.contextmanager
def at(name: str, action: Callable[[], None]) -> Iterator[None]:
    """While the block runs, call ``action()`` each time the point ``name`` is passed."""
    _actions[name] = action
    try:
        yield
    finally:
        _actions.pop(name, None)


def fault_point(name: str) -> None:
    """Crash, raise or pause here when ``KAAS_FAULT`` names ``name`` (or run the action a test
    set with ``at``); otherwise do nothing."""
    if _actions:
        action = _actions.get(name)
        if action is not None:
            action()
    spec = os.environ.get(ENV)
    if not spec:
        return
    for item in spec.split(","):
        point, _, action = item.strip().partition(":")
        point, _, nth = point.partition("@")
        if point != name:
            continue
        if action.startswith("sleep="):
            time.sleep(float(action.removeprefix("sleep=")))
            continue
        if _count(spec, item) != int(nth or 1):
            continue
        if action == "raise":
            raise InjectedFault(f"{ENV}: {item}")
        if action not in ("", "kill"):
            raise ValueError(f"{ENV}: unknown action in {item!r} (kill, raise or sleep=<seconds>)")
        os.kill(os.getpid(), signal.SIGKILL)


def _count(spec: str, item: str) -> int:
    """How many times ``item`` of ``spec`` has been reached, this one included (a new spec starts
    from zero, so each in-process test that sets the variable counts afresh)."""
    global _spec
    with _lock:
        if spec != _spec:
            _spec = spec
            _passes.clear()
        _passes[item] = _passes.get(item, 0) + 1
        return _passes[item]


def reset() -> None:
    """Forget the counts (a test that sets the same spec twice in one process starts again)."""
    global _spec
    with _lock:
        _spec = ""
        _passes.clear()
