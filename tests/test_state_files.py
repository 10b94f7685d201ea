""".kaas/ is kaas's own state, documented as safe to delete: a state file that is damaged or
hostile (a FIFO, a folder, a link to /dev/zero, garbage bytes, JSON nested past the stack, JSON
that is not what kaas wrote) is treated as missing, named in a one-line warning, and the work is
redone. Never a hang, a traceback or a lost article. A raw/ source that stops being a regular
file between the scan and the read is skipped with its reason.

Every command runs for real in a child process with a timeout, so a hang fails the test instead
of hanging the suite: ``kaas compile`` and ``kaas ask`` (offline and with a fake model served by
respx inside the child) and ``kaas serve``'s app through Starlette's TestClient."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers import build_kb, write_files
from kb_ai.cli import cli

pytestmark = pytest.mark.slow  # every case runs kaas in a subprocess on copies of compiled knowledge bases

TESTS_DIR = Path(__file__).resolve().parent
TIMEOUT = 60
MEMORY_LIMIT = 6 << 30  # a child that reads /dev/zero or a huge file whole fails instead of exhausting the machine
QUESTION = "How do we deploy releases?"

SOURCES = {
    "raw/ops/deploy.md": "# Deploying\n\nWe deploy releases with a blue green switch every Tuesday afternoon. "
                         "The old colour stays up for one hour so a rollback is one command.\n",
    "raw/ops/backup.md": "# Backups\n\nBackups run nightly to the object store and are kept for thirty days. "
                         "A restore drill runs on the first Monday of each month.\n",
    "raw/team/oncall.md": "# On call\n\nThe on-call engineer answers pages within fifteen minutes and "
                          "hands over every Monday at ten with a written summary of open incidents.\n",
}

# The child: run the real CLI (``kaas ...``), or a Python snippet, optionally with a fake model
# (respx inside the child: the compile fixture's model for compile prompts, page selection and a
# streamed answer for ask).
CHILD = textwrap.dedent('''
    import json, os, re, sys
    sys.path.insert(0, os.environ["TESTS_DIR"])
    mode, rest = sys.argv[1], sys.argv[2:]

    def run():
        if mode == "cli":
            from kb_ai.cli import main
            sys.argv = ["kaas", *rest]
            main()
        else:
            exec(compile(rest[0], "<snippet>", "exec"), {"__name__": "__snippet__"})

    if os.environ.get("FAKE_MODEL"):
        from llm_fakes import FakeOpenAI, all_text, chat_json, chat_sse
        from fixtures.compile.fake_model import PLAN_MARKER, TOPIC_MARKER, WRITE_MARKER, compile_responder

        def responder(body):
            text = all_text(body)
            if any(marker in text for marker in (PLAN_MARKER, WRITE_MARKER, TOPIC_MARKER)):
                return compile_responder(body)
            if body.get("stream"):
                return chat_sse(["We deploy with a blue green switch ", "[Deploying](ops/deploying.md)."])
            paths = re.findall(r"\\]\\(([a-z0-9/-]+\\.md)\\)", text)
            return chat_json(json.dumps({"paths": [p for p in paths if "deploy" in p][:1] or paths[:1]}))

        with FakeOpenAI() as fake:
            fake.add(responder, repeat=True)
            run()
    else:
        run()
''')


def child(args: list[str], *, model: bool = False, snippet: str | None = None, env_extra=None):
    """Run the child; a hang is a failure (the process is killed), never a stuck suite."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAAS_")}
    env["TESTS_DIR"] = str(TESTS_DIR)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["DISABLE_AIOHTTP_TRANSPORT"] = "True"
    if model:
        from llm_fakes import API_BASE, MODEL

        env.update(FAKE_MODEL="1", KAAS_MODEL=MODEL, KAAS_API_BASE=API_BASE, KAAS_API_KEY="sk-test")
    env.update(env_extra or {})
    argv = [sys.executable, "-c", CHILD] + (["snippet", snippet] if snippet is not None else ["cli", *args])
    try:
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL,
                              preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung for {TIMEOUT}s: {' '.join(args) or 'snippet'}")


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def kaas(root: Path, *args: str, model: bool = False, env_extra=None):
    return child(["--kb", str(root), *args], model=model, env_extra=env_extra)


