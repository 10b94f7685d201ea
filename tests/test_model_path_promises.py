"""The model path keeps its promises with any model (issue 27): kaas grounds an answer the model
does not cite, repairs and drops citation links by the rules selection uses, marks what no page
supports, keeps a weak model's selection honest with the keyword ranking, accepts line numbers,
puts the stable catalog before the question, and takes the context window from the setting or
the server."""

from __future__ import annotations

import pytest

import kb_ai.navigate.ask as ask_module
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.records import AskRequest
from kb_ai.store.kb import KnowledgeBase

from helpers import build_kb, llm_settings
from llm_fakes import ANSWER, SELECT, FakeOpenAI, all_text
from wikigen import generate_wiki

RESTATED = "Only pages that were actually read count as valid citations."


def requests_with(fake: FakeOpenAI, marker: str) -> list[dict]:
    return [r for r in fake.requests if marker in all_text(r)]


async def _ask(kb, answer: list[str], paths=("retrieval/citations.md",), question="How are citations validated?",
               **settings):
    with FakeOpenAI() as fake:
        fake.reply_json({"paths": list(paths)}, when=SELECT)
        fake.reply_stream(answer, when=ANSWER)
        result = await ask(build_service(llm_settings(kb, **settings)), AskRequest(question=question))
    assert result.error is None, result.error
    return result, fake


async def test_an_answer_citing_nothing_gets_the_passage_it_restates(sample_kb):
    result, _ = await _ask(sample_kb, [RESTATED])
    assert [c["path"] for c in result.citations] == ["retrieval/citations.md"]
    citation = result.citations[0]
    assert citation["attributed"] is True and citation["quote"] == RESTATED
    assert citation["passages"][0]["sentence"] == {"start": 0, "end": len(RESTATED)}
    assert not result.abstained and result.unsupported == []
    assert not any("cites none" in n for n in result.notices)
    assert any("kaas attached the pages they restate: Citations" in n for n in result.notices)


async def test_a_placeholder_citation_is_dropped_not_reported(sample_kb):
    result, _ = await _ask(sample_kb, [RESTATED[:-1] + " [Page Title](path)."])
    assert result.invalid_citations == []
    assert [c["path"] for c in result.citations] == ["retrieval/citations.md"]  # attributed instead


async def test_a_citation_in_the_wrong_case_and_prefix_is_repaired(tmp_path):
    kb = build_kb(tmp_path, ("product/pricing.md", "Pricing", "Plans and prices.",
                             "# Pricing\n\nThe Solo plan costs $12 per month and covers one user."), sample=False)
    result, _ = await _ask(kb, ["The Solo plan costs $12 per month [Pricing](Pages/Product/Pricing.md)."],
                           paths=["product/pricing.md"], question="What does the Solo plan cost?")
    assert result.invalid_citations == []
    assert [(c["path"], c.get("attributed")) for c in result.citations] == [("product/pricing.md", None)]
    assert "Solo plan costs $12" in result.citations[0]["quote"]


async def test_an_answer_no_page_supports_is_marked_and_says_so(sample_kb):
    made_up = "Paris is the capital of France and has many famous museums."
    result, _ = await _ask(sample_kb, [made_up])
    assert result.abstained and result.to_json()["abstained"] is True
    assert [u["text"] for u in result.unsupported] == [made_up]
    assert result.answer == made_up  # streamed already: the correction comes after it
    assert ask_module.UNSUPPORTED_ANSWER in result.notices


async def test_a_partly_supported_answer_lists_the_unsupported_sentence(sample_kb):
    result, _ = await _ask(sample_kb, [RESTATED + " The citations are also signed with a GPG key."])
    assert not result.abstained
    assert [u["text"] for u in result.unsupported] == ["The citations are also signed with a GPG key."]
    assert any("Not supported by the pages read (1 sentence of the answer)" in n for n in result.notices)


async def test_a_model_naming_the_first_catalog_lines_falls_back_to_keywords(sample_kb):
    entries = sample_kb.catalog().entries
    first_three = [e.path for e in entries[:3]]
    assert "retrieval/page-selection.md" not in first_three
    with FakeOpenAI() as fake:
        fake.reply_json({"paths": first_three}, when=SELECT, repeat=True)
        fake.reply_stream(["A near miss is repaired by title or slug."], when=ANSWER)
        result = await ask(build_service(llm_settings(sample_kb)),
                           AskRequest(question="How is a near miss page path repaired by title or slug?"))
    assert result.error is None, result.error
    assert "retrieval/page-selection.md" in [p["path"] for p in result.pages]
    assert result.method == "lexical-fallback"
    assert any("did not depend on the question" in n and "first 3 lines" in n for n in result.notices)


