"""The HTTP and MCP interfaces: the chat API over Server-Sent Events, the wiki pages, the browser
UI (``app``, ``chat``, ``pages``, ``answers``, ``guard``, ``watch``, ``render``), the MCP tools
over streamable HTTP and stdio (``mcp``, ``mcp_stdio``), and the handshake ``kaas ask`` uses to
ask a running ``kaas serve`` (``remote``).

``create_app(settings)`` builds the Starlette app; ``run_server(settings, host, port)`` serves it
with uvicorn (what ``kaas serve`` calls). Both are imported on first use, so ``kaas ask`` and
``kaas mcp``, which import ``kb_ai.server.remote`` and ``kb_ai.server.mcp``, do not load the app.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app", "run_server"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from kb_ai.server import app

        return getattr(app, name)
    raise AttributeError(f"module 'kb_ai.server' has no attribute {name!r}")
