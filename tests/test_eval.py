"""kaas eval: questions through the real ask service, offline and with a (mocked) model; HotpotQA
scoring; gold pages by path or title; abstention; citations; usage; table and JSON."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kb_ai.cli import cli
from kb_ai.config import Settings
from kb_ai.errors import KaasError
from kb_ai.navigate.ask import build_service
from kb_ai.quality.eval import GoldResolver, is_abstention, run_eval, run_eval_file
from kb_ai.quality.eval_questions import parse_questions
from kb_ai.navigate.records import AskResult
from kb_ai.quality.scoring import contains_answer, exact_match, f1_score, normalize_answer, score_answer, scoring_text
from kb_ai.store.catalog import Catalog, CatalogEntry

from helpers import llm_settings
from llm_fakes import ANSWER, MODEL, SELECT, FakeOpenAI


def write_questions(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


# -- scoring ------------------------------------------------------------------------------------

def test_hotpotqa_normalization_and_scores():
    assert normalize_answer("The  Chief of Protocol!") == "chief of protocol"
    assert normalize_answer("an apple, a pear") == "apple pear"
    assert exact_match("the Chief of protocol.", "Chief of Protocol") == 1.0
    assert f1_score("Chief of Protocol of the United States", "Chief of Protocol") == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert f1_score("yes", "no") == 0.0 and f1_score("no it is not", "no") == 0.0  # HotpotQA's yes/no rule
    assert f1_score("yes", "yes") == 1.0
    assert contains_answer("She was Chief of Protocol.", "chief of protocol") == 1.0
    assert contains_answer("Protocols matter", "protocol") == 0.0  # whole words only
    # A fact quoted inside code or a range is held as written (HotpotQA's normalization alone
    # reads "rsa.newkeys(512)" as "rsanewkeys512").
    assert contains_answer("Call `(pub, priv) = rsa.newkeys(512)` first.", "newkeys") == 1.0
    assert contains_answer("Set `chunk_size=512,` in the call.", "512") == 1.0
    assert contains_answer("He played from 1998–2001.", "1998") == 1.0
    assert contains_answer("Use `rsa.newkeysets()`.", "newkeys") == 0.0  # still whole words
    assert contains_answer("the U.S. Army", "U.S.") == 1.0


def test_scoring_text_drops_citations_and_offline_notes():
    answer = ("*Offline mode (no model configured): the passages of the wiki that best match the question.*\n\n"
              "- She served as Chief of Protocol. [Shirley Temple](p01/shirley-temple.md)\n\n"
              "No page of the wiki mentions: corliss.\n")
    assert scoring_text(answer) == "- She served as Chief of Protocol."
    best = score_answer("Chief of Protocol [Shirley Temple](p01/shirley-temple.md)", ["Chief of Protocol", "protocol chief"])
    assert (best.exact_match, best.f1, best.contains_gold) == (1.0, 1.0, 1.0)


# -- questions and gold pages -------------------------------------------------------------------

def test_questions_file_is_validated_with_line_numbers():
    qs = parse_questions('{"question": "a?", "gold_titles": ["T"], "answer": 42}\n\n# note\n{"question": "b?", "answerable": false}\n')
    assert [(q.question, q.gold_pages, q.answer, q.answerable, q.id) for q in qs] == [
        ("a?", ["T"], "42", True, "1"), ("b?", [], None, False, "4")]
    with pytest.raises(KaasError, match="line 2: not valid JSON"):
        parse_questions('{"question": "a?"}\n{oops\n')
    with pytest.raises(KaasError, match="line 1: missing \"question\""):
        parse_questions('{"gold_pages": []}\n')
    with pytest.raises(KaasError, match="gold_pages must be a list of strings"):
        parse_questions('{"question": "a?", "gold_pages": [1]}\n')


def test_gold_pages_resolve_by_path_or_title():
    catalog = Catalog([CatalogEntry("p1/etiquette.md", "Etiquette & Espionage", "s", "p1"),
                       CatalogEntry("p2/temple.md", "Shirley Temple", "s", "p2")])
    resolver = GoldResolver(catalog)
    paths, missing = resolver.resolve(["Etiquette &amp; Espionage", "shirley  TEMPLE", "wiki/p2/temple.md", "Nope", "x/../../y.md"])
    assert paths == ["p1/etiquette.md", "p2/temple.md"]
    assert missing == ["Nope", "x/../../y.md"]


def test_abstention_detection():
    assert is_abstention(AskResult(answer="anything", pages=[]), "Not covered.")
    offline = AskResult(answer="The wiki does not cover it, a page says.", pages=[{"path": "a.md"}], mode="offline")
    assert not is_abstention(offline, "x")  # an offline answer quotes pages; only "no page read" counts
    llm = AskResult(answer="The wiki does not cover this; [A](a.md) is about pumps.", pages=[{"path": "a.md"}], mode="llm")
    assert is_abstention(llm, "x")
    assert not is_abstention(AskResult(answer="It opens at 40 bar [A](a.md).", pages=[{"path": "a.md"}], mode="llm"), "x")


# -- offline eval -------------------------------------------------------------------------------

async def test_offline_eval_on_a_small_wiki(sample_kb, tmp_path):
    questions = parse_questions("\n".join(json.dumps(r) for r in [
        {"id": "q1", "question": "How are citations validated?", "gold_pages": ["retrieval/citations.md"],
         "answer": "only pages that were actually read"},
        {"id": "q2", "question": "Which variable selects the language model?", "gold_pages": ["configuration"],
         "answer": "KAAS_MODEL"},
        {"id": "q3", "question": "What is the capital of Peru?", "answerable": False},
    ]))
    report = await run_eval(build_service(Settings(kb=sample_kb.root)), questions)
    q1, q2, q3 = report.results
    assert q1.gold_pages == ["retrieval/citations.md"] and q1.recall == 1.0
    assert q1.precision == pytest.approx(1 / len(q1.pages_read))
    assert q2.gold_pages == ["ops/configuration.md"] and q2.pages_read[0] == "ops/configuration.md"
    assert q2.contains_gold == 1.0 and q2.exact_match == 0.0  # an extractive sentence, not a span
    assert q3.pages_read == [] and q3.abstained and q3.recall is None
    assert q1.citations_valid >= 1 and q1.citations_invalid == 0
    s = report.summary()
    assert s["questions"] == 3 and s["answerable"] == 2 and s["unanswerable"] == 1
    assert s["selection_recall"] == 1.0 and s["abstention_rate"] == 1.0 and s["false_abstention_rate"] == 0.0
    assert s["citation_validity"] == 1.0 and s["llm_calls_per_question"] == 0
    assert report.settings["mode"] == "offline"
    table = report.render_table()
    assert "selection recall" in table and "100.0%" in table and "offline mode" in table
    out = tmp_path / "out.json"
    report.write_json(out)
    data = json.loads(out.read_text())
    assert data["summary"]["questions"] == 3 and data["questions"][0]["id"] == "q1"


def test_unknown_gold_titles_count_as_misses(sample_kb, tmp_path):
    file = write_questions(tmp_path / "q.jsonl", [
        {"question": "How are citations validated?", "gold_pages": ["Citations", "No such page"]}])
    report = run_eval_file(Settings(kb=sample_kb.root), file)
    assert report.results[0].unresolved_gold == ["No such page"] and report.results[0].recall == 0.5
    assert report.summary()["gold_unresolved"] == 1 and "gold pages not found" in report.render_table()


def test_limit_and_missing_file(sample_kb, tmp_path):
    file = write_questions(tmp_path / "q.jsonl", [{"question": f"citations {i}?"} for i in range(5)])
    assert len(run_eval_file(Settings(kb=sample_kb.root), file, limit=2).results) == 2
    with pytest.raises(KaasError, match="no such file"):
        run_eval_file(Settings(kb=sample_kb.root), tmp_path / "missing.jsonl")


# -- with a model -------------------------------------------------------------------------------

async def test_eval_with_a_model_counts_calls_tokens_and_citations(sample_kb):
    settings = llm_settings(sample_kb.root)
    questions = parse_questions("\n".join(json.dumps(r) for r in [
        {"question": "Which variable selects the model?", "gold_pages": ["ops/configuration.md"], "answer": "KAAS_MODEL"},
        {"question": "What is the capital of Peru?", "answerable": False},
    ]))
    with FakeOpenAI() as fake:
        fake.reply_json({"paths": ["ops/configuration.md", "ops/deployment.md"]}, when=SELECT, prompt_tokens=300, completion_tokens=20)
        fake.reply_stream(["KAAS_MODEL [Configuration](ops/configuration.md) ", "[Other](retrieval/citations.md)"],
                          when=ANSWER, usage=(500, 30))
        fake.reply_json({"paths": []}, when=SELECT, prompt_tokens=250, completion_tokens=5)
        report = await run_eval(build_service(settings), questions)
    answered, unanswerable = report.results
    assert answered.pages_read == ["ops/configuration.md", "ops/deployment.md"]
    assert (answered.recall, answered.precision, answered.all_gold_read) == (1.0, 0.5, True)
    assert answered.first_page_gold and answered.any_gold_read
    assert answered.exact_match == 1.0 and answered.f1 == 1.0  # citations are not part of the answer
    assert (answered.citations_valid, answered.citations_invalid) == (1, 1)  # cited a page it did not read
    assert (answered.llm_calls, answered.prompt_tokens, answered.completion_tokens) == (2, 800, 50)
    assert unanswerable.abstained and unanswerable.llm_calls == 1
    s = report.summary()
    assert s["citation_validity"] == 0.5 and s["abstention_rate"] == 1.0
    assert s["llm_calls_per_question"] == 1.5 and s["prompt_tokens_per_question"] == 525
    assert report.settings["mode"] == "llm" and report.settings["model"] == MODEL


def test_cli_eval_prints_a_table_and_writes_json(sample_kb, tmp_path):
    file = write_questions(tmp_path / "q.jsonl", [
        {"question": "How are citations validated?", "gold_pages": ["Citations"], "answer": "validated"}])
    out = tmp_path / "report.json"
    result = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "eval", str(file), "--json-out", str(out), "--offline"])
    assert result.exit_code == 0, result.output
    assert "selection recall" in result.stdout and "100.0%" in result.stdout
    assert json.loads(out.read_text())["summary"]["questions"] == 1
    bad = write_questions(tmp_path / "bad.jsonl", [{"nope": 1}])
    result = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "eval", str(bad)])
    assert result.exit_code == 1 and "missing \"question\"" in result.stderr


def test_unknown_keys_are_named_in_a_warning_not_silently_ignored(sample_kb, tmp_path):
    file = write_questions(tmp_path / "q.jsonl", [
        {"question": "How are citations validated?", "gold": ["Citations"]},
        {"question": "Which variable selects the model?", "gold": ["Configuration"], "context_titles": ["x"]}])
    out = tmp_path / "report.json"
    result = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "eval", str(file), "--json-out", str(out), "--offline"])
    assert result.exit_code == 0, result.output
    expected = ("q.jsonl: unknown key 'gold' ignored (lines 1, 2) — did you mean 'gold_pages'?; expected keys: "
                "question, gold_pages, gold_titles, answer, answer_aliases, facts, answerable, id")
    assert f"kaas: warning: {expected}" in result.stderr
    assert f"warning: {expected}" in result.stdout  # in the table, next to the recall it explains
    assert "unknown key 'context_titles' ignored (line 2) — did you mean 'gold_titles'?" in result.stderr
    assert json.loads(out.read_text())["warnings"][0] == expected
