"""Dedup never drops a distinct document (issue 14, item 5), and the copies it does drop stay in
sight: every compile path lists them in the ``sources:`` of the article their original feeds.

Behaviour through the real compile (``run_compile`` / the CLI) on files in a tmp dir."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kb_ai.cli import cli
from kb_ai.compile.pipeline import run_compile
from kb_ai.config import load_settings
from kb_ai.store.articles import load_article

from fixtures.compile.fake_model import compile_responder
from helpers import llm_settings
from llm_fakes import FakeOpenAI

# Two novels of one series whose Wikipedia paragraphs share their blurb (a HotpotQA-like pair:
# the old dedup found them 0.85 similar and dropped one, and its title with it).
SERIES = (
    "is a gong'an detective novel written by Robert van Gulik and set in imperial China, "
    "roughly speaking, in the Tang dynasty. It is a fiction based on the real character of Judge Dee, "
    "a magistrate and statesman of the Tang court, and it belongs to the series of Judge Dee mysteries "
    "that van Gulik wrote and illustrated himself between the nineteen fifties and his death. The book "
    "features the judge with his lieutenants Ma Joong, Chiao Tai and Sergeant Hoong, who help him solve "
    "three intertwined cases while he governs a district far from the capital, and it includes the "
    "author's own drawings in the Chinese style together with a postscript on the sources he used."
)
NAIL = f"# The Chinese Nail Murders\n\nThe Chinese Nail Murders {SERIES} The story is set in Pei-chow in 1961.\n"
POETS = f"# Poets and Murder\n\nPoets and Murder {SERIES} The story is set in Chin-hwa in 1968.\n"

# Two county lists without a title of their own (plain text, titled by their file names), alike
# in every word but the names and numbers that make them two lists.
COUNTY = (
    "The following is a list of the civil parishes and towns of {county}, in the south east of England, "
    "with their population at the last census and the district council that governs each of them. "
    "Parishes are the lowest tier of local government and many of them have a parish council that "
    "meets every month in the village hall to discuss planning applications, footpaths, allotments "
    "and the upkeep of the churchyard, and that sets a small precept that is collected together with "
    "the council tax of every household in the parish. The list below is sorted by district and then "
    "by name, and it gives for every parish the year in which its council was first formed and the "
    "number of councillors who sit on it. {a} has {n1} residents and {b} has {n2} residents. "
    "The county council publishes the list every year together with a map of the boundaries."
)
KENT = COUNTY.format(county="Kent", a="Ashford", b="Dover", n1="74204", n2="31022")
SUSSEX = COUNTY.format(county="Sussex", a="Crawley", b="Horsham", n1="118493", n2="48041")

FAQ = (
    "# Widget FAQ\n\nThis page answers the questions people ask most about the Acme widget. It explains "
    "how to install the widget on Linux and Windows, how to configure the proxy settings for a corporate "
    "network, how to rotate the access token every ninety days, and where to report bugs so that the "
    "maintainers see them in their weekly triage meeting. Read it before you open a ticket.\n"
)
FAQ_REEXPORTED = (  # re-wrapped, with emphasis and doubled spaces, its last line left out
    "# Widget FAQ\n\nThis page answers the questions people ask *most* about the Acme widget.  It explains\n"
    "how to install the widget on Linux and Windows,  how to configure the proxy settings for a corporate\n"
    "network, how to rotate the access token every ninety days, and where to report bugs so that the\n"
    "maintainers see them in their weekly triage meeting.\n"
)


def compile_offline(root: Path):
    return run_compile(load_settings(root, env={}), progress=False)


def write_raw(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        file = root / "raw" / name
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text, encoding="utf-8")


def catalog_titles(root: Path) -> set[str]:
    text = (root / "wiki" / "master-index.md").read_text(encoding="utf-8")
    return {line.split("](", 1)[0].lstrip("- [") for line in text.splitlines() if line.startswith("- [")}


def sources_of(root: Path) -> dict[str, list[str]]:
    """Article path -> its ``sources:``."""
    wiki = root / "wiki"
    out = {}
    for file in sorted(wiki.rglob("*.md")):
        rel = file.relative_to(wiki).as_posix()
        if "/" not in rel:
            continue
        out[rel] = list(load_article(wiki, rel).meta.get("sources") or [])
    return out


def test_two_novels_sharing_a_blurb_are_both_compiled(tmp_path):
    write_raw(tmp_path, {"nail.md": NAIL, "poets.md": POETS})
    report = compile_offline(tmp_path)
    assert report.duplicates == []
    titles = catalog_titles(tmp_path)
    assert {"The Chinese Nail Murders", "Poets and Murder"} <= titles
    assert sorted(s for ss in sources_of(tmp_path).values() for s in ss) == ["raw/nail.md", "raw/poets.md"]


def test_two_county_lists_differing_in_names_and_numbers_are_both_compiled(tmp_path):
    write_raw(tmp_path, {"county-parishes.txt": KENT, "county-parishes-2.txt": SUSSEX})
    result = CliRunner().invoke(cli, ["--kb", str(tmp_path), "compile"])
    assert result.exit_code == 0, result.output
    assert "duplicates:" not in result.output
    bodies = "\n".join((tmp_path / "wiki" / p).read_text() for p in sources_of(tmp_path))
    assert "Horsham" in bodies and "Dover" in bodies and "118493" in bodies


def test_exact_and_near_copies_are_merged_and_listed_in_sources(tmp_path):
    write_raw(tmp_path, {"faq.md": FAQ, "faq (copy).md": FAQ, "faq-export.md": FAQ_REEXPORTED})
    report = compile_offline(tmp_path)
    kinds = sorted((d["path"], d["kind"]) for d in report.duplicates)
    assert kinds == [("raw/faq (copy).md", "exact"), ("raw/faq-export.md", "near")]
    assert sources_of(tmp_path) == {"general/widget-faq.md": ["raw/faq (copy).md", "raw/faq-export.md", "raw/faq.md"]}
    # Incremental: a copy added later joins the list; the copy deleted leaves it; lint stays clean.
    write_raw(tmp_path, {"old/faq.md": FAQ})
    compile_offline(tmp_path)
    assert "raw/old/faq.md" in sources_of(tmp_path)["general/widget-faq.md"]
    (tmp_path / "raw" / "faq (copy).md").unlink()
    compile_offline(tmp_path)
    assert sorted(sources_of(tmp_path)["general/widget-faq.md"]) == ["raw/faq-export.md", "raw/faq.md", "raw/old/faq.md"]
    result = CliRunner().invoke(cli, ["--kb", str(tmp_path), "lint"])
    assert " 0 errors" in result.output, result.output


def test_copies_are_listed_in_sources_with_a_model(tmp_path):
    write_raw(tmp_path, {"faq.md": FAQ, "faq (copy).md": FAQ, "nail.md": NAIL, "poets.md": POETS})
    with FakeOpenAI() as fake:
        fake.add(compile_responder, repeat=True)
        report = run_compile(llm_settings(tmp_path, cache=True), progress=False)
    assert [(d["path"], d["kind"]) for d in report.duplicates] == [("raw/faq (copy).md", "exact")]
    listed = sources_of(tmp_path)
    faq_articles = [p for p, s in listed.items() if "raw/faq.md" in s]
    assert faq_articles and all("raw/faq (copy).md" in listed[p] for p in faq_articles)
    assert any("raw/poets.md" in s for s in listed.values()) and any("raw/nail.md" in s for s in listed.values())
    manifest = json.loads((tmp_path / ".kaas" / "manifest.json").read_text())
    assert manifest["sources"]["raw/faq (copy).md"]["articles"] == faq_articles


def test_a_copy_with_a_title_of_its_own_keeps_it_in_the_wiki(tmp_path):
    body = FAQ.split("\n\n", 1)[1]
    write_raw(tmp_path, {"notes.txt": body,  # no title: "Notes", from its file name
                         "annual-report.md": f"---\ntitle: Annual Report 2025\n---\n{body}"})
    report = compile_offline(tmp_path)
    assert report.duplicates == []
    assert "Annual Report 2025" in catalog_titles(tmp_path)


def test_fingerprints_of_an_older_kaas_are_completed_and_copies_still_found(tmp_path):
    write_raw(tmp_path, {"faq.md": FAQ, "nail.md": NAIL})
    compile_offline(tmp_path)
    saved = tmp_path / ".kaas" / "fingerprints.json"
    data = json.loads(saved.read_text())
    for value in data.values():  # as a kaas before key entities and own titles wrote them
        value.pop("entities", None)
        value.pop("title", None)
    saved.write_text(json.dumps(data))
    write_raw(tmp_path, {"faq (copy).md": FAQ, "poets.md": POETS})
    report = compile_offline(tmp_path)
    assert [(d["path"], d["kind"]) for d in report.duplicates] == [("raw/faq (copy).md", "exact")]
    assert "Poets and Murder" in catalog_titles(tmp_path)
    assert sorted(sources_of(tmp_path)["general/widget-faq.md"]) == ["raw/faq (copy).md", "raw/faq.md"]


def test_a_near_copy_that_says_something_else_is_compiled(tmp_path):
    changed = FAQ.replace("every ninety days", "every thirty days").replace("Read it before", "Ignore it before")
    write_raw(tmp_path, {"faq.md": FAQ, "faq-team.md": changed})
    report = compile_offline(tmp_path)
    assert report.duplicates == []
    bodies = "\n".join((tmp_path / "wiki" / p).read_text() for p in sources_of(tmp_path))
    assert "every thirty days" in bodies and "every ninety days" in bodies
