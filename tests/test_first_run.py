"""What a new user meets on the first run (issue 17, item 4): ``kaas init`` says what to do
next, an empty raw/ says so instead of printing a table of zeros, a one-word file is a source,
and a compile with a model after an offline one says that ``--full`` rewrites the offline
articles with the model."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from kb_ai.cli import cli
from kb_ai.compile.pipeline import run_compile
from kb_ai.config import load_settings

from fixtures.compile.fake_model import compile_responder
from helpers import llm_settings
from llm_fakes import FakeOpenAI


def _kaas(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_init_prints_the_next_steps(tmp_path):
    kb = tmp_path / "my kb"
    result = _kaas("init", str(kb))
    assert result.exit_code == 0, result.output
    assert "next:" in result.stdout
    lines = result.stdout.split("next:")[1]
    assert "raw" in lines and "add FILE|URL" in lines
    assert "--kb '" + str(kb) + "' compile" in lines  # a path with a space is quoted for the shell
    assert "ask" in lines and "serve" in lines
    again = _kaas("init", str(kb))  # an existing KB: still says what to do
    assert "nothing changed" in again.stdout and "compile" in again.stdout


def test_compiling_an_empty_raw_folder_says_so_with_a_hint(tmp_path):
    _kaas("init", str(tmp_path))
    result = _kaas("--kb", str(tmp_path), "compile")
    assert result.exit_code == 0, result.output
    assert "raw/ is empty" in result.stdout and "kaas add" in result.stdout
    assert "stage" not in result.stdout and "0 new" not in result.stdout  # no table of zeros
    as_json = json.loads(_kaas("--kb", str(tmp_path), "compile", "--json").stdout)
    assert any("raw/ is empty" in note for note in as_json["notes"])


def test_a_source_removed_leaving_raw_empty_is_reported_as_a_deletion(tmp_path):
    _kaas("init", str(tmp_path))
    (tmp_path / "raw" / "note.md").write_text("# Note\n\nThe kettle is in the kitchen.\n")
    assert _kaas("--kb", str(tmp_path), "compile").exit_code == 0
    (tmp_path / "raw" / "note.md").unlink()
    result = _kaas("--kb", str(tmp_path), "compile")
    assert "1 deleted" in result.stdout and "raw/ is empty" not in result.stdout


def test_a_one_word_file_is_compiled(tmp_path):
    _kaas("init", str(tmp_path))
    (tmp_path / "raw" / "codename.txt").write_text("Bluebird\n")
    result = _kaas("--kb", str(tmp_path), "compile", "--json")
    report = json.loads(result.stdout)
    assert report["exit_code"] == 0 and not report["skipped"], report["skipped"]
    assert len(report["created"]) == 1
    article = (tmp_path / "wiki" / report["created"][0]).read_text()
    assert "Bluebird" in article
    blank = tmp_path / "raw" / "blank.md"
    blank.write_text("  \n\n-- ..\n")  # no word at all: still skipped, with the reason
    again = json.loads(_kaas("--kb", str(tmp_path), "compile", "--json").stdout)
    assert [s["reason"] for s in again["skipped"]] == ["no text found"]


def test_a_model_compile_after_an_offline_one_points_to_full(tmp_path):
    _kaas("init", str(tmp_path))
    (tmp_path / "raw" / "kettle.md").write_text("# Kettle\n\nThe kettle is in the kitchen, next to the sink.\n")
    offline = run_compile(load_settings(tmp_path), progress=False)
    assert offline.mode == "offline" and len(offline.created) == 1
    with FakeOpenAI() as fake:
        fake.add(compile_responder, repeat=True)
        report = run_compile(llm_settings(tmp_path), progress=False)
        assert report.mode == "llm" and report.usage["llm_calls"] <= 1  # nothing changed: (a topic summary at most)
        note = [n for n in report.notes if "--full" in n]
        assert note and re.search(r"1 article from 1 unchanged source .*written offline", note[0]), report.notes
        assert "kaas compile --full" in report.render_text()
        full = run_compile(llm_settings(tmp_path), full=True, progress=False)
        assert not [n for n in full.notes if "written offline" in n]
        after = run_compile(llm_settings(tmp_path), progress=False)  # rewritten by the model: no more note
        assert not [n for n in after.notes if "written offline" in n], after.notes


def test_the_readme_says_how_to_run_kaas_from_the_venv():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    using = readme.split("## Five minutes with your own folder", 1)[1].split("```", 1)[0]  # before its first command
    assert ". .venv/bin/activate" in using and ".venv/bin/kaas" in using
