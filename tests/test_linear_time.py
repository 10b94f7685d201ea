"""Every pass kaas makes over text it does not control runs in time linear in that text.

Pages a non-admin edits, sources in raw/, model replies and question files all reach regular
expressions and parsers. One that backtracks (a heading regex cubic on a run of spaces), or
that searches again from every position of a long run (a link regex on "[[[[", a "\\s*\\n"
on a line of spaces), lets a 20 KB page freeze the server or stall a compile for hours.

Each function below runs on every adversarial shape at two sizes, ``SMALL`` and ``FACTOR``
times that, and the time may grow at most ``RATIO`` times (linear growth is ``FACTOR``; a
quadratic pass grows ``FACTOR ** 2``). Times are ratios, not seconds, so a slow machine does
not fail the test; a floor keeps timer noise on tiny times from counting. A call that runs
longer than ``CALL_LIMIT`` seconds fails at once (SIGALRM interrupts regular expressions too).
Times are CPU seconds of this process (``time.process_time``), not wall-clock time, so other
processes on a busy machine do not count.

A new text pass belongs in ``FUNCTIONS``. Python-Markdown, which kaas cannot make linear, is
covered by its own bound (tests/test_render_bounded.py).
"""

from __future__ import annotations

import gc
import json
import signal
import time

import pytest

from kb_ai.server import render
from kb_ai.compile import dedup, ingest, offline, readers, topic_summaries, writers
from kb_ai.compile.formats import markdown_dialects, pdf_text, rst
from kb_ai.errors import KaasError
from kb_ai.llm import plausible, prompts, structured, tokens
from kb_ai.navigate import citations, read, save
from kb_ai.navigate.records import ReadPage
from kb_ai.offline import compare, equivalents, extractive, names, passages, text
from kb_ai.quality import eval_questions, scoring
from kb_ai.store import anchors, articles, catalog, inline_markup, links, markdown_text as md, words

SMALL = 1_500
FACTOR = 8
RATIO = 24  # 3 times linear growth: room for noise, far below quadratic (64)
FLOOR = 0.002  # seconds: small times below this count as this
CALL_LIMIT = 20  # seconds for one call, at either size
ATTEMPTS = 3

# Units repeated to the size, and whole shapes built for it.
UNITS = [
    "[", "![", "[^", "*[", "]", "[]", "[a]", "[a](", "](", "](<", "[(", "(", ")", "\\[", "\\", "\\`",
    "`", "``a", "`a", "<", "<a ", "<!", "<!--", "<http://", "<think>", "</", "&", "&#", "*a", "_a", "*_",
    "a_", "* ", "- ", "1. ", ".) ", ". ", "A. ", "#", "# ", "#\n", "=\n", "a\n=\n", "-\n", ":\n", "| a |\n",
    "|", ">", "> ", "```\n", "```", "~~~\n", "    x\n", "- x\n    y\n", "\n", "\n ", " \n", " ", "\t",
    "[a]: ", "[a]: b\n", "[a][b]", "[a][", '[a](b "', "[a](b ", '"', "'", ":", "http://", "a.md", "/", "a.",
    "[Superseded ", "<!-- access:", "date ", "{", "[[", "{\"a\":", "\u2028", "é", "lorem ipsum dolor sit. ",
    # Markdown dialects and reST (compile/formats)
    "!!! note\n    x\n", "??? ", '=== "a"\n    ', "::: a.b\n", "> [!NOTE]\n", "<style>", "<h1>", ".. a::\n   ",
    ".. _a:\n", ":a:`b`", ":doc:`a <", "a\n---\n", "Page 1 of 2\n", "avail-\n", ":::a\n", ":::\n", "--8<-- \"a\"\n",
    # wikilinks (store/markdown_text.py: the link finder; compile/autolink.py)
    "[[", "[[a|", "![[a", "[[a]]", "[[a#b|", "]]", "[[a\\|",
    # questions (offline/names.py, offline/compare.py)
    ", a or ", "A B ", "\"A ", "Which came first, ", " or ", "The A. ", "Are A and B both ",
]


