"""Compile never widens who may read text: a page a compile step writes is readable only by those
who may read every page whose text reached that step's prompt (docs/compile.md, "Restricted
articles"). Tested with an obedient fake model that copies everything it is shown into what it
writes: titles, summaries, bodies."""

from __future__ import annotations

import json
import re
from pathlib import Path

from kb_ai.compile.pipeline import run_compile
from kb_ai.store.access import parse_access
from kb_ai.store.articles import iter_article_paths, load_article, split_frontmatter
from kb_ai.store.catalog import parse_master_index
from kb_ai.store.kb import KnowledgeBase

from fixtures.compile.fake_model import PLAN_MARKER, WRITE_MARKER, compile_responder
from helpers import llm_settings, write_page
from llm_fakes import FakeOpenAI, all_text, chat_json

SECRET = "SECRETBANDS engineers earn between 100k and 140k"


def obedient(body):
    """Does whatever the text in front of it says, and copies all of it into its answer."""
    text = all_text(body)
    user = body["messages"][-1]["content"]
    if PLAN_MARKER in text:
        shown = user.split("<candidates", 1)[1].split("</candidates>")[0]
        paths = re.findall(r"\]\(([^)\s]+)\)", shown)
        return chat_json(json.dumps({
            "updates": [{"path": p, "reason": "shown"} for p in paths],
            "creates": [{"topic": "hr", "slug": "review-notes", "title": "Review notes",
                         "summary": " ".join(re.sub(r"\]\([^)]*\)", "]", shown).split())[:190]}],
        }))
    if WRITE_MARKER in text:
        title = (re.search(r'Write the new article "(.*?)"', user) or re.search(r'title="([^"]*)"', user)).group(1)
        copied = "\n\n".join(line for line in user.splitlines() if line.strip() and not line.startswith("<"))
        return chat_json(json.dumps({
            "summary": " ".join(user.split())[-190:], "tags": ["copied"],
            "body": f"# {title}\n\nEverything the model was shown:\n\n{copied}",
            "edits": [{"heading": "Copied", "action": "add", "text": copied}],
        }))
    return compile_responder(body)


def public_texts(root: Path) -> dict[str, str]:
    """The text every reader of the wiki may see: public articles and public catalog lines."""
    wiki = root / "wiki"
    texts = {}
    for path in iter_article_paths(wiki):
        text = (wiki / path).read_text(encoding="utf-8")
        meta, _ = split_frontmatter(text, path)
        if parse_access(meta)[0] is None:
            texts[path] = text
    catalog = parse_master_index((wiki / "master-index.md").read_text(encoding="utf-8"))
    texts["master-index.md (public lines)"] = "\n".join(e.line() for e in catalog.entries if e.access is None)
    return texts


def restricted_wiki(root: Path) -> None:
    wiki = root / "wiki"
    write_page(wiki, "compensation/salary-bands.md", "Salary bands", SECRET,
               "# Salary bands\n\n" + SECRET + ". Reviewed every spring with the salary review.\n",
               topic="compensation", access=["hr"])
    write_page(wiki, "hr/holidays.md", "Holidays", "How many days of holiday everyone gets.",
               "# Holidays\n\nEveryone gets 25 days of holiday; the salary review does not change that.\n",
               topic="hr")
    KnowledgeBase(root).reindex()
    (root / "raw" / "hr").mkdir(parents=True)
    (root / "raw" / "hr" / "salary-review.md").write_text(
        "# Salary review\n\nThe salary review happens every spring. Salary bands and holidays are discussed; "
        "managers send their proposals by March.\n")


def test_restricted_articles_never_reach_a_prompt_that_writes_a_public_page(tmp_path):
    restricted_wiki(tmp_path)
    with FakeOpenAI() as fake:
        fake.add(obedient, repeat=True)
        report = run_compile(llm_settings(tmp_path, cache=True, concurrency=1), progress=False)
    assert not report.failed, report.failed
    for path, text in public_texts(tmp_path).items():
        assert "SECRETBANDS" not in text, path
    created = load_article(tmp_path / "wiki", "hr/review-notes.md")
    assert created.access is None  # nothing restricted reached its prompt: it stays public
    plan_prompts = [all_text(r) for r in fake.requests if PLAN_MARKER in all_text(r)]
    assert plan_prompts and all("SECRETBANDS" not in p and "salary-bands" not in p for p in plan_prompts)
    assert all("compensation" not in p for p in plan_prompts)  # a topic only restricted pages have is not named
    assert "hr/holidays.md" in plan_prompts[0]  # public candidates are still shown


def test_a_page_planned_from_a_prompt_that_showed_restricted_text_gets_its_access(tmp_path):
    """A source that fed a restricted article before is still shown it (to keep routing there);
    whatever new page that plan creates is restricted like it."""
    (tmp_path / "raw" / "hr").mkdir(parents=True)
    source = tmp_path / "raw" / "hr" / "salary-review.md"
    source.write_text("# Salary review\n\nThe salary review happens every spring and managers send proposals.\n")
    with FakeOpenAI() as fake:
        fake.add(compile_responder, repeat=True)
        run_compile(llm_settings(tmp_path, cache=True, concurrency=1), progress=False)
    # The owner restricts the article this source wrote, and puts a secret in its summary.
    article = tmp_path / "wiki" / "hr" / "salary-review.md"
    text = article.read_text()
    text = text.replace("\nsummary: ", "\naccess: [hr]\nsummary: " + SECRET + " ", 1)
    article.write_text(text)
    KnowledgeBase(tmp_path).reindex()
    assert load_article(tmp_path / "wiki", "hr/salary-review.md").access == ("hr",)
    source.write_text(source.read_text() + "\nThis year the review also covers the new bonus scheme.\n")
    with FakeOpenAI() as fake:
        fake.add(obedient, repeat=True)
        report = run_compile(llm_settings(tmp_path, cache=True, concurrency=1), progress=False)
    [plan] = [all_text(r) for r in fake.requests if PLAN_MARKER in all_text(r)]
    assert "SECRETBANDS" in plan and "(previous)" in plan  # shown: the source fed it before
    created = [p for p in report.created if p != "hr/salary-review.md"]
    assert created, report.to_dict()
    for path in created:
        assert load_article(tmp_path / "wiki", path).access == ("hr",), path
    assert "hr/salary-review.md" in report.updated  # routed into the restricted page: allowed
    assert load_article(tmp_path / "wiki", "hr/salary-review.md").access == ("hr",)
    for path, text in public_texts(tmp_path).items():
        assert "SECRETBANDS" not in text, path
    index = parse_master_index((tmp_path / "wiki" / "master-index.md").read_text())
    assert all(e.access == ("hr",) for e in index.entries if e.path in created)
