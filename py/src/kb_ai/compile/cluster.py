"""Compile on a Ray cluster: the ``cluster`` setting (kaas.toml, ``KAAS_CLUSTER``).

- unset: the in-process compile; this module (and Ray) is never imported;
- ``local``: a Ray cluster on this machine, started for the compile and ended with it
  (``ray.init(num_cpus=concurrency, include_dashboard=False)``, ``ray.shutdown()``);
- anything else: the address of a running Ray cluster (``auto`` inside a Ray Job,
  ``ray://head:10001``); kaas connects, and disconnects at the end.

The rule: **tasks compute, the driver decides and writes.** A plan proposal and an article
write's draft (the model calls, the prompt rendering, the offline writer's text work) run as Ray
tasks; the task returns its result and the model calls it made. Everything stateful stays in the
driver, in the order an in-process compile has: the plan waves and their settling, dedup, the
guards, the journal (one appender, each record journaled before its file is renamed), the
article files, the manifest, the re-index and the lock. A task that outlives its driver can
therefore write nothing, and a resumed compile is the in-process one's. Calls in flight are
bounded cluster-wide by the driver's ``concurrency`` semaphores, which already gate every
proposal and write.

raw/, wiki/ and .kaas/ must be on one POSIX volume mounted at the same path on every node (the
worker processes read the model cache and the prompts from it): ``check_shared_volume`` runs one
task per node that reads a token the driver wrote, and stops the compile with a clear error when
a node cannot see it.

Failures: model errors are retried inside the task by the gateway, by their class
(``errors.py`` ``retryable``, ``max_retries``); a task whose worker or node died is re-run by Ray
(``max_retries``), which is safe because a task writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

from kb_ai.compile.context import Engine
from kb_ai.config import Settings
from kb_ai.errors import ConfigError, KaasError
from kb_ai.files import atomic_write_text
from kb_ai.llm.usage import UsageMeter
from kb_ai.store.kb import KnowledgeBase

LOCAL = "local"
CHECK_FILE = "cluster-check"  # in .kaas/: the token every node must read back
CHECK_SECONDS = 120.0  # a node that cannot run the check task in this time is reported
TASK_RETRIES = 3  # re-runs of a task whose worker or node was lost (Ray's max_retries)


class ClusterError(ConfigError):
    """The cluster cannot run this compile: Ray missing, unreachable, or a node without the KB."""

    code = "cluster_error"


def import_ray():
    """Ray, or a ``ClusterError`` saying how to install it."""
    try:
        import ray  # noqa: PLC0415 (only with the cluster setting)
    except ImportError:
        raise ClusterError("the `cluster` setting needs Ray: pip install 'kaas[cluster]' "
                           "(or unset `cluster` / KAAS_CLUSTER to compile in this process)") from None
    return ray


@contextlib.contextmanager
def on_cluster(settings: Settings, kb: KnowledgeBase, engine: Engine, notes: list[str]) -> Iterator[Engine]:
    """``with on_cluster(...) as engine:`` the engine whose proposals and writes run as Ray
    tasks. Starts (``local``) or joins the cluster, checks every node sees the KB, and ends what
    it started (a Ray already initialised in this process is used and left running). Appends
    to ``notes`` where the work ran: tasks, workers, tasks per worker, start-up seconds."""
    ray = import_ray()
    started = not ray.is_initialized()
    began = time.perf_counter()
    if started:
        _init(ray, settings)
    try:
        check_shared_volume(ray, kb)
        remote = remote_engine(ray, settings, engine)
        ready = time.perf_counter() - began
        yield remote
        notes.append(spread_note(settings.cluster, remote.pool, ready))
    finally:
        if started:
            ray.shutdown()


def spread_note(address: str | None, pool: "TaskPool", ready: float) -> str:
    """The report's line on the cluster's share of the compile."""
    counts = sorted(pool.per_worker.values())
    spread = f", {counts[0]}-{counts[-1]} per worker" if counts else ""
    return (f"ran on the Ray cluster {address!r}: {sum(counts)} tasks on {len(counts)} workers{spread} "
            f"(cluster ready after {ready:.1f} s)")


def _init(ray, settings: Settings) -> None:
    address = settings.cluster
    # Workers import kaas as the driver does (a checkout run with PYTHONPATH, or an install).
    env = {"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"]}} if os.environ.get("PYTHONPATH") else None
    try:
        if address == LOCAL:
            ray.init(num_cpus=max(1, settings.concurrency or 1), include_dashboard=False,
                     log_to_driver=False, runtime_env=env, configure_logging=False)
        else:
            ray.init(address=address, log_to_driver=False, runtime_env=env, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ClusterError(f"cannot start or reach the Ray cluster {address!r}: {exc}") from None


def check_shared_volume(ray, kb: KnowledgeBase) -> None:
    """Every alive node reads back the token the driver just wrote into .kaas/, and finds raw/
    and wiki/ at the same path: else a ``ClusterError`` naming the node and what it lacks."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415

    kb.state_dir.mkdir(parents=True, exist_ok=True)
    kb.wiki_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    atomic_write_text(kb.state_dir / CHECK_FILE, token)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    probe = ray.remote(num_cpus=0, max_retries=0)(_sees_kb)
    refs = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
            .remote(str(kb.root)) for n in nodes]
    try:
        seen = ray.get(refs, timeout=CHECK_SECONDS)
    except Exception as exc:  # noqa: BLE001 (Ray's timeout and task errors: all mean "cannot check")
        raise ClusterError(f"the Ray cluster could not run the shared-volume check: {exc}") from None
    for node, (host, found) in zip(nodes, seen, strict=True):
        if found != token:
            raise ClusterError(
                f"Ray node {node.get('NodeManagerAddress', '?')} ({host}) cannot see the knowledge base at "
                f"{kb.root}: {found}. raw/, wiki/ and .kaas/ must be on one volume mounted at the same "
                "path on every node (docs/scale.md)")