def assert_clean(out, *names: str) -> str:
    """Exit 0, no traceback, and (for each name) a warning line that names it. Returns all output."""
    text = out.stdout + out.stderr
    assert "Traceback" not in text, text[-3000:]
    assert out.returncode == 0, text[-3000:]
    assert_warned(text, *names)
    return text


def assert_warned(text: str, *names: str) -> None:
    for name in names:
        assert any(name in line for line in warning_lines(text)), f"no warning naming {name}:\n{text[-3000:]}"


def warning_lines(text: str) -> list[str]:
    """``kaas: warning: ...`` lines (stderr) and the lines of a compile report's ``warnings:``."""
    found, in_section = [], False
    for line in text.splitlines():
        if line.startswith("kaas: warning:"):
            found.append(line)
        elif line == "warnings:":
            in_section = True
        elif in_section and line.startswith("  "):
            found.append(line)
        else:
            in_section = False
    return found


def articles(root: Path) -> dict[str, str]:
    wiki = root / "wiki"
    return {p.relative_to(wiki).as_posix(): p.read_text(encoding="utf-8") for p in sorted(wiki.rglob("*.md"))
            if p.is_file() and p.name not in ("master-index.md", "log.md", "topics.md")}


def plant(path: Path, kind: str, tmp_path: Path) -> None:
    """Put the hostile variant ``kind`` in place of ``path`` (whatever was there is removed)."""
    if path.is_symlink() or path.is_file() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
        (path / "inside").write_text("x")
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "huge":  # a link to a sparse file past every bound kaas reads
        huge = tmp_path / "huge.bin"
        if not huge.exists():
            with open(huge, "wb") as handle:
                handle.truncate(3 << 30)
        path.symlink_to(huge)
    elif kind == "garbage":
        path.write_bytes(b"\xff\xfe\x00 not json {[")
    elif kind == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif kind.startswith("json:"):
        path.write_text(kind[len("json:"):])
    else:
        raise AssertionError(kind)


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    """Knowledge bases to copy: ``raw`` (sources only), ``offline`` (compiled offline and asked
    once: lexical index saved), ``model`` (compiled with the fake model and asked once with it:
    LLM cache entries saved), ``model_cache`` (the LLM cache a model compile of ``raw`` writes)."""
    base = tmp_path_factory.mktemp("state-templates")
    raw = base / "raw-kb"
    write_files(raw, SOURCES)
    offline = base / "offline"
    shutil.copytree(raw, offline, symlinks=True)
    assert kaas(offline, "compile").returncode == 0
    assert kaas(offline, "ask", QUESTION).returncode == 0
    model = base / "model"
    shutil.copytree(raw, model, symlinks=True)
    out = kaas(model, "compile", model=True)
    assert out.returncode == 0, out.stderr
    model_cache = base / "model-cache"
    shutil.copytree(model / ".kaas" / "cache" / "llm", model_cache)
    out = kaas(model, "ask", QUESTION, model=True)
    assert out.returncode == 0, out.stderr
    return {"raw": raw, "offline": offline, "model": model, "model_cache": model_cache}


def copy_of(templates, name: str, tmp_path: Path) -> Path:
    root = tmp_path / "kb"
    shutil.copytree(templates[name], root, symlinks=True)  # copy2: mtimes kept, so saved indexes stay valid
    return root


def change_a_source(root: Path) -> None:
    (root / "raw/ops/deploy.md").write_text(
        SOURCES["raw/ops/deploy.md"] + "\nSince March the switch runs from the release pipeline.\n", encoding="utf-8")


# -- compile: manifest, journal, fingerprints, lock ---------------------------------------------

# Each case hangs, runs out of memory, fails with a traceback or an error, or duplicates every
# article on main; the damage counts as missing state here.
STATE_CASES = [
    ("manifest.json", "fifo"), ("manifest.json", "zero"), ("manifest.json", "folder"), ("manifest.json", "huge"),
    ("manifest.json", "garbage"), ("manifest.json", "deep"), ("manifest.json", "json:[1, 2]"),
    ("manifest.json", 'json:{"format": 1, "sources": {"raw/x.md": 5}}'),
    ("manifest.json", 'json:{"format": 1, "articles": {"../../x.md": {"path": "../../x.md"}}}'),
    ("journal.jsonl", "fifo"), ("journal.jsonl", "folder"), ("journal.jsonl", "huge"), ("journal.jsonl", "garbage"),
    ("journal.jsonl", "json:[1, 2]"),
    ("fingerprints.json", "folder"), ("fingerprints.json", "huge"), ("fingerprints.json", "json:[1, 2]"),
    ("fingerprints.json", 'json:{"raw/ops/deploy.md": 5}'),
]


