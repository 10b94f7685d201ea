"""A non-editable install carries the prompt files and finds them (not the checkout's copy)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds a wheel and installs it in a fresh venv

REPO = Path(__file__).resolve().parents[1]


def test_wheel_ships_prompts_and_finds_them(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(REPO)],
        check=True, capture_output=True,
    )
    wheel = next((tmp_path / "dist").glob("kaas-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for prompt in ("select", "answer", "rewrite", "suggest"):
        assert f"kb_ai/prompts/{prompt}.md" in names
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    probe = subprocess.run(
        [sys.executable, "-c", "from kb_ai.llm.prompts import PromptLibrary; print(PromptLibrary().directory)"],
        cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True,
    )
    assert Path(probe.stdout.strip()) == target / "kb_ai" / "prompts"
