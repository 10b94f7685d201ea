"""The kaas server for benchmarks, with a debug-only probe route: never part of ``kaas serve``.

    .venv/bin/python benchmarks/server_probe.py --kb DIR --port N      # settings from KAAS_* as usual

Serves ``create_app`` exactly as ``kaas serve`` builds it (same settings, host check, warm-up),
plus ``GET /_probe``: what the serving process holds right now, as JSON —
``tasks`` (asyncio tasks alive, the probe's own request excepted), ``task_kinds`` (those tasks by
coroutine name, to see what leaked), ``rss_kb`` (VmRSS) and ``fds`` (open file descriptors).
``probe_route()`` is also mounted by tests/test_server_load.py on an in-process server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections import Counter
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

PROBE_PATH = "/_probe"


def process_figures() -> dict[str, Any]:
    status = Path("/proc/self/status").read_text()
    rss = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), -1)
    try:
        fds = len(os.listdir("/proc/self/fd"))
    except OSError:
        fds = -1
    return {"rss_kb": rss, "fds": fds}


async def probe(request: Request) -> JSONResponse:
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    kinds = Counter(getattr(t.get_coro(), "__qualname__", type(t.get_coro()).__name__) for t in tasks)
    return JSONResponse({"tasks": len(tasks), "task_kinds": dict(kinds.most_common()), **process_figures()})


def probe_route() -> Route:
    return Route(PROBE_PATH, probe, methods=["GET"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()

    import uvicorn
    from kb_ai.config import load_settings
    from kb_ai.server import create_app
    from kb_ai.server.app import hosts_for

    settings = load_settings(args.kb)
    app = create_app(settings, allowed_hosts=hosts_for(args.host), warm_up=True, extra_routes=[probe_route()])
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", proxy_headers=False,
                timeout_graceful_shutdown=5, backlog=4096)


if __name__ == "__main__":
    main()
