"""A file a person names on the command line (``kaas add PATH``, ``kaas eval QUESTIONS.jsonl``)
that cannot be read gets the same one-line message from every command (``files.read_named_file``),
never a traceback, and nothing is added."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from kb_ai.cli import cli
from kb_ai.compile.add import MAX_ADD_BYTES
from kb_ai.errors import KaasError
from kb_ai.files import read_named_file, read_named_text
from kb_ai.quality.eval_questions import MAX_QUESTIONS_FILE_BYTES
from kb_ai.store.kb import init_kb


@pytest.fixture
def kb(tmp_path):
    init_kb(tmp_path / "kb")
    return tmp_path / "kb"


def _missing(tmp_path):
    return tmp_path / "gone.md"


def _fifo(tmp_path):
    path = tmp_path / "pipe.md"
    os.mkfifo(path)  # never waited on: no writer will ever come
    return path


def _through_a_file(tmp_path):
    (tmp_path / "notes.md").write_text("# Notes\n")
    return tmp_path / "notes.md" / "inner.md"


def _link_loop(tmp_path):
    (tmp_path / "a.md").symlink_to(tmp_path / "b.md")
    (tmp_path / "b.md").symlink_to(tmp_path / "a.md")
    return tmp_path / "a.md"


def _too_large(tmp_path):
    path = tmp_path / "huge.md"
    with open(path, "wb") as handle:  # sparse: no 50 MB written
        handle.truncate(max(MAX_ADD_BYTES, MAX_QUESTIONS_FILE_BYTES) + 1)
    return path


CASES = [
    (_missing, "no such file"),
    (_fifo, "not a regular file"),
    (_through_a_file, "no such file (a part of its path is a file, not a folder)"),
    (_link_loop, "cannot read (Too many levels of symbolic links)"),
    (_too_large, "larger than 50 MB"),
]


@pytest.mark.parametrize("make, problem", CASES, ids=[c[0].__name__.strip("_") for c in CASES])
def test_add_and_eval_say_the_same_one_line_about_a_file_they_cannot_read(kb, tmp_path, make, problem):
    path = make(tmp_path)
    runner = CliRunner()
    added = runner.invoke(cli, ["--kb", str(kb), "add", str(path)])
    evaluated = runner.invoke(cli, ["--kb", str(kb), "eval", str(path)])
    line = f"kaas: error: {path}: {problem}"
    for result in (added, evaluated):
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        assert result.exit_code != 0 and result.stderr.strip() == line, result.stderr
    assert sorted(p.name for p in (kb / "raw").iterdir()) == []


def test_a_questions_file_that_is_not_utf8_is_named(kb, tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes('{"question": "Où est la bouilloire ?"}\n'.encode("latin-1"))
    result = CliRunner().invoke(cli, ["--kb", str(kb), "eval", str(path)])
    assert result.exit_code != 0 and result.stderr.strip() == f"kaas: error: {path}: not UTF-8 text"


def test_the_caller_chooses_the_error_class_and_the_limit_is_said_in_its_unit(tmp_path):
    class OwnError(KaasError):
        code = "own"

    path = tmp_path / "page.md"
    path.write_bytes(b"x" * 2_001)
    with pytest.raises(OwnError, match=r"page\.md: larger than 2 kB$"):
        read_named_file(path, 2_000, OwnError)
    with pytest.raises(KaasError, match=r"page\.md: larger than 100 bytes$"):
        read_named_text(path, 100)
    path.write_bytes(b"\xef\xbb\xbfhello")
    assert read_named_text(path, 100) == "hello"  # a byte-order mark dropped
