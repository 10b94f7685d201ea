"""Where the benchmarks find their data, from any clone: the shared evaluation data is
``KAAS_EVAL_DATA`` when set, else the first ``shared/eval-data`` beside the repository or above it
(``../shared/eval-data`` from the main checkout, two levels up from a worktree). A corpus that is
not on this machine stops the script with a message saying what to install or set, not a crash."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def eval_data(*parts: str) -> Path:
    """``shared/eval-data/<parts>`` (not checked: see ``require``)."""
    if os.environ.get("KAAS_EVAL_DATA"):
        return Path(os.environ["KAAS_EVAL_DATA"]).joinpath(*parts)
    for up in REPO.parents:
        if (up / "shared" / "eval-data").is_dir():
            return up.joinpath("shared", "eval-data", *parts)
    return REPO.parent.joinpath("shared", "eval-data", *parts)


def require(path: Path, how: str) -> Path:
    """``path`` if it exists; else exit (status 2) saying that this corpus is not available and
    ``how`` to make it so."""
    if not path.exists():
        sys.exit(f"{Path(sys.argv[0]).name}: {path} is not available on this machine ({how})")
    return path


EVAL_DATA_HOW = "set KAAS_EVAL_DATA to the shared eval-data folder, or put it at ../shared/eval-data"
