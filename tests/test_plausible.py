"""One plausibility check for short model texts (llm/plausible.py), used by the compile planner
(titles, summaries of new articles), the compile writer (summaries: tests/test_compile_model_output.py)
and the navigator's follow-up suggestions (here, through the real ask path)."""

from __future__ import annotations

from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.records import AskRequest

from helpers import llm_settings
from llm_fakes import ANSWER, SELECT, SUGGEST, FakeOpenAI

INSTRUCTIONS = ("You suggest three follow-up questions a reader might ask next, after reading an answer from a wiki. "
                "Return the JSON object with exactly three questions.")


def test_what_is_not_plausible():
    from kb_ai.llm.plausible import implausible, plausible

    for junk in ("", "   ", "...", "…", "12345", "3.", "-", "N/A", "TBD", "untitled", "\n\n"):
        assert implausible(junk), junk
    for echo in ("Return the JSON object with exactly three questions.",
                 "return the json object, with exactly three questions",
                 "You suggest three follow-up questions a reader might ask"):
        assert "repeats" in implausible(echo, INSTRUCTIONS), echo
    for fine in ("How are citations validated?", "Release process", "Q3 planning", "Pricing",
                 "Which questions does the wiki answer?"):
        assert implausible(fine, INSTRUCTIONS) is None, fine
    assert plausible("Two\nlines", INSTRUCTIONS) == "Two lines"


def test_unique_ignores_case_punctuation_and_spacing():
    from kb_ai.llm.plausible import unique

    assert unique(["How does it work?", "how does it work", "What is it?", "What  is it ?!"],
                  seen=["What is it"]) == ["How does it work?"]


async def test_suggestions_without_echoes_placeholders_repeats_or_the_question_itself(sample_kb):
    with FakeOpenAI() as fake:
        fake.reply_json({"paths": ["retrieval/citations.md"]}, when=SELECT)
        fake.reply_stream(["Checked [Citations](retrieval/citations.md)."], when=ANSWER)
        fake.reply_json({"questions": [  # what the schema lets through: 1-5 strings of 3+ characters
            "Return the JSON object with exactly three questions.", "...", "How does selection work?",
            "how does selection work", "How are citations validated?"]}, when=SUGGEST)
        result = await ask(build_service(llm_settings(sample_kb)),
                           AskRequest(question="How are citations validated?", suggest=True))
    assert result.suggestions == ["How does selection work?"]
