"""What a running `kaas serve` holds in memory after N questions (issue 18, item 5).

    .venv/bin/python benchmarks/bench_memory_breakdown.py --kb DIR [--questions 100] [--model] [--tracemalloc]

Starts the server (as `bench_issue18.py memory` does: offline, or with `--model` an
OpenAI-compatible fake on 127.0.0.1), asks N questions, then sends it SIGUSR1; the server (run
through this same file with `--serve`) writes what it holds to a file, printed here:

- VmRSS / RssAnon / RssFile / VmHWM from /proc;
- each live catalog's parts, by walking the objects: its entries, ``by_path``, ``stamps``, the
  name maps when built, and every artefact in ``Catalog.derived`` (keyword index, views, title
  mentions, ...); numpy arrays count their own bytes (a memory map counts nothing: its pages are
  in RssFile);
- with ``--tracemalloc``: the top allocations still alive, by file and by line (the server runs
  several times slower and larger while tracing: use it for the breakdown, not for the VmRSS).

The machine is shared: `uptime`'s load is printed with the figures.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _deep_size(obj, seen: set[int]) -> int:
    import numpy as np

    total, stack = 0, [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, (type, type(_deep_size), type(sys))):
            continue
        seen.add(id(o))
        if isinstance(o, np.ndarray):
            total += sys.getsizeof(o)  # with its data when it owns it
            if isinstance(o.base, np.ndarray) and not isinstance(o.base, np.memmap):
                stack.append(o.base)  # a view: the array it is a view of (a memory map: RssFile)
            continue
        total += sys.getsizeof(o)
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        elif not isinstance(o, (str, bytes)):
            if hasattr(o, "__dict__"):
                stack.append(o.__dict__)
            for slot in getattr(type(o), "__slots__", ()):
                if hasattr(o, slot):
                    stack.append(getattr(o, slot))
    return total


def _status(field: str) -> float:
    for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return -1.0


def _dump(out: str) -> None:
    from kb_ai.store.catalog import Catalog

    lines = [f"VmRSS {_status('VmRSS'):.1f} MB (anonymous {_status('RssAnon'):.1f}, file-backed "
             f"{_status('RssFile'):.1f}), VmHWM {_status('VmHWM'):.1f} MB"]
    gc.collect()
    seen: set[int] = set()
    for catalog in [o for o in gc.get_objects() if isinstance(o, Catalog)]:
        lines.append(f"catalog of {len(catalog)} pages{' (a view)' if catalog.key else ''}:")
        lines.append(f"  entries {_deep_size(catalog.entries, seen) / 1e6:.1f} MB, by_path "
                     f"{_deep_size(catalog.by_path, seen) / 1e6:.1f} MB, stamps {_deep_size(catalog.stamps, seen) / 1e6:.1f} MB")
        for name in ("by_title", "by_stem"):
            if name in catalog.__dict__:
                lines.append(f"  {name} {_deep_size(catalog.__dict__[name], seen) / 1e6:.1f} MB")
        for key, value in list(catalog.derived._items.items()):
            lines.append(f"  derived {str(key[0])!r}: {type(value).__name__} {_deep_size(value, seen) / 1e6:.1f} MB")
    lines.append(f"modules imported: {len(sys.modules)}")
    import tracemalloc

    if tracemalloc.is_tracing():
        snapshot = tracemalloc.take_snapshot()
        lines.append(f"tracemalloc: {sum(s.size for s in snapshot.statistics('filename')) / 1e6:.1f} MB alive")
        for kind, top in (("filename", 25), ("lineno", 30)):
            lines.append(f"by {kind}:")
            for stat in snapshot.statistics(kind)[:top]:
                frame = stat.traceback[0]
                where = frame.filename if kind == "filename" else f"{frame.filename}:{frame.lineno}"
                lines.append(f"  {stat.size / 1e6:8.2f} MB {stat.count:8d}  {where}")
    tmp = out + ".tmp"
    Path(tmp).write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, out)


def serve(argv: list[str]) -> None:
    """The server side: `kaas serve` with a SIGUSR1 handler that writes the breakdown."""
    if os.environ.get("KAAS_BENCH_TRACEMALLOC"):
        import tracemalloc

        tracemalloc.start()
    out = os.environ["KAAS_BENCH_OUT"]
    signal.signal(signal.SIGUSR1, lambda *_: _dump(out))
    from kb_ai.cli.serve import serve as kaas_serve

    kaas_serve(args=argv, prog_name="bench_memory_breakdown")


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kb", type=Path, required=True)
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--model", action="store_true", help="an OpenAI-compatible fake model on 127.0.0.1")
    parser.add_argument("--tracemalloc", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "tests"))
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_issue18 import QUESTION, clean_env, header
    from bench_server import Process, ask_numbered, free_port
    from server_fakes import FakeLLMServer

    out = str(Path(os.environ.get("TMPDIR", "/tmp")) / f"kaas-memory-{os.getpid()}.txt")
    extra = {"KAAS_BENCH_OUT": out, **({"KAAS_BENCH_TRACEMALLOC": "1"} if args.tracemalloc else {})}

    def run(env: dict[str, str]) -> None:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with Process([__file__, "--serve", "--kb", str(args.kb), "--port", str(port)], env=env,
                     health=url + "/healthz") as server:
            ask_numbered(url, QUESTION, args.questions)
            time.sleep(2)  # a warm-up thread, if any, has finished
            os.kill(server.proc.pid, signal.SIGUSR1)
            deadline = time.monotonic() + 600
            while not os.path.exists(out) and time.monotonic() < deadline:
                time.sleep(0.5)
            print(Path(out).read_text(encoding="utf-8"), end="")
            os.unlink(out)

    header(f"`kaas serve` memory breakdown after {args.questions} questions "
           f"({'OpenAI-compatible fake model' if args.model else 'offline'})")
    if args.model:
        with FakeLLMServer(token_delay=0) as llm:
            run(clean_env(KAAS_MODEL="openai/fake", KAAS_API_BASE=llm.api_base, KAAS_API_KEY="x",
                          KAAS_CACHE="false", **extra))
    else:
        run(clean_env(**extra))


if __name__ == "__main__":
    main()