async def test_the_same_pages_for_different_questions_fall_back_to_keywords(sample_kb):
    pair = ["ops/deployment.md", "retrieval/citations.md"]
    service = build_service(llm_settings(sample_kb))
    with FakeOpenAI() as fake:
        fake.reply_json({"paths": pair}, when=SELECT, repeat=True)
        fake.reply_stream(["Invented paths are dropped before any page is read."], when=ANSWER, repeat=True)
        await ask(service, AskRequest(question="How does the reverse proxy terminate TLS?"))
        result = await ask(service, AskRequest(question="Are invented paths dropped before a page is read?"))
    assert "retrieval/page-selection.md" in [p["path"] for p in result.pages]
    assert any("the same pages it named for a different question" in n for n in result.notices)


async def test_the_page_the_question_names_is_fused_into_the_models_picks(sample_kb):
    result, _ = await _ask(sample_kb, ["Set it [Configuration](ops/configuration.md)."], paths=["ops/deployment.md"],
                           question="Which variable selects the language model, KAAS_MODEL?")
    assert [p["path"] for p in result.pages] == ["ops/deployment.md", "ops/configuration.md"]
    assert result.method == "llm"


async def test_line_numbers_are_accepted_as_picks(sample_kb):
    entries = sample_kb.catalog().entries
    number = next(i for i, e in enumerate(entries, 1) if e.path == "retrieval/citations.md")
    result, fake = await _ask(sample_kb, [RESTATED], paths=[number])
    assert result.method == "llm" and [p["path"] for p in result.pages] == ["retrieval/citations.md"]
    assert not any("named no page" in n for n in result.notices)
    prompt = all_text(requests_with(fake, SELECT)[0])
    assert f"{number}. [Citations](retrieval/citations.md)" in prompt


async def test_the_selection_prompt_has_the_catalog_first_and_the_question_last(sample_kb):
    question = "How are citations validated?"
    _, fake = await _ask(sample_kb, [RESTATED], question=question)
    messages = requests_with(fake, SELECT)[0]["messages"]
    assert "<catalog" in messages[0]["content"] and question not in messages[0]["content"]
    last = messages[-1]["content"]
    assert question in last and "<catalog" not in last and last.rstrip().endswith("for this question.")
    # The same prefix for another question: a provider's prompt cache can serve it.
    _, other = await _ask(sample_kb, [RESTATED], question="What does KAAS_MODEL select?")
    assert requests_with(other, SELECT)[0]["messages"][0] == messages[0]


def _big_kb(tmp_path, pages: int = 80):
    made = generate_wiki(tmp_path, pages)
    kb = KnowledgeBase(tmp_path)
    kb.reindex()
    return kb, made[pages // 2]


async def test_the_context_window_setting_sets_the_selection_budget(tmp_path):
    kb, (gold, name) = _big_kb(tmp_path)
    result, _ = await _ask(kb, [f"Founded [{name}]({gold})."], paths=[gold], question=f"When was {name} founded?",
                           context_window=2_400)
    assert any("selection budget of 1200 tokens" in n for n in result.notices)


async def test_the_context_window_is_asked_of_the_server_when_not_set(tmp_path):
    kb, (gold, name) = _big_kb(tmp_path)
    with FakeOpenAI() as fake:
        fake.serve_get("http://127.0.0.1:9999/props", {"default_generation_settings": {"n_ctx": 2_200}})
        fake.reply_json({"paths": [gold]}, when=SELECT)
        fake.reply_stream([f"Founded [{name}]({gold})."], when=ANSWER)
        result = await ask(build_service(llm_settings(kb)), AskRequest(question=f"When was {name} founded?"))
    assert any("selection budget of 1100 tokens" in n for n in result.notices), result.notices


@pytest.mark.slow  # a catalog over the 6,000-token default: 400 pages
async def test_an_unknown_context_window_says_which_budget_was_used(tmp_path):
    kb, (gold, name) = _big_kb(tmp_path, 400)
    result, _ = await _ask(kb, [f"Founded [{name}]({gold})."], paths=[gold], question=f"When was {name} founded?")
    assert any("default budget of 6,000 tokens" in n and "KAAS_CONTEXT_WINDOW" in n for n in result.notices)


async def test_the_prompt_tokens_served_from_the_providers_cache_are_counted(sample_kb):
    with FakeOpenAI() as fake:
        fake.reply_json({"paths": ["retrieval/citations.md"]}, when=SELECT)
        fake.reply_stream([RESTATED], when=ANSWER, usage={"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105,
                                                          "prompt_tokens_details": {"cached_tokens": 80}})
        result = await ask(build_service(llm_settings(sample_kb)), AskRequest(question="How are citations validated?"))
    assert result.usage["cached_prompt_tokens"] == 80
    assert [c["cached_prompt_tokens"] for c in result.usage["calls"]] == [0, 80]
