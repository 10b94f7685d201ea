"""The static checks, run as the suite: ruff (``[tool.ruff]`` in pyproject.toml) finds nothing in
py/src, tests and benchmarks, and mypy (``[tool.mypy]``) finds no error in py/src/kb_ai beyond
those recorded in mypy-baseline.txt. A baseline line is an error without its line number, so
edits elsewhere in a file do not invalidate it; an error counts once per occurrence. A missing
tool skips its test, except under CI=true, where it fails.

After fixing baselined errors, rewrite the baseline (it may only shrink):
``python tests/test_static_checks.py --write-mypy-baseline``."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MYPY_BASELINE = ROOT / "mypy-baseline.txt"
_LOCATION = re.compile(r"^(?P<path>[^:\n]+):\d+(?::\d+)?: (?P<rest>error: .*)$")
_LINE_REF = re.compile(r"\bline \d+\b")


def _require(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        message = f"{module} is not installed (pip install -e '.[test]')"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)


def _run(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "NO_COLOR": "1"})


def mypy_errors(output: str) -> Counter[str]:
    """mypy's error lines, each as ``path: error: message  [code]`` (line numbers dropped, also
    those inside a message such as "already defined on line 86"); notes are not errors."""
    found: Counter[str] = Counter()
    for line in output.splitlines():
        match = _LOCATION.match(line.strip())
        if match:
            path = match["path"].replace("\\", "/")
            found[f"{path}: {_LINE_REF.sub('line N', match['rest'])}"] += 1
    return found


def run_mypy() -> subprocess.CompletedProcess:
    return _run("mypy", "--no-error-summary", "--show-error-codes", "--no-pretty", "--no-color-output",
                timeout=900)


def read_baseline() -> Counter[str]:
    lines = MYPY_BASELINE.read_text(encoding="utf-8").splitlines() if MYPY_BASELINE.exists() else []
    return Counter(line for line in lines if line and not line.startswith("#"))


def test_ruff_finds_nothing():
    _require("ruff")
    done = _run("ruff", "check", "--no-cache", "--output-format", "concise", "py/src", "tests", "benchmarks",
                timeout=120)
    assert done.returncode == 0, (
        "ruff found problems (fix them; pyproject's per-file ignores are the old code's baseline, "
        f"not a place for new findings):\n{done.stdout}{done.stderr}")


def test_mypy_error_lines_are_normalised_without_line_numbers():
    output = ("py/src/kb_ai/a.py:12: error: Name \"w\" already defined on line 8  [no-redef]\n"
              "py/src/kb_ai/a.py:30: note: See https://example.invalid\n"
              "py/src/kb_ai/a.py:40: error: Name \"w\" already defined on line 9  [no-redef]\n")
    normalised = 'py/src/kb_ai/a.py: error: Name "w" already defined on line N  [no-redef]'
    assert mypy_errors(output) == Counter({normalised: 2})


@pytest.mark.slow
def test_mypy_finds_no_error_beyond_the_baseline():
    _require("mypy")
    done = run_mypy()
    found = mypy_errors(done.stdout)
    ran = done.returncode == 0 or (done.returncode == 1 and found)
    assert ran, f"mypy did not run:\n{done.stdout}{done.stderr}"
    new = found - read_baseline()
    assert not new, ("mypy errors not in mypy-baseline.txt (fix them; the baseline is the old code's):\n"
                     + "\n".join(sorted(new.elements())))


def write_baseline() -> int:
    done = run_mypy()
    found = mypy_errors(done.stdout)
    header = ("# mypy errors in py/src/kb_ai when the check came in (tests/test_static_checks.py): fix them and\n"
              "# rewrite this file with `python tests/test_static_checks.py --write-mypy-baseline`; never add one.\n")
    MYPY_BASELINE.write_text(header + "".join(f"{line}\n" for line in sorted(found.elements())), encoding="utf-8")
    print(f"{sum(found.values())} errors written to {MYPY_BASELINE}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["--write-mypy-baseline"]:
        sys.exit("usage: python tests/test_static_checks.py --write-mypy-baseline")
    sys.exit(write_baseline())
