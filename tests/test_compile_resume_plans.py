"""A compile interrupted anywhere — after any number of plans, or in the write stage — and then
resumed produces byte for byte the wiki of an uninterrupted compile, with a model whose plans
depend on the catalog it is shown (so a resumed planner that sees a different catalog than the
uninterrupted one did shows up as different files)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kb_ai.compile.pipeline import run_compile
from kb_ai.faults import ENV, InjectedFault
from kb_ai.store.paths import slugify

from compile_checks import assert_consistent, manifest, wiki_snapshot
from fixtures.compile.fake_model import PLAN_MARKER, compile_responder
from helpers import fault_spec, llm_settings
from llm_fakes import FakeOpenAI, all_text, chat_json

TITLES = ["Release process", "Pricing", "On-call rota", "Security reviews", "Office moves"]
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu amber birch cedar dune ember").split()
SOURCES = 20


def catalog_planner(body):
    """Plans from the catalog it is shown: update a candidate with the source's title, else create
    a new article named after the title *and the file* (a model rarely picks the same slug)."""
    text = all_text(body)
    if PLAN_MARKER not in text:
        return compile_responder(body)
    user = body["messages"][-1]["content"]
    path, title = re.search(r'<source path="([^"]+)" title="([^"]*)"', user).groups()
    shown = user.split("<candidates", 1)[1].split("</candidates>")[0]
    for cand_title, cand_path in re.findall(r"^- \[(.+?)\]\(([^)]+)\) — ", shown, re.M):
        if cand_title.casefold() == title.casefold():
            return chat_json(json.dumps({"updates": [{"path": cand_path, "reason": "same subject"}], "creates": []}))
    stem = Path(path).stem
    return chat_json(json.dumps({"updates": [], "creates": [
        {"topic": "notes", "slug": slugify(f"{title} {stem}"), "title": title, "summary": f"About {title} ({stem})."}]}))


def make_corpus(root: Path) -> None:
    folder = root / "raw" / "notes"
    folder.mkdir(parents=True)
    for i in range(SOURCES):
        title = TITLES[i % len(TITLES)]
        words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(30)]
        (folder / f"n{i:02d}.md").write_text(
            f"# {title}\n\nNote {i} on {title.lower()}: " + " ".join(words) + f". Decided in meeting {i * 13}.\n\n"
            f"Owner {WORDS[i]} keeps it current; next check in week {i + 3}.\n")


def compile_llm(root: Path):
    with FakeOpenAI() as fake:
        fake.add(catalog_planner, repeat=True)
        return run_compile(llm_settings(root, cache=True),
                           progress=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("uninterrupted")
    make_corpus(root)
    report = compile_llm(root)
    assert not report.failed and not report.held
    snapshot = wiki_snapshot(root)
    articles = [p for p in snapshot if p.startswith("notes/")]
    assert 5 <= len(articles) < SOURCES  # later sources update what earlier ones created
    return snapshot


@pytest.mark.parametrize("stage,count", [
    ("plan", 1), ("plan", 3), ("plan", 8), ("plan", 9), ("plan", 13), ("plan", 19),
    ("write", 1), ("write", 4),
])
def test_resumed_compile_equals_an_uninterrupted_one(tmp_path, monkeypatch, reference, stage, count):
    """Interrupted once, right after the ``count``-th plan is journaled or article file written
    (a concurrent task finishing meanwhile is a real kill's state too)."""
    make_corpus(tmp_path)
    point = "compile.plan.after_record" if stage == "plan" else "compile.write.after_file"
    with monkeypatch.context() as patch:
        patch.setenv(ENV, fault_spec(point, count, action="raise"))
        with pytest.raises(InjectedFault):
            compile_llm(tmp_path)
    planned = [r for r in manifest_or_journal(tmp_path) if r == "planned"]
    if stage == "plan":
        assert len(planned) == count  # the interruption landed where intended
    report = compile_llm(tmp_path)
    assert not report.failed and not report.held
    assert report.stage("plan").counts.get("reused", 0) == (count if stage == "plan" else SOURCES)
    assert wiki_snapshot(tmp_path) == reference
    assert_consistent(tmp_path)
    assert all(r["status"] == "compiled" for r in manifest(tmp_path)["sources"].values())


def manifest_or_journal(root: Path) -> list[str]:
    """Statuses of the sources as a resumed run will see them (the journal replayed)."""
    statuses: dict[str, str] = {}
    journal = root / ".kaas" / "journal.jsonl"
    for line in journal.read_text().splitlines():
        entry = json.loads(line)
        if entry.get("op") == "source":
            statuses[entry["record"]["path"]] = entry["record"]["status"]
    return list(statuses.values())