@pytest.mark.parametrize("name, kind", STATE_CASES)
def test_compile_offline_redoes_the_work_of_a_damaged_state_file(templates, tmp_path, name, kind):
    # Journal bytes that end without a newline are a killed run's torn last line: ignored
    # quietly (a damaged line before the last is a warning: see the next test).
    quiet = name == "journal.jsonl" and (kind == "garbage" or kind.startswith("json:"))
    reference = copy_of(templates, "offline", tmp_path / "ref")
    change_a_source(reference)
    assert kaas(reference, "compile").returncode == 0
    root = copy_of(templates, "offline", tmp_path)
    change_a_source(root)
    plant(root / ".kaas" / name, kind, tmp_path)
    text = assert_clean(kaas(root, "compile"))
    assert articles(root) == articles(reference)  # nothing lost, nothing duplicated
    assert_warned(text, *([] if quiet else [f".kaas/{name}"]))
    assert (root / ".kaas" / "manifest.json").is_file()
    assert not (root / ".kaas" / name).is_symlink()
    # and the next run is a quiet no-op on the state it wrote afresh
    again = kaas(root, "compile")
    assert "damaged" not in again.stdout + again.stderr and again.returncode == 0
    assert articles(root) == articles(reference)


@pytest.mark.parametrize("line", [b"\xff\xfe garbage\n", b"[1, 2]\n", b'{"op": "source", "record": {"path": 5}}\n'])
def test_a_damaged_line_in_the_journal_is_skipped_with_a_warning(templates, tmp_path, line):
    root = copy_of(templates, "offline", tmp_path)
    change_a_source(root)
    (root / ".kaas" / "journal.jsonl").write_bytes(line + b'{"op": "prompts", "prompts": {"offline": "offline-1"}}\n')
    text = assert_clean(kaas(root, "compile"), ".kaas/journal.jsonl")
    assert "unreadable line" in text
    assert "Since March" in (root / "wiki/ops/deploying.md").read_text()


@pytest.mark.parametrize("kind", ["fifo", "folder", "zero", "deep"])
def test_a_lock_file_that_is_not_a_file_is_replaced(templates, tmp_path, kind):
    root = copy_of(templates, "offline", tmp_path)
    change_a_source(root)
    warned = ["compile.lock"] if kind != "deep" else []  # a lock naming no holder is just a lock
    plant(root / ".kaas" / "compile.lock", kind, tmp_path)
    assert_clean(kaas(root, "compile"), *warned)
    assert (root / ".kaas" / "compile.lock").is_file() and not (root / ".kaas" / "compile.lock").is_symlink()
    assert "Since March" in (root / "wiki/ops/deploying.md").read_text()
    # ask --save takes the same lock
    plant(root / ".kaas" / "compile.lock", kind, tmp_path)
    assert_clean(kaas(root, "ask", QUESTION, "--save"), *warned)
    assert list((root / "wiki" / "answers").glob("*.md"))


def test_a_dot_kaas_that_is_a_file_or_fifo_is_replaced(templates, tmp_path):
    """All state lost: the sources are found again through the articles' ``sources:``, so
    nothing is duplicated and nothing is rewritten; articles count as hand-written (documented)."""
    for kind in ("fifo", "garbage"):
        root = copy_of(templates, "offline", tmp_path / kind)
        before = articles(root)
        plant(root / ".kaas", kind, tmp_path)
        text = assert_clean(kaas(root, "compile"))
        assert "found again" in text
        assert articles(root) == before
        assert (root / ".kaas" / "manifest.json").is_file()
        change_a_source(root)
        out = kaas(root, "compile")
        assert "Traceback" not in out.stderr
        assert set(articles(root)) == set(before)


