"""How the CLI prints: ``say`` for text a person reads, ``say_json`` for JSON a script reads.

Text printed by ``kaas`` carries pages, sources, model replies and file names, any of which can
hold terminal control sequences (OSC 52 writes the clipboard, OSC 0 the window title, CSI moves
the cursor). ``say`` passes everything through ``untrusted_text.terminal_safe``; ``say_json``
keeps the exact JSON value and only escapes the control characters JSON leaves raw.
"""

from __future__ import annotations

import click

from kb_ai.untrusted_text import terminal_safe, terminal_safe_json


def say(text: str = "", *, err: bool = False, nl: bool = True) -> None:
    """Print text for a person (stdout, or stderr with ``err``), made safe for a terminal."""
    click.echo(terminal_safe(text), err=err, nl=nl)


def say_json(text: str) -> None:
    """Print JSON text on stdout: the same JSON value, inert on a terminal."""
    click.echo(terminal_safe_json(text))
