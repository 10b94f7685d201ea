"""Where the browser UI's files are: the copy shipped inside the package, else the checkout's."""

from __future__ import annotations

from pathlib import Path

from kb_ai.errors import ConfigError

_PACKAGE_WEB = Path(__file__).resolve().parents[1] / "web"
_CHECKOUT_WEB = Path(__file__).resolve().parents[4] / "web"


def default_web_dir() -> Path:
    """The ``web/`` folder: packaged copy first (``kb_ai/web``), then the source checkout."""
    for candidate in (_PACKAGE_WEB, _CHECKOUT_WEB):
        if (candidate / "index.html").is_file():
            return candidate
    raise ConfigError("the web UI files are missing: reinstall kaas")
