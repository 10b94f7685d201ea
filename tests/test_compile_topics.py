"""Topics from folders and from the documents (issue 14, item 7): a flat raw/ too large for one
topic is split into readable topics by a word its documents share; a folder likewise; the same
documents give the same topics; adding a document moves no article.

Behaviour through the real compile (``run_compile``) and the CLI on files in tmp dirs."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb_ai.cli import cli
from kb_ai.compile.pipeline import run_compile
from kb_ai.config import load_settings

# Four subjects, 30 notes each: 120 documents, more than one topic may hold.
SUBJECTS = {
    "tomato": ("Tomato", "how to water tomato plants, prune the side shoots and stake the stems"),
    "telescope": ("Telescope", "how to collimate the telescope mirror and track faint galaxies"),
    "sourdough": ("Sourdough", "how to feed the sourdough starter and shape the loaf before baking"),
    "sailing": ("Sailing", "how to trim the mainsail and tack the dinghy upwind in gusts"),
}
FILLER = ["on a cold morning", "with a friend", "after a long week", "in the evening", "at the club",
          "for beginners", "step by step", "from an old notebook", "with pictures", "in brief"]


def subject_notes(count: int = 30, start: int = 0) -> dict[str, str]:
    files = {}
    for word, (name, what) in SUBJECTS.items():
        for i in range(start, start + count):
            files[f"{word}-{i:02d}.md"] = (
                f"# {name} note {i}\n\nThis note explains {what}, {FILLER[i % len(FILLER)]}. "
                f"It is entry {i} of the {word} notebook.\n")
    return files


def write_raw(root: Path, files: dict[str, str], folder: str = "") -> None:
    base = root / "raw" / folder if folder else root / "raw"
    base.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (base / name).write_text(text, encoding="utf-8")


def compile_offline(root: Path):
    return run_compile(load_settings(root, env={}), progress=False)


def topics_of(root: Path) -> dict[str, str]:
    """Source stem -> the topic folder of its article."""
    wiki = root / "wiki"
    out = {}
    for file in wiki.rglob("*.md"):
        rel = file.relative_to(wiki).as_posix()
        if "/" in rel:
            text = file.read_text(encoding="utf-8")
            source = text.split("sources: [", 1)[1].split("]", 1)[0]
            out[Path(source).stem] = rel.split("/", 1)[0]
    return out


@pytest.mark.slow
def test_a_flat_raw_gets_several_readable_topics(tmp_path):
    write_raw(tmp_path, subject_notes())
    compile_offline(tmp_path)
    topics = topics_of(tmp_path)
    assert len(topics) == 120
    by_subject = {word: {topics[f"{word}-{i:02d}"] for i in range(30)} for word in SUBJECTS}
    # one topic per subject, named by the word its notes share
    assert by_subject == {word: {word} for word in SUBJECTS}
    index = (tmp_path / "wiki" / "topics.md").read_text()
    assert "- tomato (30 articles)" in index and "- sailing (30 articles)" in index
    result = CliRunner().invoke(cli, ["--kb", str(tmp_path), "lint"])
    assert " 0 errors" in result.output, result.output


@pytest.mark.slow
def test_folders_give_topics_and_a_large_folder_is_split_by_content(tmp_path):
    write_raw(tmp_path, {"intro.md": "# Intro\n\nHow this handbook is organised.\n",
                         "setup.md": "# Setup\n\nInstall the tools before the first lesson.\n"}, "handbook")
    write_raw(tmp_path, subject_notes(), "notes")
    compile_offline(tmp_path)
    topics = topics_of(tmp_path)
    assert topics["intro"] == topics["setup"] == "handbook"
    assert Counter(v for k, v in topics.items() if k not in ("intro", "setup")) == Counter(
        {f"notes-{word}": 30 for word in SUBJECTS})


@pytest.mark.slow
def test_same_documents_same_topics_and_one_more_moves_nothing(tmp_path):
    first, second, grown = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    files = subject_notes()
    for root in (first, second):
        write_raw(root, files)
        compile_offline(root)
    assert topics_of(first) == topics_of(second)  # deterministic
    assert (first / "wiki" / "master-index.md").read_text() == (second / "wiki" / "master-index.md").read_text()
    before = topics_of(first)
    assert len(set(before.values())) == 4
    # One more document, compiled incrementally: every article keeps its topic, the new one joins its subject's.
    write_raw(first, subject_notes(1, 30))
    compile_offline(first)
    after = topics_of(first)
    assert {k: after[k] for k in before} == before
    assert {after[f"{w}-30"] for w in SUBJECTS} == set(SUBJECTS)
    # And compiled afresh with the new documents, the others keep their topics too.
    shutil.copytree(first / "raw", grown / "raw")
    compile_offline(grown)
    fresh = topics_of(grown)
    assert sum(fresh[k] == before[k] for k in before) == len(before)
