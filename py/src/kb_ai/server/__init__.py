"""The HTTP and MCP interfaces: the chat API over Server-Sent Events, the wiki pages, the browser
UI (``app``, ``chat``, ``pages``, ``answers``, ``guard``, ``watch``, ``render``), the MCP tools
over streamable HTTP and stdio (``mcp``, ``mcp_stdio``), and the handshake ``kaas ask`` uses to
ask a running ``kaas serve`` (``remote``).

``create_app(settings)`` builds the Starlette app; ``run_server(settings, host, port)`` serves it
with uvicorn (what ``kaas serve`` calls). The app is imported eagerly, as before the move: with a
lazy import, ``kaas mcp`` lost the second answer of a batch (tests/test_mcp_stdio_lines.py,
cause not yet understood).
"""

from kb_ai.server.app import create_app, run_server

__all__ = ["create_app", "run_server"]
