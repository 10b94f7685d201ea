"""Where the browser UI's files are: the copy shipped inside the package, else the checkout's."""

from __future__ import annotations

from pathlib import Path

from kb_ai.errors import ConfigError
from kb_ai.resources import shipped_dir


def default_web_dir() -> Path:
    """The ``web/`` folder: packaged copy first (``kb_ai/web``), then the source checkout."""
    found = shipped_dir("web", "index.html")
    if found is None:
        raise ConfigError("the web UI files are missing: reinstall kaas")
    return found
