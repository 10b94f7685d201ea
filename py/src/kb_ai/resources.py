"""Files kaas ships beside its code (``prompts/``, ``web/``): found in the installed package
(``kb_ai/<name>``, put there by the wheel build) or, in a source checkout, at the repo root."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_ROOT = Path(__file__).resolve().parent
_CHECKOUT_ROOT = _PACKAGE_ROOT.parents[2]


def shipped_dir(name: str, marker: str) -> Path | None:
    """The folder ``name`` that contains ``marker``: packaged copy first, then the checkout's."""
    for candidate in (_PACKAGE_ROOT / name, _CHECKOUT_ROOT / name):
        if (candidate / marker).is_file():
            return candidate
    return None
