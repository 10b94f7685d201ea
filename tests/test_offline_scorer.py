"""The offline answer's unit scorer (issue 26): shipped weights that load, and the behaviour they
must give on small hand-made pages (the unit holding the asked value before its neighbour, never a
line that is itself a question, code for "how do I", a whole list for "which ... are")."""

from __future__ import annotations

import json

from click.testing import CliRunner

from kb_ai.cli import cli
from kb_ai.offline import scorer
from kb_ai.offline.extractive import PageText, best_units, candidates

from helpers import build_kb


def _ranked(question: str, body: str, title: str = "Page") -> list[str]:
    """The texts of the candidate units of one page, best scored first."""
    found = candidates(question, [PageText("p.md", title, body)])
    return [c.unit.text for c in sorted(found, key=lambda c: -scorer.score(c.features))]


def _first_holding(ranked: list[str], *needles: str) -> int:
    return next(i for i, text in enumerate(ranked) if all(n in text for n in needles))


def test_the_shipped_weights_load_with_every_feature_and_selection_parameter():
    data = json.loads(scorer.WEIGHTS_FILE.read_text(encoding="utf-8"))
    assert set(data["weights"]) == set(scorer.FEATURES)
    weights, selection = scorer.model()
    assert len(weights) == len(scorer.FEATURES)
    assert set(selection) == {"new_floor", "bridge", "per_page", "min_share"}
    assert 0.0 <= selection["new_floor"] <= 1.0 and selection["per_page"] >= 1


def test_the_unit_holding_the_asked_value_ranks_above_its_neighbour():
    body = ("# Retries\n\nThe client retries a request that failed on a network error.\n\n"
            "The number of retries can be changed in the client settings.\n\n"
            "Retries default to 5, each after a pause twice as long as the one before.\n")
    ranked = _ranked("How many retries does the client make by default?", body, "Retries")
    assert "default to 5" in ranked[0], ranked
    assert _first_holding(ranked, "default to 5") < _first_holding(ranked, "The client retries a request")


def test_a_line_that_is_itself_a_question_is_not_the_answer(tmp_path):
    """A page's "Questions this page answers" lists questions: they state nothing, the answer is
    the sentence that gives the value."""
    page = ("ops/timeouts.md", "Timeouts", "How long the server waits.",
            "# Timeouts\n\n## Questions this page answers\n\n- How long does the server wait for a client?\n"
            "- What happens when a client is too slow?\n\n## Waiting\n\n"
            "The server waits 45 seconds for a client before closing the connection.\n")
    kb = build_kb(tmp_path, page)
    result = CliRunner().invoke(cli, ["--kb", str(kb.root), "ask", "How long does the server wait for a client?",
                                      "--json"], env={"KAAS_MODEL": ""})
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)["answer"]
    first = ("\n" + answer).split("\n- ")[1]  # the answer carries no line about its mode
    assert "45 seconds" in first, answer


def test_how_do_i_ranks_the_code_above_the_prose_around_it():
    body = ("# Frobnicator\n\nThe frobnicator tidies records and is installed with pip.\n\n"
            "To install the frobnicator, run:\n\n```bash\npip install frobnicator\n```\n\n"
            "The frobnicator needs no configuration once installed.\n")
    ranked = _ranked("How do I install the frobnicator?", body, "Frobnicator")
    assert "pip install frobnicator" in ranked[0], ranked


def test_which_are_quotes_the_whole_list_once():
    body = ("# Storage\n\nRecords are written through one interface.\n\n"
            "The server supports three storage backends:\n\n- Postgres, for production\n- SQLite, for tests\n"
            "- Memory\n\nEach backend is chosen in the settings file.\n")
    picked = best_units("Which storage backends are supported?", [PageText("s.md", "Storage", body)])
    first = picked[0].sentence
    assert all(name in first for name in ("Postgres", "SQLite", "Memory")), [e.sentence for e in picked]
    assert sum("SQLite" in e.sentence for e in picked) == 1
