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

from compile_checks import assert_consistent, compile_offline, make_kb, manifest, wiki_snapshot
from fixtures.compile.fake_model import compile_responder
from llm_fakes import FakeOpenAI

TESTS_DIR = Path(__file__).resolve().parent

CHILD = textwrap.dedent('''
    import os, signal, sys, time
    from pathlib import Path
    import kb_ai.compile.write as write
    import kb_ai.compile.state as state
    import kb_ai.store.kb as kb_module
    from kb_ai.compile.pipeline import run_compile
    from kb_ai.config import Settings

    kb, point, count, delay = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    seen = {"n": 0}

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    def tick():
        seen["n"] += 1
        return seen["n"] >= count

    real_write = write.write_article_text
    def write_article_text(wiki_dir, path, text):
        if delay:
            time.sleep(delay)
        if point == "before-article-file" and tick():
            die()  # journaled, file not replaced yet
        real_write(wiki_dir, path, text)
        if point == "after-article-file" and tick():
            die()  # file replaced, source not yet marked compiled
    write.write_article_text = write_article_text

    real_append = state.CompileState._append
    def append(self, entry):
        if point == "torn-journal" and tick():
            self._journal = self._journal or open(self.dir / state.JOURNAL, "a", encoding="utf-8")
            import json
            line = json.dumps(entry)
            self._journal.write(line[: len(line) // 2])
            self._journal.flush()
            die()
        real_append(self, entry)
    state.CompileState._append = append

    real_reindex = kb_module.KnowledgeBase.reindex
    def reindex(self):
        if point == "index" and tick():
            die()
        return real_reindex(self)
    kb_module.KnowledgeBase.reindex = reindex

    settings = Settings(kb=Path(kb))
    if os.environ.get("CHILD_LLM"):
        sys.path.insert(0, os.environ["TESTS_DIR"])
        from llm_fakes import FakeOpenAI, MODEL, API_BASE
        from fixtures.compile.fake_model import compile_responder
        log = open(os.environ["CHILD_LLM"], "a")
        def counted(body):
            log.write("x\\n"); log.flush()
            return compile_responder(body)
        settings = Settings(kb=Path(kb), model=MODEL, api_base=API_BASE, api_key="sk-test", concurrency=1)
        with FakeOpenAI() as fake:
            fake.add(counted, repeat=True)
            run_compile(settings, progress=False)
    else:
        run_compile(settings, progress=False)
    print("finished")
''')


def run_child(tmp_path: Path, kb: Path, point: str, count: int, delay: float = 0.0, env_extra=None,
              kill_after: float | None = None) -> subprocess.CompletedProcess | int:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "TESTS_DIR": str(TESTS_DIR), **(env_extra or {})}
    args = [sys.executable, str(script), str(kb), point, str(count), str(delay)]
    if kill_after is None:
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(kill_after)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    return process.returncode


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The wiki a clean, uninterrupted offline compile produces."""
    root = tmp_path_factory.mktemp("reference")
    make_kb(root)
    compile_offline(root)
    return wiki_snapshot(root)


@pytest.mark.parametrize("point,count", [
    ("before-article-file", 1),
    ("before-article-file", 6),
    ("after-article-file", 4),
    ("torn-journal", 9),
    ("index", 1),
])
def test_killed_compile_resumes_to_the_same_wiki(tmp_path, reference, point, count):
    kb = tmp_path / "kb"
    make_kb(kb)
    child = run_child(tmp_path, kb, point, count)
    assert child.returncode == -signal.SIGKILL, child.stderr
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


@pytest.mark.parametrize("kill_after", [0.8, 1.5, 2.1])
def test_kill_at_an_arbitrary_moment(tmp_path, reference, kill_after):
    """The child takes ~1 s to start and ingest, then 0.2 s per article write: these moments fall
    in start-up/ingest, early writes and late writes (on a loaded machine, earlier)."""
    kb = tmp_path / "kb"
    make_kb(kb)
    run_child(tmp_path, kb, "none", 0, delay=0.2, kill_after=kill_after)
    compile_offline(kb)
    assert_consistent(kb)
    assert wiki_snapshot(kb) == reference


def test_killed_llm_compile_does_not_repeat_finished_calls(tmp_path):
    clean, kb = tmp_path / "clean", tmp_path / "kb"
    make_kb(clean)
    shutil.copytree(clean / "raw", kb / "raw")
    with FakeOpenAI() as fake:
        fake.add(compile_responder, repeat=True)
        from test_compile_llm import compile_llm

        compile_llm(clean, fake, settings={"concurrency": 1})
        total = fake.call_count
    calls_log = tmp_path / "calls.log"
    child = run_child(tmp_path, kb, "after-article-file", 4, env_extra={"CHILD_LLM": str(calls_log)})
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
    make_kb(tmp_path)
    held = CompileLock(tmp_path / ".kaas").acquire()
    try:
        with pytest.raises(LockedError, match=rf"another kaas compile is running .*pid {os.getpid()}"):
            compile_offline(tmp_path)
    finally:
        held.release()
    assert compile_offline(tmp_path).created


def test_lock_of_a_dead_process_is_taken_over(tmp_path):
    make_kb(tmp_path)
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(child.stdout)
    (tmp_path / ".kaas").mkdir()
    (tmp_path / ".kaas" / "compile.lock").write_text(f'{{"pid": {dead_pid}, "host": "x", "started": 0}}')
    report = compile_offline(tmp_path)
    assert report.created and any(f"pid {dead_pid}" in n for n in report.notes)
    assert (tmp_path / ".kaas" / "compile.lock").read_text() == ""  # released