def _sees_kb(root: str) -> tuple[str, str]:
    """On one node: (host name, the token read, or what is missing)."""
    import socket  # noqa: PLC0415

    base = Path(root)
    for name in ("raw", "wiki", ".kaas"):
        if not (base / name).is_dir():
            return socket.gethostname(), f"no folder {base / name}"
    try:
        return socket.gethostname(), (base / ".kaas" / CHECK_FILE).read_text(encoding="utf-8")
    except OSError as exc:
        return socket.gethostname(), f"cannot read {base / '.kaas' / CHECK_FILE} ({exc.strerror or exc})"


# ---------------------------------------------------------------------------------------------
# the driver's side: proxies with the planner's and writer's interface


class TaskPool:
    """Sends stage work to the cluster and counts it: calls in flight (the progress line) and
    tasks per worker (the benchmark's spread)."""

    def __init__(self, ray, settings: Settings):
        self.ray = ray
        self.task = ray.remote(num_cpus=1, max_retries=TASK_RETRIES, retry_exceptions=False)(run_stage)
        self.settings = ray.put(settings)
        self.in_flight = 0
        self.per_worker: Counter[str] = Counter()
        self._catalog: tuple[tuple, Any] | None = None

    def catalog_ref(self, catalog) -> Any:
        """The plan catalog in the object store, put once per state (it changes between waves)."""
        key = (id(catalog), len(catalog.items), sum(len(v) for v in catalog.source_folders.values()))
        if self._catalog is None or self._catalog[0] != key:
            self._catalog = (key, self.ray.put(catalog))
        return self._catalog[1]

    async def call(self, kind: str, today: str, meter: UsageMeter, *args: Any) -> Any:
        self.in_flight += 1
        try:
            value, calls, worker = await self.task.remote(kind, self.settings, today, *args)
        finally:
            self.in_flight -= 1
        self.per_worker[worker] += 1
        for call in calls:
            meter.add(call)
        if isinstance(value, Raised):
            raise value.error
        return value


