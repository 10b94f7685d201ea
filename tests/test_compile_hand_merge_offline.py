"""Offline, a hand-edited article takes its source's revisions: the person's text stays word for
word, changed source sentences replace the old ones (with trail lines), new sections are added,
and a part both changed keeps the hand text with the source's new text below it, reported once.
Through the CLI, on a copy of the demo."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from kb_ai.cli import cli

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo" / "raw"
PAGE = Path("wiki/product/pricing.md")
SOURCE = Path("raw/product/pricing-2026-04-02.md")
HAND = "Our sales team can quote custom Enterprise pricing; write to sales@ledgerly.example."
HAND_TRIAL = "Every new account gets a 30-day free trial without a credit card (45 days on request)."


def _kaas(root: Path, *args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["--kb", str(root), *args])
    if "--json" in args:
        return result.exit_code, json.loads(result.output)
    return result.exit_code, {"output": result.output}


def _demo(tmp_path: Path) -> Path:
    root = tmp_path / "kb"
    root.mkdir()
    shutil.copytree(DEMO, root / "raw")
    assert _kaas(root, "compile", "--offline", "--json")[0] == 0
    return root


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def _revise(root: Path, trial: bool = False) -> None:
    source = root / SOURCE
    text = source.read_text().replace("$29 per month", "$35 per month")
    if trial:
        text = text.replace("30-day", "60-day")
    source.write_text(text + "\n## Discounts\n\nNon-profits get 50% off every plan.\n")


def test_a_revision_lands_around_a_hand_edit_and_the_next_runs_are_quiet(tmp_path):
    root = _demo(tmp_path)
    page = root / PAGE
    _edit(page, "Annual billing gives two months free on both plans.",
          f"Annual billing gives two months free on both plans.\n\n{HAND}")
    _revise(root)
    code, report = _kaas(root, "compile", "--offline", "--json")
    assert code == 0 and report["updated"] == ["product/pricing.md"] and report["held"] == []
    text = page.read_text()
    assert HAND in text  # the person's paragraph, word for word
    assert "The Team plan costs $35 per month" in text and "$29 per month and covers" not in text.replace(
        'earlier "The Team plan costs $29 per month and covers', "")
    assert '[Superseded 2026-04-02 by raw/product/pricing-2026-04-02.md: earlier "The Team plan costs $29' in text
    assert "## Discounts" in text and "Non-profits get 50% off every plan." in text
    assert text.index(HAND) < text.index("## Discounts")  # the source's new section is added after
    assert report["warnings"] == []  # nothing both changed: no conflict
    for args in (("compile", "--offline", "--json"), ("compile", "--offline", "--full", "--json")):
        code, again = _kaas(root, *args)
        assert code == 0 and again["held"] == [] and again["updated"] == [] and page.read_text() == text
    code, lint = _kaas(root, "lint")
    assert "stale" not in lint["output"]


def test_a_part_both_changed_keeps_the_hand_text_and_is_reported_once(tmp_path):
    root = _demo(tmp_path)
    page = root / PAGE
    _edit(page, "Every new account gets a 30-day free trial without a credit card.", HAND_TRIAL)
    _revise(root, trial=True)
    code, report = _kaas(root, "compile", "--offline", "--json")
    assert code == 0 and report["held"] == [] and report["updated"] == ["product/pricing.md"]
    text = page.read_text()
    note = "[New in raw/product/pricing-2026-04-02.md (2026-04-02), next to the hand-edited text above:]"
    assert HAND_TRIAL in text and note in text
    assert text.index(HAND_TRIAL) < text.index(note) < text.index("Every new account gets a 60-day free trial")
    assert "The Team plan costs $35 per month" in text  # the part only the source changed: the source's text
    assert len(report["warnings"]) == 1 and "product/pricing.md" in report["warnings"][0]
    assert "edit the article" in report["warnings"][0]
    code, again = _kaas(root, "compile", "--offline", "--json")
    assert code == 0 and again["warnings"] == [] and again["updated"] == [] and page.read_text() == text
    # A later revision merges again, the hand text still kept, no new conflict.
    source = root / SOURCE
    source.write_text(source.read_text().replace("$12 per month", "$14 per month"))
    code, later = _kaas(root, "compile", "--offline", "--json")
    assert code == 0 and later["warnings"] == [] and later["updated"] == ["product/pricing.md"]
    text = page.read_text()
    assert HAND_TRIAL in text and "The Solo plan costs $14 per month" in text and note in text
    assert text.count("Every new account gets a 60-day free trial without a credit card.") == 1


def test_lint_says_what_to_do_about_a_stale_article(tmp_path):
    root = _demo(tmp_path)
    _revise(root)
    code, lint = _kaas(root, "lint")
    stale = [line for line in lint["output"].splitlines() if "stale" in line]
    assert stale and "run `kaas compile` or update the article" not in stale[0]
    assert "kaas compile" in stale[0] and "left alone" in stale[0]
