"""The HTTP server: the chat API over Server-Sent Events, the wiki pages, and the browser UI.

``create_app(settings)`` builds the Starlette app; ``run_server(settings, host, port)`` serves it
with uvicorn (what ``kaas serve`` calls).
"""

from kb_ai.server.app import create_app, run_server

__all__ = ["create_app", "run_server"]