class _RemotePlanner:
    def __init__(self, inner, pool: TaskPool, today: str):
        self.inner, self.pool, self.today = inner, pool, today
        self.mode, self.prompt_version = getattr(inner, "mode", "offline"), inner.prompt_version
        self.meter = getattr(inner, "meter", None) or UsageMeter()

    async def propose(self, source, catalog, previous):
        if self.mode != "llm":  # the offline proposal is a constant: no task for nothing
            return await self.inner.propose(source, catalog, previous)
        return await self.pool.call("propose", self.today, self.meter, source, self.pool.catalog_ref(catalog),
                                    list(previous))

    def resolve(self, proposal, source, catalog, previous):
        return self.inner.resolve(proposal, source, catalog, previous)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _RemoteWriter:
    def __init__(self, inner, pool: TaskPool, today: str | None):
        self.inner, self.pool, self.today = inner, pool, today
        self.mode, self.prompt_version = getattr(inner, "mode", "offline"), getattr(inner, "prompt_version", None)
        self.meter = getattr(inner, "meter", None) or UsageMeter()

    async def write(self, article, chunk):
        return await self.pool.call("write", self.today, self.meter, article, chunk)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _CountingGateway:
    """The driver's gateway (topic summaries stay on the driver) with the cluster's calls in
    flight added, so the progress line counts the cluster's calls."""

    def __init__(self, inner, pool: TaskPool):
        self._inner, self._pool = inner, pool

    @property
    def in_flight(self) -> int:
        return getattr(self._inner, "in_flight", 0) + self._pool.in_flight

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def remote_engine(ray, settings: Settings, engine: Engine) -> Engine:
    """``engine`` with its proposals and write drafts sent to the cluster (same meters)."""
    today = getattr(engine.writer, "today", None)
    pool = TaskPool(ray, settings)
    gateway = _CountingGateway(engine.gateway, pool) if engine.gateway is not None else None
    writer = engine.writer
    checked = getattr(writer, "checked_by_driver", False)
    if checked:  # the checks of what the model wrote (and their retries) stay on the driver, which knows the corpus
        writer.writer = _RemoteWriter(writer.writer, pool, today)
    else:
        writer = _RemoteWriter(writer, pool, today)
    remote = Engine(engine.mode, _RemotePlanner(engine.planner, pool, today), writer,
                    gateway, engine.prompts, engine.plan_meter, engine.write_meter)
    remote.pool = pool  # type: ignore[attr-defined]  (the benchmark reads the spread)
    return remote


# ---------------------------------------------------------------------------------------------
# the worker's side


class Raised:
    """A ``KaasError`` a task ended with, carried back as a value (re-raised by the driver)."""

    def __init__(self, error: KaasError):
        self.error = error


_worker: dict[str, Any] = {}  # one engine and one event loop per worker process


def _worker_engine(settings: Settings, today: str) -> Engine:
    key = (settings, today)
    if _worker.get("key") != key:
        from kb_ai.compile.pipeline import make_engine  # noqa: PLC0415 (the worker builds what the driver did)

        gateway = None
        if settings.effective_compile_model:
            from kb_ai.llm.gateway import build_gateway  # noqa: PLC0415

            gateway = build_gateway(settings, KnowledgeBase(settings.kb), model=settings.effective_compile_model)
        _worker["engine"], _worker["key"] = make_engine(settings, gateway, today), key
    if "loop" not in _worker:
        _worker["loop"] = asyncio.new_event_loop()
    return _worker["engine"]


def run_stage(kind: str, settings: Settings, today: str, *args: Any) -> tuple[Any, list, str]:
    """One Ray task: a plan proposal or an article write's draft, with the model calls it made
    and the worker that ran it. A ``KaasError`` is returned (``Raised``), not raised, so the
    driver handles it as the in-process compile does."""
    engine = _worker_engine(settings, today)
    meter = UsageMeter()
    if kind == "propose":
        engine.planner.meter = meter
        work = engine.planner.propose(*args)
    else:
        writer = engine.writer.writer if getattr(engine.writer, "checked_by_driver", False) else engine.writer
        if hasattr(writer, "meter"):
            writer.meter = meter
        work = writer.write(*args)
    try:
        value = _worker["loop"].run_until_complete(work)
    except KaasError as exc:
        value = Raised(exc)
    return value, list(meter.calls), f"{os.uname().nodename}:{os.getpid()}"