# -- compile: the texts kaas keeps of what it wrote ------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_damaged_kept_text_counts_its_article_as_hand_written(templates, tmp_path, kind):
    root = copy_of(templates, "offline", tmp_path)
    manifest = json.loads((root / ".kaas/manifest.json").read_text())
    digest = manifest["articles"]["ops/deploying.md"]["written_hash"]
    kept = root / ".kaas" / "written" / digest[:2] / digest
    assert kept.is_file()
    plant(kept, kind, tmp_path)
    change_a_source(root)
    before = articles(root)
    text = assert_clean(kaas(root, "compile"))
    after = articles(root)
    assert set(after) == set(before)
    # Without a trustworthy kept text every line counts as hand-written: nothing of it is lost.
    for line in before["ops/deploying.md"].split("---", 2)[2].splitlines():
        assert line in after["ops/deploying.md"], (line, text)
    assert_warned(text, f".kaas/written/{digest[:2]}/{digest}")


def test_a_kept_texts_folder_that_is_a_link_is_never_followed(templates, tmp_path):
    """Removing kept texts no record names must not remove files through a planted link
    (.kaas/written -> the knowledge base itself would delete raw/ sources and articles)."""
    root = copy_of(templates, "offline", tmp_path)
    before_raw = sorted(p.relative_to(root).as_posix() for p in (root / "raw").rglob("*") if p.is_file())
    before = articles(root)
    shutil.rmtree(root / ".kaas" / "written")
    (root / ".kaas" / "written").symlink_to(root)
    change_a_source(root)
    assert_clean(kaas(root, "compile"))
    assert sorted(p.relative_to(root).as_posix() for p in (root / "raw").rglob("*") if p.is_file()) == before_raw
    assert set(articles(root)) == set(before)
    assert (root / "wiki" / "master-index.md").is_file()
    assert not (root / ".kaas" / "written").is_symlink()


# -- raw/ ------------------------------------------------------------------------------------------

SWAP_AFTER_SCAN = textwrap.dedent('''
    import os, sys
    from pathlib import Path
    from kb_ai import faults
    from kb_ai.cli import main
    root, kind = Path(os.environ["KB"]), os.environ["KIND"]

    def swap():
        target = root / "raw/ops/deploy.md"  # seen as a regular file; replaced before it is read
        target.unlink()
        if kind == "fifo":
            os.mkfifo(target)
        else:
            target.symlink_to("/dev/zero")  # inside raw/ now: only what is opened can tell

    sys.argv = ["kaas", "--kb", str(root), "compile"]
    with faults.at("compile.ingest.after_scan", swap):
        main()
''')


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_source_replaced_by_a_fifo_after_the_scan_is_skipped_with_its_reason(templates, tmp_path, kind):
    root = copy_of(templates, "raw", tmp_path)
    out = child([], snippet=SWAP_AFTER_SCAN, env_extra={"KB": str(root), "KIND": kind})
    text = assert_clean(out)
    assert "raw/ops/deploy.md" in text and "not a regular file" in text
    assert "wiki/ops/backups.md" in text or (root / "wiki/ops/backups.md").is_file()


# -- ask offline: the saved lexical index ---------------------------------------------------------

LEXICAL_FILES = ["kaas-fingerprint", "kaas-paths.txt", "kaas-vocab.txt", "kaas-extra.json",
                 "indptr.npy", "docs.npy", "tfs.npy", "lengths.npy", "live.npy", "keys.npy", "df.npy", "kaas-seal.json"]


@pytest.mark.parametrize("name, kind", [(name, kind) for name in LEXICAL_FILES
                                        for kind in ["fifo", "zero", "huge"]])
def test_ask_rebuilds_a_lexical_index_with_a_file_that_is_not_a_file(templates, tmp_path, name, kind):
    root = copy_of(templates, "offline", tmp_path)
    plant(root / ".kaas" / "lexical-index" / name, kind, tmp_path)
    text = assert_clean(kaas(root, "ask", QUESTION), "lexical-index")
    assert "ops/deploying.md" in text
    again = kaas(root, "ask", QUESTION)  # rebuilt and saved: loads quietly
    assert again.returncode == 0 and "damaged" not in again.stderr