def _shapes(n: int) -> dict[str, str]:
    shapes = {f"unit {unit!r}": (unit * (n // len(unit) + 1))[:n] for unit in UNITS}
    shapes.update({
        "heading with a run of spaces": "# a" + " " * n + "x",
        "heading ending in spaces": "## a" + " " * n,
        "heading of hashes and spaces": "# " + "# " * (n // 2) + "x",
        "date line with spaces": "Date" + " " * n + "x",
        "trail with many 'earlier'": "[Superseded 2024-01-01 by raw/a.md: earlier " + ": earlier " * (n // 10),
        "one long line after a title": "# Title\n\n" + "word " * (n // 5),
        "nested list": "".join("  " * (i % 50) + "- x\n" for i in range(n // 20))[:n],
        "many links": "[a](b.md) " * (n // 10),
        "many sentences on one page": "Alpha lorem ipsum dolor sit amet. " * (n // 34),
        "link with a long destination": "[a](" + "x" * n,
        "code span never closed": "``" + "a`" * (n // 2),
        "many wikilinks": "[[a|b]] " * (n // 8),
        "wikilink never closed": "[[" + "a" * n,
    })
    return shapes


def _page(text: str) -> list:
    return [extractive.PageText("t/a.md", "A", text)]


def _catalog_line(text: str) -> str:
    return f"## {text}\n- [{text}](t/a.md) — {text} <!-- access: {text}\n"


FUNCTIONS = {
    # store: Markdown views, the one link finder, articles, the catalog
    "atx_heading": lambda t: md.atx_heading(t),
    "first_heading": lambda t: md.first_heading(t),
    "plain_text": lambda t: md.plain_text(t),
    "prose_paragraphs": lambda t: md.prose_paragraphs(t),
    "first_sentence": lambda t: md.first_sentence(t),
    "split_sentences": lambda t: md.split_sentences(t),
    "split_sections": lambda t: md.split_sections(t),
    "lines_outside_fences": lambda t: list(md.iter_lines_outside_fences(t)),
    "find_links": lambda t: md.find_links(t),
    "remove_links": lambda t: md.replace_links(t, md.find_links(t)),
    "resolve_links": lambda t: [links.resolve_link("t/a.md", link.target, lambda _p: False)
                                for link in md.find_links(t)],
    "parse_article": lambda t: articles.parse_article("---\ntitle: x\n---\n" + t, "t/a.md"),
    "parse_master_index": lambda t: catalog.parse_master_index(t),
    "catalog_line": lambda t: catalog.parse_master_index(_catalog_line(t)),
    "words": lambda t: (words.words(t), words.label_words(t), text.tokenize(t), tokens.estimate_tokens(t)),
    # answering: reading, extractive answers, citations, saved answers
    "trim_to_budget": lambda t: read._trim_to_budget(t, "a x lorem", 50),
    "best_units": lambda t: extractive.best_units("alpha lorem a x", _page(t)),
    "best_units_who_when_which": lambda t: (extractive.best_units("Who owns alpha lorem, and when?", _page(t)),
                                            extractive.best_units("Which RFC does alpha lorem a_x use?", _page(t))),
    "citations": lambda t: citations.validate_citations(t, [ReadPage("b.md", "B", "")]),
    "cited_passages": lambda t: citations.validate_citations(t + " [B](b.md).", [ReadPage("b.md", "B", t)]),
    "locate_passage": lambda t: passages.locate_all(t, ["lorem ipsum a x", t[:300]]),
    "heading_anchors": lambda t: anchors.heading_anchors(t),
    "relative_links": lambda t: save._relative_links(t, {"b.md"}),
    "render_link_lookups": lambda t: (render._bracket_scan_cost(t), render._known_pages(t, "t/a.md", lambda p: True)),
    # compile: ingest, dedup, the offline writer, model output checks
    "decode_text": lambda t: readers.decode_text(t.encode("utf-8")),
    "markdown_source": lambda t: readers.parse_document("raw/a.md", t.encode("utf-8")),
    "text_source": lambda t: readers.parse_document("raw/a.txt", t.encode("utf-8")),
    "html_source": lambda t: readers.parse_document("raw/a.html", t.encode("utf-8")),
    "html_fallback": lambda t: readers._html_text(t),
    "rst_source": lambda t: readers.parse_document("raw/a.rst", t.encode("utf-8")),
    "markdown_dialects": lambda t: markdown_dialects.plain_markdown(t),
    "pdf_pages": lambda t: pdf_text.clean_pages([t, t, t]),
    "title_heading": lambda t: md.title_heading(t),
    "title_from_filename": lambda t: readers.title_from_filename("raw/testclientsetup.md", t),
    "rst_labels": lambda t: rst.scan_labels("raw/a.rst", t),
    "rst_cues": lambda t: rst.has_rst_cues(t),
    "rst_text_source": lambda t: readers.parse_document("raw/a.txt", (".. module:: a\n\n" + t).encode("utf-8")),
    "escape_text": lambda t: inline_markup.escape_block_start(inline_markup.escape_text(t)),
    "date_from_text": lambda t: readers.date_from_text(t),
    "cut_text": lambda t: ingest.cut_text(t, len(t) // 2),
    "fingerprint": lambda t: (dedup.fingerprint(t), dedup.blocks(t)),
    "article_body": lambda t: offline.article_body("T", t),
    "lead_summary": lambda t: offline.lead_summary(t, "T"),
    "supersede": lambda t: offline.supersede(t, "# T\n\nNew text here.\n", date="2024-01-02", source="raw/a.md"),
    "supersede_kept": lambda t: offline.supersede(t, t + "\n\nNew text.", date="2024-01-02", source="raw/a.md"),
    "topic_summary": lambda t: articles.clean_summary(t, topic_summaries.SUMMARY_CHARS),
    "section_split": lambda t: md.split_sections(t, level=2),
    "clean_body": lambda t: writers.clean_body(t, "T"),
    "check_trails": lambda t: writers.check_trails(t, {"raw/a.md"}),
    # model replies, prompts, scoring, questions
    "parse_json_reply": lambda t: _quietly(structured.parse_json_reply, t),
    "escape_data": lambda t: [prompts.escape_data(t, context) for context in ("attribute", "inline", "block")],
    "plausible": lambda t: (plausible.implausible(t, "Summarize the article in one sentence."), plausible.unique([t, t + "x"])),
    "scoring": lambda t: (scoring.score_answer(t, ["a x", "lorem"]), scoring.normalize_answer(t)),
    # questions (their names, the options of a comparison, the verdict)
    "question_names": lambda t: names.question_names(t),
    "equivalents": lambda t: equivalents.query_weights(t),
    "compare_question": lambda t: compare.derive(t, [compare.ComparedPage("a.md", "A", t[:2000])]),
    "eval_questions": lambda t: eval_questions.parse_questions(json.dumps({"question": t[:3000], "gold_answer": t}) + "\n" + t, "q"),
}


def _quietly(func, text):
    try:
        return func(text)
    except ValueError:
        return None


class _TooSlow(Exception):
    pass


def _alarm(_signum, _frame):
    raise _TooSlow


def _seconds(func, text: str, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        signal.alarm(CALL_LIMIT)
        gc.disable()  # a collection of the whole heap is not the function's cost
        started = time.process_time()
        try:
            func(text)
        except _TooSlow:
            return float("inf")
        except (KaasError, readers.UnreadableError, ValueError, RecursionError):
            pass  # junk may be refused; how long refusing takes is what counts
        finally:
            gc.enable()
            signal.alarm(0)
        best = min(best, time.process_time() - started)
    return best


def growth(func) -> list[str]:
    """The shapes on which ``func``'s time grows faster than allowed, with their times.

    A shape over the ratio is measured again, both sizes, up to ``ATTEMPTS`` times: another
    process on a shared machine can slow one run down, but not every run of a linear pass by
    a factor of ``RATIO / FACTOR``, while a quadratic pass stays over on every attempt."""
    small, large = _shapes(SMALL), _shapes(SMALL * FACTOR)
    bad = []
    for name in small:
        for attempt in range(ATTEMPTS):
            short = _seconds(func, small[name], 3 + 2 * attempt)
            if short == float("inf"):
                verdict = f"{name}: over {CALL_LIMIT} s at {SMALL} characters"
                break
            long = _seconds(func, large[name], 1 + attempt)
            if long <= RATIO * max(short, FLOOR):
                verdict = None
                break
            verdict = (f"{name}: {short * 1000:.1f} ms at {SMALL} characters, "
                       f"{'over %d s' % CALL_LIMIT if long == float('inf') else '%.1f ms' % (long * 1000)} "
                       f"at {SMALL * FACTOR}")
            if long == float("inf"):
                break
        if verdict:
            bad.append(verdict)
    return bad


@pytest.fixture(autouse=True)
def _alarm_handler():
    previous = signal.signal(signal.SIGALRM, _alarm)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.slow  # a time measurement: flaky on a loaded machine
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_time_grows_linearly_with_hostile_text(name):
    assert growth(FUNCTIONS[name]) == []


def test_the_shapes_are_the_sizes_they_claim():
    for size in (SMALL, SMALL * FACTOR):
        for name, text in _shapes(size).items():
            assert size * 0.9 <= len(text) <= size * 1.1 + 100, name
