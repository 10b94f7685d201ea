"""``/mcp`` inside ``kaas serve``, started at its first request.

The MCP SDK and the tools' pydantic models cost a server ~33 MB and about a second of imports;
most servers are used from the browser and never see an agent. ``LazyMCPEndpoint`` is routed at
``/mcp`` from the start; the first request imports ``server/mcp.py``, builds its
``MCPHttpEndpoint`` and runs its session manager in a task of the app's lifespan (so it stops
with the app, exactly as if it had been started with it). Every later request goes straight to
it. Outside a running lifespan the endpoint answers 503, as the SDK's endpoint does.
"""

from __future__ import annotations

import importlib
import logging
from contextlib import asynccontextmanager

import anyio
from starlette.responses import JSONResponse

from kb_ai.config import Settings
from kb_ai.navigate.ask import AskService
from kb_ai.server.limits import UserLimits

log = logging.getLogger(__name__)


class LazyMCPEndpoint:
    """The ASGI app routed at ``/mcp``: ``server.mcp.MCPHttpEndpoint``, made at the first request."""

    def __init__(self, settings: Settings, service: AskService, *, stateless: bool = False,
                 limits: UserLimits | None = None):
        self.settings = settings
        self.service = service
        self.stateless = stateless  # no MCP sessions (several worker processes: server/app.py)
        self.limits = limits  # the app's per-user counters, which the tools' answers are counted in
        self._endpoint = None
        self._group: anyio.abc.TaskGroup | None = None
        self._stop: anyio.Event | None = None
        self._starting: anyio.Lock | None = None

    @property
    def started(self) -> bool:
        """Whether the MCP SDK has been started (by a request to /mcp)."""
        return self._endpoint is not None

    @asynccontextmanager
    async def running(self):
        """The app's lifespan: the task group the endpoint runs in once a request starts it."""
        async with anyio.create_task_group() as group:
            self._group, self._stop, self._starting = group, anyio.Event(), anyio.Lock()
            try:
                yield
            finally:
                self._stop.set()  # the endpoint's session manager, if started, stops now
                self._group = None
        self._endpoint = None

    async def _start(self) -> None:
        async with self._starting:
            group, stop = self._group, self._stop
            if self._endpoint is not None or group is None:
                return
            module = await anyio.to_thread.run_sync(importlib.import_module, "kb_ai.server.mcp")
            endpoint = module.MCPHttpEndpoint(self.settings, self.service, stateless=self.stateless,
                                              limits=self.limits)

            async def hold(*, task_status=anyio.TASK_STATUS_IGNORED) -> None:
                async with endpoint.running():
                    task_status.started()
                    await stop.wait()

            with anyio.CancelScope(shield=True):  # a client that goes away must not leave it half started
                await group.start(hold)
            self._endpoint = endpoint
            log.info("MCP endpoint started at its first request")

    async def __call__(self, scope, receive, send) -> None:
        if self._endpoint is None and self._group is not None:
            await self._start()
        if self._endpoint is None:
            response = JSONResponse({"error": {"code": "unavailable", "message": "the MCP endpoint is not running"}}, 503)
            await response(scope, receive, send)
            return
        await self._endpoint(scope, receive, send)