@pytest.mark.parametrize("name, content", [
    ("kaas-paths.txt", '{"a": 1}'),
    ("kaas-paths.txt", 'ops/nope.md'),
    ("kaas-vocab.txt", 'deploy\x00deploy'),
    ("kaas-vocab.txt", 'deploy'),
    ("kaas-extra.json", '[[0, 99999, 1]]'),
    ("kaas-extra.json", '{"k1": "x"}'),
])
def test_ask_rebuilds_a_lexical_index_whose_content_does_not_fit(templates, tmp_path, name, content):
    root = copy_of(templates, "offline", tmp_path)
    plant(root / ".kaas" / "lexical-index" / name, "json:" + content, tmp_path)
    text = assert_clean(kaas(root, "ask", QUESTION), "lexical-index")
    assert "ops/deploying.md" in text


@pytest.mark.parametrize("kind", ["fifo"])
def test_ask_replaces_a_lexical_index_folder_that_is_not_a_folder(templates, tmp_path, kind):
    root = copy_of(templates, "offline", tmp_path)
    plant(root / ".kaas" / "lexical-index", kind, tmp_path)
    text = assert_clean(kaas(root, "ask", QUESTION), "lexical-index")
    assert "ops/deploying.md" in text
    assert (root / ".kaas" / "lexical-index" / "kaas-fingerprint").is_file()
    leftovers = [p.name for p in (root / ".kaas").iterdir() if ".old-" in p.name or ".tmp-" in p.name]
    assert leftovers == []


def test_a_saved_views_folder_that_is_a_link_is_never_pruned_through(templates, tmp_path):
    """Readers' views have no saved indexes of their own (they score with the full index): a
    ``lexical-index-views`` folder left by an older kaas, or a link planted in its place, is
    never written, pruned or followed."""
    root = copy_of(templates, "offline", tmp_path)
    page = root / "wiki" / "team" / "on-call.md"
    page.write_text(page.read_text().replace("title: On call", "title: On call\naccess: [hr]", 1))
    assert "access: [hr]" in page.read_text()  # so bob's view is not the whole catalog: it gets a saved index of its own
    (root / "kaas.toml").write_text('[users.bob]\ntoken = "a-long-random-token-for-bob"\ngroups = ["eng"]\n')
    assert kaas(root, "index").returncode == 0
    elsewhere = tmp_path / "elsewhere"
    for n in range(40):
        (elsewhere / f"keep{n:02d}").mkdir(parents=True)
    (root / ".kaas" / "lexical-index-views").symlink_to(elsewhere)
    out = kaas(root, "ask", QUESTION, "--user", "bob")
    assert sorted(p.name for p in elsewhere.iterdir()) == [f"keep{n:02d}" for n in range(40)]  # nothing deleted or added through the link
    assert all(not any(p.iterdir()) for p in elsewhere.iterdir())
    assert out.returncode == 0 and "ops/deploying.md" in out.stdout


# -- with a model: LLM cache entries, llm-capabilities.json, the trace, topic summaries -----------

@pytest.mark.parametrize("kind", ["fifo", "zero", "huge", "folder"])
def test_compile_with_a_model_treats_damaged_cache_entries_as_misses(templates, tmp_path, kind):
    root = copy_of(templates, "raw", tmp_path)
    entries = sorted(p.relative_to(templates["model_cache"]) for p in templates["model_cache"].rglob("*.json"))
    assert entries
    for entry in entries:  # exactly the entries this compile will look up
        plant(root / ".kaas" / "cache" / "llm" / entry, kind, tmp_path)
    text = assert_clean(kaas(root, "compile", model=True))
    assert articles(root) == articles(templates["model"])
    assert_warned(text, "LLM cache entry")
    for entry in entries:
        assert (root / ".kaas" / "cache" / "llm" / entry).is_file()  # replaced by the fresh reply


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_ask_with_a_model_treats_damaged_cache_entries_as_misses(templates, tmp_path, kind):
    root = copy_of(templates, "model", tmp_path)
    cache = root / ".kaas" / "cache" / "llm"
    compile_entries = {p.relative_to(templates["model_cache"]) for p in templates["model_cache"].rglob("*.json")}
    ask_entries = [p.relative_to(cache) for p in cache.rglob("*.json") if p.relative_to(cache) not in compile_entries]
    assert ask_entries
    for entry in ask_entries:
        plant(cache / entry, kind, tmp_path)
    out = kaas(root, "ask", QUESTION, "--json", model=True)
    assert_clean(out, "LLM cache entry")
    answer = json.loads(out.stdout)
    assert answer["mode"] == "llm" and [c["path"] for c in answer["citations"]] == ["ops/deploying.md"]


