"""Every benchmark script starts from a clone (``--help`` answers), and the central ones run to
the end on a tiny input in a tmp dir. The figures are not checked: benchmarks measure, tests do
not time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each is a Python process importing kaas

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
MODULES = {"abstention_kbs.py", "bench_paths.py"}  # imported by the scripts, not run
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if p.name not in MODULES)


def _run(tmp_path: Path, script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "py" / "src"), os.environ.get("PYTHONPATH", "")]),
           "TMPDIR": str(tmp_path), "HOME": str(tmp_path)}
    env.pop("KAAS_MODEL", None)
    return subprocess.run([sys.executable, str(BENCH / script), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_benchmark_script_answers_help(tmp_path, script):
    done = _run(tmp_path, script, "--help", timeout=120)
    assert done.returncode == 0 and "usage:" in done.stdout, done.stdout + done.stderr


def test_no_benchmark_reads_a_path_of_the_machine_it_was_written_on():
    for script in BENCH.glob("*.py"):
        text = script.read_text(encoding="utf-8")
        for absolute in ("/work/", "/root/", "/home/"):
            assert absolute not in text, f"{script.name} names {absolute}: use bench_paths.eval_data"


@pytest.mark.parametrize("script, args, says", [
    ("bench_ask_offline.py", ("30",), "30"),
    ("bench_selection_scale.py", ("30",), "| 30 |"),
    ("bench_compile.py", ("--sizes", "20", "--modes", "offline"), "20"),
])
def test_a_central_benchmark_runs_on_a_tiny_input(tmp_path, script, args, says):
    done = _run(tmp_path, script, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert says in done.stdout, done.stdout
