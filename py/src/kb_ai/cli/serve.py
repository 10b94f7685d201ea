"""``kaas serve``: the chat server and wiki browser. Registered on the ``kaas`` group by commands.py.

Kept apart from commands.py so the server's imports (Starlette, uvicorn) load only for this command.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click

from kb_ai.errors import KaasError, NoWikiError
from kb_ai.cli.context import verbose_option
from kb_ai.cli.output import say


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Anything but loopback exposes the wiki: set KAAS_API_TOKEN.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port to listen on.")
@click.option("--kb", "kb_option", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Knowledge base folder (also accepted before the command).")
@click.option("--offline", is_flag=True, help="Ignore any configured model: lexical selection, extractive answers.")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True, envvar="KAAS_SERVE_WORKERS",
              help="Server processes sharing the port (one per core for many concurrent chats). "
                   "Each has its own caches and per-user limits; MCP over HTTP keeps no sessions.")
@verbose_option
@click.pass_context
def serve(ctx: click.Context, host: str, port: int, kb_option: Path | None, offline: bool, workers: int) -> None:
    """Serve the chat UI and wiki browser at http://HOST:PORT/ (Ctrl+C stops)."""
    from kb_ai.config import load_settings
    from kb_ai.server import run_server

    kb = kb_option or ((ctx.obj or {}).get("kb") if isinstance(ctx.obj, dict) else None)
    try:
        settings = load_settings(kb)
        if offline:
            settings = dataclasses.replace(settings, model=None)
        if not (settings.kb / "wiki").is_dir():
            raise NoWikiError(f"no wiki at {settings.kb / 'wiki'} (run `kaas init` or pass --kb DIR)")
        def listening(bound: int) -> None:
            say(f"kaas: serving {settings.kb / 'wiki'} at http://{_url_host(host)}:{bound}/ "
                f"({'offline mode' if settings.offline else 'model ' + str(settings.model)}"
                f"{f', {workers} worker processes' if workers > 1 else ''})", err=True)

        run_server(settings, host=host, port=port, workers=workers, on_listening=listening)
    except KaasError as exc:
        say(f"kaas: error: {exc.message}", err=True)
        sys.exit(exc.exit_code)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
