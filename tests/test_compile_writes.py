"""Where compile writes, and what it keeps: hand-written frontmatter (comments, extra keys, hand
values) survives a rewrite and every value round-trips; an article that is a symbolic link is
never written through; section edits kaas cannot apply are reported, not dropped; a lost
source<->article link does not fork the wiki into ``-2`` copies; a kill between journaling and
replacing a file, then a hand edit, does not drop the new source version."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
from pathlib import Path

import pytest

from kb_ai.compile.pipeline import run_compile
from kb_ai.config import Settings
from kb_ai.store.articles import render_article, split_frontmatter

from compile_checks import manifest
from fixtures.compile.fake_model import WRITE_MARKER, compile_responder
from helpers import fault_spec, llm_settings
from llm_fakes import FakeOpenAI, all_text, chat_json

PRICING = "# Pricing plans\n\nThe basic plan costs $10 a month. The team plan costs $40 a month.\n"
SETUP = "# Setup guide\n\nInstall the agent, then run the setup wizard and sign in.\n"


def compile_model(root: Path, responder=compile_responder):
    with FakeOpenAI() as fake:
        fake.add(responder, repeat=True)
        return run_compile(llm_settings(root, cache=True), progress=False)


def compile_offline(root: Path):
    return run_compile(Settings(kb=root), progress=False)


def kb(root: Path) -> Path:
    (root / "raw" / "notes").mkdir(parents=True)
    (root / "raw" / "notes" / "pricing.md").write_text(PRICING)
    (root / "raw" / "notes" / "setup.md").write_text(SETUP)
    return root


def raw(root: Path, name: str) -> Path:
    return root / "raw" / "notes" / name


def article(root: Path, name: str) -> Path:
    return root / "wiki" / "notes" / name


# -- B5: an article that is a symbolic link ---------------------------------------------------------


def test_an_article_that_is_a_link_to_another_article_is_never_written_through(tmp_path):
    root = kb(tmp_path)
    assert sorted(compile_model(root).created) == ["notes/pricing-plans.md", "notes/setup-guide.md"]
    setup_before = article(root, "setup-guide.md").read_text()
    link = article(root, "pricing-plans.md")
    link.unlink()
    link.symlink_to("setup-guide.md")
    raw(root, "pricing.md").write_text(PRICING.replace("$10", "$12"))
    report = compile_model(root)
    assert article(root, "setup-guide.md").read_text() == setup_before  # not merged into the other page
    assert link.is_symlink()
    assert [h["path"] for h in report.held] == ["notes/pricing-plans.md"]
    assert "symbolic link" in report.held[0]["reason"] and report.exit_code == 1
    assert manifest(root)["sources"]["raw/notes/pricing.md"]["status"] != "compiled"  # retried next run


def test_the_one_article_writer_replaces_nothing_through_a_link(tmp_path):
    from kb_ai.errors import UnsafePathError
    from kb_ai.store.articles import write_article_text

    wiki = tmp_path / "wiki"
    (wiki / "real").mkdir(parents=True)
    (wiki / "real" / "b.md").write_text("---\ntitle: B\n---\nB\n")
    (wiki / "a.md").symlink_to("real/b.md")
    (wiki / "linked").symlink_to("real", target_is_directory=True)
    for path in ("a.md", "linked/b.md", "linked/new.md"):
        with pytest.raises(UnsafePathError, match="symbolic link"):
            write_article_text(wiki, path, "---\ntitle: X\n---\nX\n")
    assert (wiki / "real" / "b.md").read_text() == "---\ntitle: B\n---\nB\n"
    assert sorted(p.name for p in (wiki / "real").iterdir()) == ["b.md"]
    write_article_text(wiki, "real/c.md", "---\ntitle: C\n---\nC\n")
    assert (wiki / "real" / "c.md").read_text() == "---\ntitle: C\n---\nC\n"


# -- B4: hand-written frontmatter ------------------------------------------------------------------

HAND_FM = """---
# reviewed by Alice on 2026-03-01: keep the prices in sync with billing
title: 2026
summary: [first point, second point]
topic: notes
tags: HANDTAG
reviewer: alice  # ask her before changing prices
sources: [raw/notes/pricing.md]
updated: 2026-01-01
---
"""


def _with_hand_frontmatter(file: Path, title: str = "2026") -> None:
    body = split_frontmatter(file.read_text(), "x")[1]
    file.write_text(HAND_FM.replace("title: 2026", f"title: {title}") + body)


@pytest.mark.parametrize("mode", ["model", "offline-detach"])
def test_hand_written_frontmatter_survives_a_rewrite(tmp_path, mode):
    root = kb(tmp_path)
    (compile_model if mode == "model" else compile_offline)(root)
    file = article(root, "pricing-plans.md")
    title = "2026" if mode == "model" else "Pricing plans"  # (main cannot detach from a page titled 2026)
    _with_hand_frontmatter(file, title)
    if mode == "model":
        raw(root, "pricing.md").write_text(PRICING.replace("$10", "$12"))
        report = compile_model(root)
        assert report.updated == ["notes/pricing-plans.md"], report.to_dict()
    else:  # the offline edit that removes a deleted source from ``sources:``
        raw(root, "pricing.md").unlink()
        report = compile_offline(root)
        assert report.detached == ["notes/pricing-plans.md"], report.to_dict()
    text = file.read_text()
    for line in ("# reviewed by Alice on 2026-03-01: keep the prices in sync with billing",
                 f"title: {title}", "summary: [first point, second point]", "tags: HANDTAG",
                 "reviewer: alice  # ask her before changing prices"):
        assert line in text.splitlines(), (line, text)
    meta = split_frontmatter(text, "x")[0]
    assert meta["title"] == (2026 if mode == "model" else title) and meta["tags"] == "HANDTAG" and meta["summary"] == ["first point", "second point"]
    if mode == "model":
        assert "$12" in text and meta["sources"] == ["raw/notes/pricing.md"]
    else:
        assert meta["sources"] == []


ADVERSARIAL = ["0\u00a0", "\u00a0", "007", "0x1F", "yes", "No", "~", "null", ": ", "a: b", "#", "a #b", "- x",
               "[a]", "{a}", "!x", "&a", "*a", "|", ">", "%x", "@x", "`x", '"q', "'q", "1e3", "2026-01-01",
               ".inf", " lead", "trail ", "line\nbreak", "x\n\n y \n", "\t", "a\u2028b", "a\x85b", "\u00a0x\u00a0"]


def test_every_frontmatter_string_reads_back_as_written():
    """Hypothesis found ``topic='0\\xa0'``: as the last key it was written ``topic: 0\xa0``, the
    trailing no-break space was stripped with the frontmatter, and it read back as the int 0."""
    bad = []
    for value in ADVERSARIAL:
        for meta in ({"title": "T", "summary": value, "topic": value, "tags": [value, "b"], "extra": {"k": value},
                      "updated": dt.date(2026, 1, 1)},
                     {"title": "T", "summary": value, "topic": value}):  # the last line of the frontmatter
            texts = [render_article(meta, "Body.")]
            try:
                texts.append(render_article(meta, "Body.", like="---\ntitle: T  # hand\ntopic: x\n---\nBody.\n"))
            except TypeError:
                pass  # (main: no in-place edit)
            for text in texts:
                back = split_frontmatter(text, "x")[0]
                if back != meta or type(back["topic"]) is not str or type(back["summary"]) is not str:
                    bad.append((value, text))
    assert bad == []


# -- B9: section edits kaas cannot apply -----------------------------------------------------------


def _edits_reply(edits):
    def responder(request):
        if WRITE_MARKER in all_text(request) and "Return `edits`" in request["messages"][0]["content"]:
            return chat_json(json.dumps({"summary": "Prices of the plans.", "tags": [], "edits": edits}))
        return compile_responder(request)
    return responder


NEW_PRICE = "The basic plan now costs $12 a month."


@pytest.mark.parametrize("edits", [
    [{"heading": "", "action": "replace", "text": NEW_PRICE}],
    [{"heading": "##", "action": "add", "text": NEW_PRICE}],
    [{"heading": "Prices", "action": "add", "text": "   "}],
    [{"heading": "Prices", "action": "add", "text": NEW_PRICE}, {"heading": " ", "action": "add", "text": "More."}],
], ids=["empty-heading", "hashes-only", "blank-text", "one-of-two"])
def test_section_edits_that_cannot_be_applied_are_reported_and_retried(tmp_path, edits):
    root = kb(tmp_path)
    compile_model(root)
    file = article(root, "pricing-plans.md")
    file.write_text(file.read_text() + "\nDana: prices are reviewed every quarter.\n")  # sections mode
    before = file.read_text()
    raw(root, "pricing.md").write_text(PRICING.replace("$10", "$12"))
    report = compile_model(root, _edits_reply(edits))
    assert file.read_text() == before
    assert [h["path"] for h in report.held] == ["notes/pricing-plans.md"] and report.exit_code == 1
    assert "cannot all be applied" in report.held[0]["reason"]
    assert manifest(root)["sources"]["raw/notes/pricing.md"]["status"] != "compiled"
    # Retried on the next run, and a usable answer goes in.
    report = compile_model(root, _edits_reply([{"heading": "Prices", "action": "add", "text": NEW_PRICE}]))
    assert report.updated == ["notes/pricing-plans.md"] and NEW_PRICE in file.read_text()
    assert manifest(root)["sources"]["raw/notes/pricing.md"]["status"] == "compiled"


# -- B10: killed between journaling an article and replacing its file, then a hand edit --------------

_COMPILE = "import sys; from kb_ai.cli import main; sys.argv = ['kaas', '--kb', sys.argv[1], 'compile']; main()"


def test_a_hand_edit_after_a_kill_before_the_file_was_replaced_does_not_drop_the_new_version(tmp_path):
    import subprocess
    import sys

    root = kb(tmp_path)
    compile_offline(root)
    file = article(root, "pricing-plans.md")
    raw(root, "pricing.md").write_text(PRICING.replace("$10", "$12"))
    # Killed (SIGKILL, at the named fault point) after the article's record is journaled and
    # before its file is replaced: the only article this change rewrites is pricing-plans.md.
    killed = subprocess.run([sys.executable, "-c", _COMPILE, str(root)], capture_output=True, text=True,
                            timeout=60, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path),
                                             "KAAS_FAULT": fault_spec("compile.write.before_file")})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert "$12" not in file.read_text()
    file.write_text(file.read_text() + "\nDana: prices are reviewed every quarter.\n")  # the person edits
    report = compile_offline(root)
    # Offline, the new version is merged around the hand edit (it used to be held, exit 1): the
    # version the kill interrupted is not lost, nor the person's line.
    assert report.updated == ["notes/pricing-plans.md"] and report.exit_code == 0, report.to_dict()
    assert "$12" in file.read_text() and "Dana: prices are reviewed every quarter." in file.read_text()
    assert manifest(root)["sources"]["raw/notes/pricing.md"]["status"] == "compiled"
    assert manifest(root)["articles"]["notes/pricing-plans.md"]["merged"]["raw/notes/pricing.md"] == \
        manifest(root)["sources"]["raw/notes/pricing.md"]["checksum"]


# -- B3: the source<->article link lost --------------------------------------------------------------


def _articles(root: Path) -> list[str]:
    return sorted(p.relative_to(root / "wiki").as_posix() for p in (root / "wiki" / "notes").rglob("*.md")
                  if p.name != "index.md") + sorted(
        p.relative_to(root / "wiki").as_posix() for p in (root / "wiki").glob("other/*.md"))


HAND_LINE = "Dana: ask support before you change the plan."


def test_a_renamed_source_keeps_its_article(tmp_path):
    root = kb(tmp_path)
    compile_offline(root)
    file = article(root, "setup-guide.md")
    file.write_text(file.read_text() + f"\n{HAND_LINE}\n")
    raw(root, "setup.md").rename(raw(root, "install-setup.md"))
    report = compile_offline(root)
    assert report.created == [] and _articles(root) == ["notes/pricing-plans.md", "notes/setup-guide.md"]
    assert split_frontmatter(file.read_text(), "x")[0]["sources"] == ["raw/notes/install-setup.md"]
    assert report.orphaned == [] and HAND_LINE in file.read_text()
    assert manifest(root)["sources"]["raw/notes/install-setup.md"]["articles"] == ["notes/setup-guide.md"]
    assert compile_offline(root).exit_code == 0 and _articles(root) == ["notes/pricing-plans.md", "notes/setup-guide.md"]


@pytest.mark.parametrize("unreadable", [b"", b"\x00\x01\x02half-written\x00" * 4], ids=["empty", "binary"])
def test_a_source_unreadable_for_one_run_keeps_its_article(tmp_path, unreadable):
    root = kb(tmp_path)
    compile_offline(root)
    file = article(root, "setup-guide.md")
    good = raw(root, "setup.md").read_bytes()
    raw(root, "setup.md").write_bytes(unreadable)
    report = compile_offline(root)
    assert [s["path"] for s in report.skipped] == ["raw/notes/setup.md"]
    assert split_frontmatter(file.read_text(), "x")[0]["sources"] == ["raw/notes/setup.md"]  # not detached
    raw(root, "setup.md").write_bytes(good.replace(b"sign in", b"sign in with SSO"))
    report = compile_offline(root)
    assert report.created == [] and report.updated == ["notes/setup-guide.md"], report.to_dict()
    assert _articles(root) == ["notes/pricing-plans.md", "notes/setup-guide.md"]
    assert "sign in with SSO" in file.read_text()


def test_an_article_moved_by_hand_is_followed_not_recreated(tmp_path):
    from kb_ai.store.kb import KnowledgeBase

    root = kb(tmp_path)
    compile_offline(root)
    (root / "wiki" / "other").mkdir()
    moved = root / "wiki" / "other" / "prices.md"
    article(root, "pricing-plans.md").rename(moved)
    KnowledgeBase(root).reindex()
    raw(root, "pricing.md").write_text(PRICING.replace("$10", "$12"))
    report = compile_offline(root)
    assert report.created == [] and report.updated == ["other/prices.md"], report.to_dict()
    assert _articles(root) == ["notes/setup-guide.md", "other/prices.md"]
    assert "$12" in moved.read_text()


def test_the_http_save_of_a_page_that_is_a_link_never_writes_the_page_it_points_to(sample_kb):
    from starlette.testclient import TestClient

    from kb_ai.server import create_app

    target = sample_kb.wiki_dir / "retrieval" / "page-selection.md"
    before = target.read_text()
    (sample_kb.wiki_dir / "ops" / "alias.md").symlink_to(target)
    sample_kb.reindex()
    with TestClient(create_app(Settings(kb=sample_kb.root))) as client:
        saved = client.put("/api/pages/ops/alias.md", json={"markdown": "---\ntitle: Alias\n---\nOverwritten.\n"})
    assert saved.status_code == 400 and "symbolic link" in saved.json()["error"]["message"], saved.text
    assert target.read_text() == before
