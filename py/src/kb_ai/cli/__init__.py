"""The ``kaas`` command line (click): an interface, the top layer (see docs/architecture.md).

``commands.py`` holds the group and its commands, ``ask.py`` the ``ask`` command (in this process
or through a running server), ``serve.py`` the ``serve`` command (kept apart so the server's
imports load only for it), ``context.py`` what every command starts from (settings, ``--kb``,
``--user``, failing), ``output.py`` how every command prints.
"""

from kb_ai.cli.commands import cli, main

__all__ = ["cli", "main"]
