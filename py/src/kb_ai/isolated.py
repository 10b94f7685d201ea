"""Run a CPU-heavy function on untrusted input in a worker process, with a time limit.

Some work on text kaas does not control runs in third-party code whose cost on hostile input
has no bound kaas can check in advance (Python-Markdown is quadratic on several shapes). A thread
cannot be stopped; a process can. ``run_isolated(func, *args, timeout=...)`` runs ``func`` (a
module-level function; arguments and result are pickled) in one of a few worker processes and
returns its result, or raises ``IsolatedTimeout`` when no worker was free within ``timeout``
seconds or the call took longer than that: the worker is then killed, and a new one is started
when next needed. So a caller never waits much longer than twice ``timeout``, and a hostile
input costs at most ``timeout`` seconds of one core.

Workers are separate Python processes (``python -c``, not ``multiprocessing``, so that nothing
of the caller's own ``__main__`` runs again in them) that import the function's module when
they start; starting one is not counted in a call's time limit. They talk over two pipes (never
stdout: ``kaas mcp`` speaks its protocol there), end when kaas closes the pipes, and are killed
when a call takes too long. POSIX only, like the rest of kaas.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import subprocess
import sys
import threading
import time
from typing import Any, Callable

log = logging.getLogger(__name__)

MAX_WORKERS = 2
START_SECONDS = 60.0  # importing kaas in a new process, on a busy machine


class IsolatedTimeout(Exception):
    """The call did not finish (or could not start) within its time limit."""


class IsolatedBusy(IsolatedTimeout):
    """Every worker stayed busy for the whole time limit: the call never started."""


class IsolatedFailure(Exception):
    """The worker could not be started, died, or the function raised (the message says which)."""


def _child(read_fd: int, write_fd: int) -> None:  # the worker's main loop (in the child process)
    from multiprocessing.connection import Connection  # noqa: PLC0415

    reader, writer = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    try:
        for module in reader.recv():  # warm up: import what the calls will need
            importlib.import_module(module)
        writer.send(("ready", None))
        while True:
            func, args = reader.recv()
            try:
                reply = ("ok", func(*args))
            except BaseException as exc:  # noqa: BLE001 - reported to the caller, the worker lives on
                reply = ("error", f"{type(exc).__name__}: {exc}"[:500])
            writer.send(reply)
    except (EOFError, OSError, KeyboardInterrupt):  # the parent is gone or closed the pipe
        return


class _Worker:
    def __init__(self, modules: list[str]) -> None:
        from multiprocessing.connection import Connection  # noqa: PLC0415

        from_parent, to_child = os.pipe()  # (read end, write end)
        from_child, to_parent = os.pipe()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        code = f"from kb_ai.isolated import _child; _child({from_parent}, {to_parent})"
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code], pass_fds=(from_parent, to_parent), env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, close_fds=True)
        except OSError as exc:
            for fd in (to_child, from_parent, from_child, to_parent):
                os.close(fd)
            raise IsolatedFailure(f"a worker process could not be started ({exc})") from None
        os.close(from_parent)
        os.close(to_parent)
        self.writer = Connection(to_child, readable=False)
        self.reader = Connection(from_child, writable=False)
        try:
            self.writer.send(modules)
            ready = self.reader.poll(START_SECONDS) and self.reader.recv()[0] == "ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.kill()
            raise IsolatedFailure("a worker process did not start")

    def call(self, func: Callable, args: tuple, timeout: float) -> Any:
        try:
            self.writer.send((func, args))
            if not self.reader.poll(timeout):
                raise IsolatedTimeout(f"took longer than {timeout:g} seconds")
            status, value = self.reader.recv()
        except (EOFError, OSError) as exc:
            raise IsolatedFailure(f"the worker process died ({type(exc).__name__})") from None
        if status != "ok":
            raise IsolatedFailure(value)
        return value

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        try:
            self.process.kill()
            self.process.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.writer.close()
        self.reader.close()


class _Pool:
    def __init__(self) -> None:
        self._free = threading.Condition()
        self._idle: list[_Worker] = []
        self._running = 0  # workers started, idle or not
        self._all: set[_Worker] = set()  # to kill them all when kaas exits

    def _acquire(self, timeout: float, modules: list[str]) -> _Worker:
        deadline = time.monotonic() + timeout
        with self._free:
            while not self._idle and self._running >= MAX_WORKERS:
                left = deadline - time.monotonic()
                if left <= 0 or not self._free.wait(left):
                    raise IsolatedBusy(f"no worker was free within {timeout:g} seconds")
            if self._idle:
                return self._idle.pop()
            self._running += 1  # a slot for a new worker, started outside the lock
        try:
            worker = _Worker(modules)
        except BaseException:
            self._retire(None)
            raise
        with self._free:
            self._all.add(worker)
        return worker

    def _release(self, worker: _Worker) -> None:
        with self._free:
            self._idle.append(worker)
            self._free.notify()

    def _retire(self, worker: _Worker | None) -> None:
        if worker is not None:
            worker.kill()
        with self._free:
            self._all.discard(worker)
            self._running -= 1
            self._free.notify()

    def close(self) -> None:
        """Kill every worker (at exit: one still busy must not run on without kaas)."""
        with self._free:
            workers, self._all, self._idle = list(self._all), set(), []
        for worker in workers:
            worker.kill()

    def run(self, func: Callable, args: tuple, timeout: float) -> Any:
        worker = self._acquire(timeout, [func.__module__])
        try:
            result = worker.call(func, args, timeout)
        except IsolatedTimeout:
            self._retire(worker)  # still busy with the call: the only way to stop it
            raise
        except IsolatedFailure:
            if worker.alive():
                self._release(worker)  # the function raised; the worker is fine
            else:
                self._retire(worker)
            raise
        except BaseException:
            self._retire(worker)  # interrupted half-way: the pipe may hold a late reply
            raise
        self._release(worker)
        return result


_pool = _Pool()
atexit.register(_pool.close)


def run_isolated(func: Callable, *args: Any, timeout: float) -> Any:
    """``func(*args)`` in a worker process, within ``timeout`` seconds (see the module doc)."""
    return _pool.run(func, args, timeout)
