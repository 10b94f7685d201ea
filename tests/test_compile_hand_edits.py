"""A hand edit is never lost: whatever the model answers (section edits, whole rewrites), whenever
the person edits (before the compile, while the model writes, across several compiles), and
whatever .kaas/ still knows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kb_ai.compile.pipeline import run_compile
from kb_ai.store.articles import load_article, split_frontmatter

from compile_checks import manifest
from fixtures.compile.fake_model import WRITE_MARKER, compile_responder
from helpers import llm_settings
from llm_fakes import FakeOpenAI, all_text, chat_json

SOURCE = """# Release process

We release on Tuesdays after the standup.

## Steps

Tag the build. Deploy to staging, then to production.

## Rollback

Revert the tag and redeploy the previous build.
"""
HAND = "Dana: never release on a public holiday."


def compile_with(root: Path, responder):
    with FakeOpenAI() as fake:
        fake.add(responder, repeat=True)
        report = run_compile(llm_settings(root, cache=True), progress=False)
    return report, fake


def writes(fake) -> list[dict]:
    return [r for r in fake.requests if WRITE_MARKER in all_text(r)]


def replying(edits=None, body=None, summary="How releases work.", then=None):
    """A fake model whose write answer is fixed (plans, topics: the usual fake)."""
    def responder(request):
        if WRITE_MARKER in all_text(request):
            if then is not None:
                then()
            reply = {"summary": summary, "tags": ["release"]}
            if "Return `edits`" in request["messages"][0]["content"]:
                reply["edits"] = edits or []
            else:
                reply["body"] = body or "# Release process\n\nShort."
            return chat_json(json.dumps(reply))
        return compile_responder(request)
    return responder


ARTICLE = "wiki/eng/release-process.md"


def compiled(root: Path) -> Path:
    (root / "raw" / "eng").mkdir(parents=True)
    (root / "raw" / "eng" / "release.md").write_text(SOURCE)
    report, _ = compile_with(root, compile_responder)
    assert report.created == ["eng/release-process.md"]
    return root / ARTICLE


def hand_edit(article: Path, after: str, line: str) -> None:
    text = article.read_text()
    assert after in text
    article.write_text(text.replace(after, f"{after}\n{line}", 1))


def change_source(root: Path, old: str, new: str) -> None:
    raw = root / "raw" / "eng" / "release.md"
    raw.write_text(raw.read_text().replace(old, new))


NEW_BODY = SOURCE.replace("Tuesdays", "Wednesdays")
SCHEDULE = {"heading": "Schedule", "action": "add", "text": "Releases happen on Wednesdays."}
REPLACE_STEPS = [{"heading": "Steps", "action": "replace",
                  "text": "Tag the build. Deploy to staging, then to production. Announce it in #releases."}]


def test_a_section_replace_that_drops_hand_written_text_is_refused_and_reported(tmp_path):
    article = compiled(tmp_path)
    hand_edit(article, "Deploy to staging, then to production.", HAND)
    edited = article.read_text()
    change_source(tmp_path, "Tuesdays", "Wednesdays")
    report, fake = compile_with(tmp_path, replying(edits=REPLACE_STEPS))
    assert len(writes(fake)) == 1 and 'edited-by-hand="yes"' in all_text(writes(fake)[0])
    assert HAND in article.read_text()
    assert article.read_text() == edited  # the hand text, and everything else, as the person left it
    assert report.updated == [] and [h["path"] for h in report.held] == ["eng/release-process.md"]
    assert "hand-written" in report.held[0]["reason"] and HAND in report.held[0]["reason"]
    assert report.exit_code == 1
    assert manifest(tmp_path)["sources"]["raw/eng/release.md"]["status"] == "planned"  # retried next run
    # The next attempt is told why; an edit that keeps the hand text goes through.
    keep = [{"heading": "Steps", "action": "replace",
             "text": f"Tag the build. Deploy to staging, then to production.\n{HAND}\nAnnounce it in #releases."},
            SCHEDULE]  # (the source's changed fact: an edit without it is not the source merged)
    report, fake = compile_with(tmp_path, replying(edits=keep))
    assert "hand-written" in all_text(writes(fake)[0])  # "Your previous answer ... was refused: ..."
    assert report.updated == ["eng/release-process.md"] and not report.held
    assert HAND in article.read_text() and "Announce it in #releases." in article.read_text()


def test_hand_written_text_stays_protected_after_it_was_merged_once(tmp_path):
    article = compiled(tmp_path)
    hand_edit(article, "Deploy to staging, then to production.", HAND)
    change_source(tmp_path, "Tuesdays", "Wednesdays")
    add = [{"heading": "Schedule", "action": "add", "text": "Releases happen on Wednesdays."}]
    report, _ = compile_with(tmp_path, replying(edits=add))
    assert report.updated == ["eng/release-process.md"] and HAND in article.read_text()
    # kaas wrote the file last; the person's line is still theirs on the next model edit.
    merged = article.read_text()
    change_source(tmp_path, "Revert the tag", "Revert the release tag")
    report, _ = compile_with(tmp_path, replying(edits=REPLACE_STEPS))
    assert [h["path"] for h in report.held] == ["eng/release-process.md"]
    assert article.read_text() == merged


def test_without_the_kept_text_every_line_counts_as_hand_written(tmp_path):
    article = compiled(tmp_path)
    hand_edit(article, "Deploy to staging, then to production.", HAND)
    shutil.rmtree(tmp_path / ".kaas" / "written", ignore_errors=True)  # safe to delete: kaas then protects every line
    edited = article.read_text()
    change_source(tmp_path, "Tuesdays", "Wednesdays")
    rollback = [{"heading": "Rollback", "action": "replace", "text": "Roll forward instead."}]
    report, _ = compile_with(tmp_path, replying(edits=rollback))
    assert [h["path"] for h in report.held] == ["eng/release-process.md"]
    assert "Revert the tag" in report.held[0]["reason"] and article.read_text() == edited
    add = [{"heading": "Rollback", "action": "add", "text": "Roll forward when the revert fails."}, SCHEDULE]
    report, _ = compile_with(tmp_path, replying(edits=add))
    assert report.updated == ["eng/release-process.md"]
    assert HAND in article.read_text() and "Roll forward when the revert fails." in article.read_text()


def test_a_hand_written_summary_and_tags_are_kept(tmp_path):
    article = compiled(tmp_path)
    text = article.read_text()
    meta, _ = split_frontmatter(text, "x")
    text = text.replace(f"summary: {meta['summary']}", "summary: When and how we ship, per Dana.", 1)
    text = text.replace("tags: [", "tags: [dana-approved, ", 1)
    article.write_text(text)
    change_source(tmp_path, "Tuesdays", "Wednesdays")
    add = [{"heading": "Schedule", "action": "add", "text": "Releases happen on Wednesdays."}]
    report, _ = compile_with(tmp_path, replying(edits=add, summary="The model's own summary of releases."))
    assert report.updated == ["eng/release-process.md"]
    now = load_article(tmp_path / "wiki", "eng/release-process.md")
    assert now.summary == "When and how we ship, per Dana." and "dana-approved" in now.tags


def test_a_hand_edit_made_while_the_model_writes_is_not_overwritten(tmp_path):
    article = compiled(tmp_path)
    change_source(tmp_path, "Tuesdays", "Wednesdays")

    def person_edits():
        hand_edit(article, "Deploy to staging, then to production.", HAND)

    report, _ = compile_with(tmp_path, replying(body=NEW_BODY, then=person_edits))
    assert HAND in article.read_text()  # the person's save survives kaas's write
    assert [h["path"] for h in report.held] == ["eng/release-process.md"]
    assert "changed on disk" in report.held[0]["reason"]
    # Next run: the edit is seen as a hand edit and merged into, not over.
    add = [{"heading": "Schedule", "action": "add", "text": "Releases happen on Wednesdays."}]
    report, _ = compile_with(tmp_path, replying(edits=add))
    assert report.updated == ["eng/release-process.md"]
    assert HAND in article.read_text() and "Releases happen on Wednesdays." in article.read_text()


def test_an_article_deleted_while_the_model_writes_is_not_recreated_with_part_of_its_text(tmp_path):
    article = compiled(tmp_path)
    change_source(tmp_path, "Tuesdays", "Wednesdays")
    report, _ = compile_with(tmp_path, replying(body=NEW_BODY, then=article.unlink))
    assert not article.exists()
    assert [h["path"] for h in report.held] == ["eng/release-process.md"]
    assert "deleted on disk" in report.held[0]["reason"]


def test_guard_is_one_check_for_rewrites_and_section_edits():
    """The same guard refuses a whole rewrite and a section edit that lose a hand-written line."""
    from kb_ai.compile.hand_text import HandText
    from kb_ai.compile.writers import CurrentArticle, WriteRefused, guard_body

    written = "# T\n\nKaas wrote this lead.\n\n## A\n\nKaas text.\n"
    edited = "# T\n\nKaas wrote this lead.\n\n## A\n\nKaas text.\nA person's line.\n"
    hand = HandText.of({}, edited, "---\ntitle: T\n---\n" + written, [], True, "t.md")
    article = CurrentArticle("t/t.md", "T", "t", "s", {}, edited, True, None, hand=hand)
    for body in ("# T\n\nKaas wrote this lead, rewritten whole.\n\n## A\n\nKaas text.\n",  # rewrite
                 "# T\n\nKaas wrote this lead.\n\n## A\n\nReplaced section.\n"):  # section replace
        try:
            guard_body(article, body, model=True)
        except WriteRefused as exc:
            assert "A person's line." in str(exc)
        else:
            raise AssertionError("not refused")
    guard_body(article, edited + "\n## B\n\nAdded.\n", model=True)  # keeping it is fine


def test_a_hand_edit_that_broke_the_frontmatter_is_left_alone_and_the_run_says_so(tmp_path):
    article = compiled(tmp_path)
    broken = article.read_text().replace("topic: eng", "topic: [eng", 1)
    article.write_text(broken)
    change_source(tmp_path, "Tuesdays", "Wednesdays")
    report, _ = compile_with(tmp_path, replying(body=NEW_BODY))
    assert article.read_text() == broken
    assert [f["path"] for f in report.failed] == ["eng/release-process.md"]
    assert "malformed frontmatter" in report.failed[0]["reason"]
    assert report.exit_code == 1  # scripts notice: the new material is not in the wiki
