"""The layer contract (pyproject.toml, [tool.importlinter]) holds, and it can fail.

interfaces (cli, server) -> services (quality; compile | navigate) -> engines (llm | offline)
-> store -> base (config, files, untrusted_text, errors, ...). ``lint-imports`` checks every
import of the package against it, so an upward import (store importing navigate, llm importing
store, server importing cli) fails the suite, and with it the build (.ci/run runs the suite).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import kb_ai

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(kb_ai.__file__).resolve().parent


def lint_imports(pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    """``lint-imports`` with the repository's contract, on the package found first on the path."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    command = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
               "sys.exit(lint_imports_command())",
               "--no-cache", "--no-logo", str(ROOT / "pyproject.toml")]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)


def test_the_layer_contract_holds():
    run = lint_imports()
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 kept, 0 broken" in run.stdout


def copy_of_the_package(tmp_path: Path) -> Path:
    shutil.copytree(PACKAGE, tmp_path / "kb_ai", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "kb_ai"


def test_an_upward_import_breaks_the_contract(tmp_path):
    copy = copy_of_the_package(tmp_path)
    with (copy / "store" / "words.py").open("a") as f:
        f.write("\nfrom kb_ai.navigate.ask import build_service  # upward: store -> navigate\n")
    run = lint_imports(tmp_path)
    assert run.returncode != 0, run.stdout
    assert "kb_ai.store is not allowed to import kb_ai.navigate" in run.stdout
    assert "kb_ai.store.words -> kb_ai.navigate.ask" in run.stdout


def test_a_base_module_reaching_into_the_store_breaks_it_too(tmp_path):
    copy = copy_of_the_package(tmp_path)
    with (copy / "files.py").open("a") as f:  # a base module must not import the store
        f.write("\nfrom kb_ai.store.kb import KnowledgeBase\n")
    run = lint_imports(tmp_path)
    assert run.returncode != 0, run.stdout
    assert "kb_ai.files is not allowed to import kb_ai.store" in run.stdout


def test_a_new_module_must_be_placed_in_a_layer(tmp_path):
    copy = copy_of_the_package(tmp_path)
    (copy / "helpers.py").write_text('"""A module nobody placed."""\n')
    run = lint_imports(tmp_path)
    assert run.returncode != 0, run.stdout
    assert "helpers" in run.stdout