def test_a_cached_reply_that_is_not_text_is_a_miss(templates, tmp_path):
    """A cache entry holding a lone surrogate (valid JSON) would reach the terminal or a file."""
    root = copy_of(templates, "model", tmp_path)
    cache = root / ".kaas" / "cache" / "llm"
    compile_entries = {p.relative_to(templates["model_cache"]) for p in templates["model_cache"].rglob("*.json")}
    for entry in cache.rglob("*.json"):
        if entry.relative_to(cache) not in compile_entries:
            entry.write_text('{"text": "We deploy \\ud800 [Deploying](ops/deploying.md).", "prompt_tokens": 1}')
    out = kaas(root, "ask", QUESTION, model=True)
    text = assert_clean(out)
    assert "ops/deploying.md" in out.stdout
    assert_warned(text, "LLM cache entry")


@pytest.mark.parametrize("kind", ["fifo", "zero", "folder"])
def test_a_damaged_capabilities_file_is_ignored_and_written_afresh(templates, tmp_path, kind):
    root = copy_of(templates, "model", tmp_path)
    capabilities = root / ".kaas" / "cache" / "llm-capabilities.json"
    plant(capabilities, kind, tmp_path)
    shutil.rmtree(root / ".kaas" / "cache" / "llm")  # every call goes to the model
    out = kaas(root, "ask", QUESTION, "--json", model=True)
    assert_clean(out, "llm-capabilities.json")
    assert json.loads(out.stdout)["mode"] == "llm"
    assert isinstance(json.loads(capabilities.read_text())["response_format"], dict)  # what worked, remembered
    plant(capabilities, kind, tmp_path)
    change_a_source(root)
    assert_clean(kaas(root, "compile", model=True), "llm-capabilities.json")
    assert "Since March" in (root / "wiki/ops/deploying.md").read_text()


@pytest.mark.parametrize("kind", ["fifo", "zero", "folder"])
def test_a_trace_log_that_is_not_a_file_is_started_afresh(templates, tmp_path, kind):
    root = copy_of(templates, "model", tmp_path)
    trace = root / ".kaas" / "logs" / "llm-trace.jsonl"
    plant(trace, kind, tmp_path)
    shutil.rmtree(root / ".kaas" / "cache" / "llm")
    assert_clean(kaas(root, "ask", QUESTION, "--debug", model=True), "llm-trace.jsonl")
    assert trace.is_file() and not trace.is_symlink()
    assert json.loads(trace.read_text().splitlines()[0])["purpose"]


@pytest.mark.parametrize("kind", ["folder"])
def test_damaged_topic_summaries_are_a_warning_and_written_afresh(templates, tmp_path, kind):
    root = copy_of(templates, "model", tmp_path)
    summaries = root / ".kaas" / "topic-summaries.json"
    assert summaries.is_file()
    plant(summaries, kind, tmp_path)
    change_a_source(root)
    assert_clean(kaas(root, "compile", model=True), "topic-summaries.json")
    assert isinstance(json.loads(summaries.read_text()), dict)


# -- serve (TestClient, in the child) --------------------------------------------------------------

