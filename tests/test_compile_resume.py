"""Resumable and exclusive: a compile killed with SIGKILL at any point leaves a consistent wiki and
the next run finishes the work (without repeating finished LLM calls); one compile at a time."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kb_ai.store.lock import CompileLock
from kb_ai.errors import LockedError
from kb_ai.faults import ENV

from compile_checks import assert_consistent, compile_offline, make_source_kb, manifest, wiki_snapshot
from fixtures.compile.fake_model import compile_responder
from helpers import fault_spec
from llm_fakes import FakeOpenAI

TESTS_DIR = Path(__file__).resolve().parent

CHILD = textwrap.dedent('''
    import os, sys
    from pathlib import Path
    from kb_ai.compile.pipeline import run_compile
    from kb_ai.config import Settings

    kb = Path(sys.argv[1])
    if os.environ.get("CHILD_LLM"):
        sys.path.insert(0, os.environ["TESTS_DIR"])
        from helpers import llm_settings
        from llm_fakes import FakeOpenAI
        from fixtures.compile.fake_model import compile_responder
        log = open(os.environ["CHILD_LLM"], "a")
        def counted(body):
            log.write("x\\n"); log.flush()
            return compile_responder(body)
        with FakeOpenAI() as fake:
            fake.add(counted, repeat=True)
            run_compile(llm_settings(kb, cache=True, concurrency=1), progress=False)
    else:
        run_compile(Settings(kb=kb), progress=False)
    print("finished")
''')


def run_child(tmp_path: Path, kb: Path, fault: str, env_extra=None,
              kill_after: float | None = None) -> subprocess.CompletedProcess | int:
    """Compile ``kb`` in a child process with ``KAAS_FAULT=fault`` (kb_ai/faults.py); with
    ``kill_after``, SIGKILL it after that many seconds."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "TESTS_DIR": str(TESTS_DIR), ENV: fault, **(env_extra or {})}
    args = [sys.executable, str(script), str(kb)]
    if kill_after is None:
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(kill_after)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    return process.returncode


def tear_the_journal(kb: Path) -> None:
    """What a kill in the middle of a journal write leaves: the start of a line, no newline."""
    journal = kb / ".kaas" / "journal.jsonl"
    last = journal.read_text(encoding="utf-8").splitlines()[-1]
    with journal.open("a", encoding="utf-8") as file:
        file.write(last[: len(last) // 2])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The wiki a clean, uninterrupted offline compile produces."""
    root = tmp_path_factory.mktemp("reference")
    make_source_kb(root)
    compile_offline(root)
    return wiki_snapshot(root)


@pytest.mark.slow
@pytest.mark.parametrize("point,nth", [
    ("compile.write.before_file", 1),  # journaled, file not replaced yet
    ("compile.write.before_file", 6),
    ("compile.write.after_file", 4),  # file replaced, source not yet marked compiled
    ("compile.journal.before_line", 9),  # then torn: half a line written, no newline
    ("store.reindex.before", 1),
])
def test_killed_compile_resumes_to_the_same_wiki(tmp_path, reference, point, nth):
    kb = tmp_path / "kb"
    make_source_kb(kb)
    child = run_child(tmp_path, kb, fault_spec(point, nth))
    assert child.returncode == -signal.SIGKILL, child.stderr
    if point == "compile.journal.before_line":
        tear_the_journal(kb)
    if (kb / "wiki" / "master-index.md").exists():
        assert_consistent_or_stale_index(kb)
    report = compile_offline(kb)
    assert report.notes and "did not finish" in report.notes[0]
    assert_consistent(kb)
    assert wiki_snapshot(kb) == reference
    assert not (kb / ".kaas" / "journal.jsonl").exists()
    assert all(r["status"] in ("compiled", "duplicate", "skipped") for r in manifest(kb)["sources"].values())


def assert_consistent_or_stale_index(kb: Path) -> None:
    """Mid-run, the catalog may not list new articles yet, but every line it has resolves and no
    article file is half-written (each parses)."""
    from kb_ai.store.articles import iter_article_paths, load_article
    from kb_ai.store.catalog import parse_master_index

    catalog = parse_master_index((kb / "wiki" / "master-index.md").read_text())
    for entry in catalog.entries:
        assert (kb / "wiki" / entry.path).is_file()
    for path in iter_article_paths(kb / "wiki"):
        load_article(kb / "wiki", path)


@pytest.mark.slow
@pytest.mark.parametrize("kill_after", [0.8, 1.5, 2.1])
def test_kill_at_an_arbitrary_moment(tmp_path, reference, kill_after):
    """The child takes ~1 s to start and ingest, then 0.2 s per article write: these moments fall
    in start-up/ingest, early writes and late writes (on a loaded machine, earlier)."""
    kb = tmp_path / "kb"
    make_source_kb(kb)
    run_child(tmp_path, kb, fault_spec("compile.write.before_file", action="sleep=0.2"), kill_after=kill_after)
    compile_offline(kb)
    assert_consistent(kb)
    assert wiki_snapshot(kb) == reference


@pytest.mark.slow
def test_killed_llm_compile_does_not_repeat_finished_calls(tmp_path):
    clean, kb = tmp_path / "clean", tmp_path / "kb"
    make_source_kb(clean)
    shutil.copytree(clean / "raw", kb / "raw")
    with FakeOpenAI() as fake:
        fake.add(compile_responder, repeat=True)
        from test_compile_llm import compile_llm

        compile_llm(clean, fake, settings={"concurrency": 1})
        total = fake.call_count
    calls_log = tmp_path / "calls.log"
    child = run_child(tmp_path, kb, fault_spec("compile.write.after_file", 4), env_extra={"CHILD_LLM": str(calls_log)})
    assert child.returncode == -signal.SIGKILL, child.stderr
    before_kill = len(calls_log.read_text().splitlines())
    assert 10 < before_kill < total  # all plans and some writes happened
    with FakeOpenAI() as fake:
        fake.add(compile_responder, repeat=True)
        report = compile_llm(kb, fake, settings={"concurrency": 1})
    assert before_kill + fake.call_count == total
    assert report.stage("plan").llm_calls == 0
    assert_consistent(kb)
    assert wiki_snapshot(kb) == wiki_snapshot(clean)


def test_second_compile_is_refused_while_one_runs(tmp_path):
    make_source_kb(tmp_path)
    held = CompileLock(tmp_path / ".kaas").acquire()
    try:
        with pytest.raises(LockedError, match=rf"another kaas compile is running .*pid {os.getpid()}"):
            compile_offline(tmp_path)
    finally:
        held.release()
    assert compile_offline(tmp_path).created


def test_lock_of_a_dead_process_is_taken_over(tmp_path):
    make_source_kb(tmp_path)
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(child.stdout)
    (tmp_path / ".kaas").mkdir()
    (tmp_path / ".kaas" / "compile.lock").write_text(f'{{"pid": {dead_pid}, "host": "x", "started": 0}}')
    report = compile_offline(tmp_path)
    assert report.created and any(f"pid {dead_pid}" in n for n in report.notes)
    assert (tmp_path / ".kaas" / "compile.lock").read_text() == ""  # released
