"""The fault hook the kill trials crash through (kb_ai/faults.py): every point the tests name is
still called in the code (a rename cannot silently turn a kill trial into a clean run), and the
hook does what ``KAAS_FAULT`` says, and nothing without it."""

from __future__ import annotations

import ast
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kb_ai
from kb_ai import faults
from kb_ai.faults import ENV, InjectedFault, fault_point

from helpers import FAULT_POINTS, fault_spec

SOURCE = Path(kb_ai.__file__).resolve().parent


def fault_points_in_code() -> dict[str, list[str]]:
    """Every ``fault_point(...)`` call under py/src/kb_ai: its name -> where it is called."""
    found: dict[str, list[str]] = {}
    for file in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"), str(file))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "fault_point":
                where = f"{file.relative_to(SOURCE)}:{node.lineno}"
                arg = node.args[0] if node.args else None
                assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), f"{where}: name a literal point"
                found.setdefault(arg.value, []).append(where)
    return found


def test_every_fault_point_the_tests_use_is_called_once_in_the_code():
    in_code = fault_points_in_code()
    missing = sorted(FAULT_POINTS - in_code.keys())
    assert not missing, f"fault points the kill trials use but the code no longer calls: {missing}"
    twice = {name: where for name, where in in_code.items() if len(where) > 1}
    assert not twice, f"a point names one moment: {twice}"
    unused = sorted(in_code.keys() - FAULT_POINTS)
    assert not unused, f"fault points no test uses (add them to helpers.FAULT_POINTS with a trial): {unused}"


def test_a_renamed_point_is_caught(tmp_path, monkeypatch):
    """The check above reads the source: a point renamed in the code is missing from it."""
    (tmp_path / "mod.py").write_text('from kb_ai.faults import fault_point\nfault_point("compile.write.renamed")\n')
    monkeypatch.setattr(sys.modules[__name__], "SOURCE", tmp_path)
    assert fault_points_in_code() == {"compile.write.renamed": ["mod.py:2"]}
    with pytest.raises(AssertionError, match="no longer calls"):
        test_every_fault_point_the_tests_use_is_called_once_in_the_code()


def test_without_the_variable_a_point_does_nothing():
    for _ in range(3):
        fault_point("compile.write.after_file")


def test_raise_acts_on_the_nth_pass_of_that_point_only(monkeypatch):
    monkeypatch.setenv(ENV, fault_spec("compile.write.after_file", 3, action="raise"))
    fault_point("compile.write.before_file")  # another point: not counted
    fault_point("compile.write.after_file")
    fault_point("compile.write.after_file")
    with pytest.raises(InjectedFault, match="compile.write.after_file@3"):
        fault_point("compile.write.after_file")
    fault_point("compile.write.after_file")  # once: later passes go on
    assert not issubclass(InjectedFault, Exception)  # no `except Exception` on the way catches it


def test_a_new_value_counts_afresh_and_reset_starts_again(monkeypatch):
    monkeypatch.setenv(ENV, fault_spec("compile.write.after_file", 2, action="raise"))
    fault_point("compile.write.after_file")
    monkeypatch.setenv(ENV, fault_spec("compile.write.after_file", 1, action="raise"))
    with pytest.raises(InjectedFault):
        fault_point("compile.write.after_file")
    faults.reset()
    with pytest.raises(InjectedFault):
        fault_point("compile.write.after_file")


def test_sleep_pauses_every_pass(monkeypatch):
    monkeypatch.setenv(ENV, "compile.write.before_file:sleep=0.05,store.reindex.before:raise")
    start = time.perf_counter()
    fault_point("compile.write.before_file")
    fault_point("compile.write.before_file")
    assert time.perf_counter() - start >= 0.1
    with pytest.raises(InjectedFault):  # several specs, comma-separated
        fault_point("store.reindex.before")


def test_an_unknown_action_is_an_error_not_a_kill(monkeypatch):
    monkeypatch.setenv(ENV, "compile.write.after_file:explode")
    with pytest.raises(ValueError, match="unknown action"):
        fault_point("compile.write.after_file")


def test_kill_is_a_real_sigkill():
    code = "from kb_ai.faults import fault_point\nfault_point('store.reindex.before')\nprint('survived')\n"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                           env={"PATH": "/usr/bin:/bin", ENV: "store.reindex.before"})
    assert child.returncode == -signal.SIGKILL and "survived" not in child.stdout, child.stderr
