"""What every ``kaas`` command starts from: its settings (``--kb``, on the group or the command;
``--offline``), its reader (``--user``), its log lines (``-v``), and how it fails (one line, the
error's exit code)."""

from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path

import click

from kb_ai.cli.output import say
from kb_ai.config import Settings, load_settings
from kb_ai.errors import KaasError
from kb_ai.untrusted_text import terminal_safe


def _fail(exc: KaasError) -> None:
    say(f"kaas: error: {exc.message}", err=True)
    sys.exit(exc.exit_code)


def _offline(settings: Settings) -> Settings:
    """The same settings with no model: every step takes the offline path."""
    return dataclasses.replace(settings, model=None, compile_model=None)


def _settings(ctx: click.Context, **overrides) -> Settings:
    try:
        settings = load_settings(ctx.obj["kb"])
    except KaasError as exc:
        _fail(exc)
    return settings.with_overrides(**overrides)


def _reader(settings: Settings, user_name: str | None):
    """The owner, or with ``--user NAME`` that user of kaas.toml (a clear error if unknown)."""
    from kb_ai.store.access import OWNER

    if not user_name:
        return OWNER
    from kb_ai.store.users import UserDirectory

    try:
        return UserDirectory(settings.kb).reader_named(user_name)
    except KaasError as exc:
        _fail(exc)


def _remember_kb(ctx: click.Context, _param: click.Parameter, value: Path | None) -> None:
    if value is not None:
        ctx.ensure_object(dict)["kb"] = value


def _verbose(_ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        setup_logging(True)


def verbose_option(command):
    """``-v`` on a subcommand too (``kaas compile -v``), same as before it."""
    return click.option("-v", "--verbose", is_flag=True, expose_value=False, callback=_verbose,
                        help="Log more to stderr.")(command)


def kb_option(command):
    """``--kb DIR`` and ``-v`` on a subcommand too (``kaas ask --kb DIR -v ...``), same as
    before it."""
    command = verbose_option(command)
    return click.option("--kb", type=click.Path(file_okay=False, path_type=Path), default=None, expose_value=False,
                        callback=_remember_kb, help="Knowledge base folder (default: current folder).")(command)


class _OneLineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return terminal_safe(f"kaas: {record.levelname.lower()}: {record.getMessage()}")


def setup_logging(verbose: bool) -> None:
    """kaas's log lines on stderr, one terminal-safe line each; INFO with ``verbose``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLineFormatter())
    root = logging.getLogger("kb_ai")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    root.propagate = False
    for noisy in ("LiteLLM", "litellm", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