SERVE = textwrap.dedent('''
    import json, os, shutil
    from pathlib import Path
    from starlette.testclient import TestClient
    from kb_ai.config import load_settings
    from kb_ai.server import create_app

    root, plant_kind, target = Path(os.environ["KB"]), os.environ["KIND"], os.environ["TARGET"]

    def plant(path):
        if path.is_symlink() or path.is_file() or (path.exists() and not path.is_dir()):
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if plant_kind == "fifo":
            os.mkfifo(path)
        elif plant_kind == "folder":
            path.mkdir()
        elif plant_kind == "zero":
            path.symlink_to("/dev/zero")
        else:
            path.write_text("[" * 100000)

    settings = load_settings(root)
    app = create_app(settings, mcp=False, announce_url="http://127.0.0.1:1")
    with TestClient(app, raise_server_exceptions=False) as client:
        if target != "server.json":
            plant(root / ".kaas" / target)
        else:
            plant(root / ".kaas" / "server.json")  # after the announcement: the shutdown reads it
        chat = client.post("/api/chat", json={"question": "How do we deploy releases?"})
        assert chat.status_code == 200, chat.text
        assert "event: error" not in chat.text and "ops/deploying.md" in chat.text, chat.text
        page = client.get("/api/pages/ops/deploying.md").json()
        put = client.put("/api/pages/ops/deploying.md",
                         json={"markdown": page["markdown"] + "\\nEdited on the web.\\n", "version": page["version"]})
        assert put.status_code == 200, put.text
    print("SERVED")
''')


@pytest.mark.parametrize("target, kind", [
    ("lexical-index/docs.npy", "fifo"),
    ("lexical-index/kaas-vocab.txt", "zero"),
    ("lexical-index/kaas-fingerprint", "fifo"),
    ("compile.lock", "fifo"),
    ("compile.lock", "folder"),
    ("compile.lock", "zero"),
    ("server.json", "fifo"),
])
def test_serve_answers_and_saves_past_damaged_state(templates, tmp_path, target, kind):
    root = copy_of(templates, "offline", tmp_path)
    out = child([], snippet=SERVE, env_extra={"KB": str(root), "KIND": kind, "TARGET": target})
    assert "Traceback" not in out.stderr and out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert "SERVED" in out.stdout
    assert "Edited on the web." in (root / "wiki/ops/deploying.md").read_text()


SERVE_MODEL = textwrap.dedent('''
    import os, shutil
    from pathlib import Path
    from starlette.testclient import TestClient
    from kb_ai.config import load_settings
    from kb_ai.server import create_app

    root = Path(os.environ["KB"])
    cache = root / ".kaas" / "cache" / "llm"
    for entry in cache.rglob("*.json"):
        entry.unlink()
        os.mkfifo(entry)
    capabilities = root / ".kaas" / "cache" / "llm-capabilities.json"
    capabilities.unlink(missing_ok=True)
    os.mkfifo(capabilities)
    with TestClient(create_app(load_settings(root), mcp=False), raise_server_exceptions=False) as client:
        chat = client.post("/api/chat", json={"question": "How do we deploy releases?"})
        assert chat.status_code == 200 and "event: error" not in chat.text, chat.text
        assert "ops/deploying.md" in chat.text and '"mode": "llm"' in chat.text, chat.text
    print("SERVED")
''')


def test_serve_with_a_model_past_damaged_cache_and_capabilities(templates, tmp_path):
    root = copy_of(templates, "model", tmp_path)
    out = child([], model=True, snippet=SERVE_MODEL, env_extra={"KB": str(root)})
    assert "Traceback" not in out.stderr and out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert "SERVED" in out.stdout
    assert "llm-capabilities.json" in out.stderr and "LLM cache entry" in out.stderr


def test_a_keyword_index_save_killed_half_way_leaves_nothing_after_the_next_save(tmp_path):
    """A kill while the keyword index is saved leaves ``.kaas/lexical-index.tmp-<pid>`` (or
    ``.old-<pid>``) behind; the next save (``kaas index``, a compile, a server) removes those of
    processes that are gone, and never the folder of a process still saving."""
    kb = build_kb(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = kb.root / ".kaas"
        abandoned = [state / f"lexical-index.tmp-{gone.pid}", state / f"lexical-index.old-{gone.pid}"]
        saving = state / f"lexical-index.tmp-{alive.pid}"
        for folder in (*abandoned, saving):
            folder.mkdir(parents=True)
            (folder / "docs.npy").write_bytes(b"half")
        result = CliRunner().invoke(cli, ["--kb", str(kb.root), "index"], env={"KAAS_MODEL": ""})
        assert result.exit_code == 0, result.output
        assert (state / "lexical-index" / "kaas-fingerprint").is_file()
        assert not any(p.exists() for p in abandoned)
        assert (saving / "docs.npy").is_file()
    finally:
        alive.kill()
        alive.wait()
