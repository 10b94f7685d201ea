"""The ``kaas`` command line (click): an interface, the top layer (see docs/architecture.md).

``commands.py`` holds the group and its commands, ``serve.py`` the ``serve`` command (kept apart
so the server's imports load only for it), ``output.py`` how every command prints.
"""

from kb_ai.cli.commands import cli, main

__all__ = ["cli", "main"]
