"""Dedup, plan validation, supersession and section edits, tested as units."""

from __future__ import annotations

import pytest

from kb_ai.compile.dedup import Boilerplate, DedupIndex, Fingerprint, classify, fingerprint
from kb_ai.compile.ingest import Source
from kb_ai.compile.offline import TRAIL, article_body, supersede
from kb_ai.compile.plan_catalog import PlanCatalog, twin_key
from kb_ai.compile.planners import resolve_plan
from kb_ai.compile.writers import apply_edits, check_trails, clean_body, clean_tags, summary_or_lead
from kb_ai.store.catalog import CatalogEntry

TEXT = (
    "Ledgerly imports bank transactions every four hours and categorizes them with rules that the user "
    "can edit in the settings page. The Solo plan costs nine dollars per month and the Team plan costs "
    "twenty-nine dollars per month for up to ten users. Every new account gets a fourteen day trial. "
    "Support answers within one business day by email and the export runs in under ten minutes."
)


def source(path="raw/a.md", text=TEXT, title="Pricing", date=None) -> Source:
    return Source(path, "markdown", "c" * 64, len(text), 0, title, date, text, "product")


def test_exact_and_near_duplicates_and_revisions():
    index = DedupIndex()
    base = fingerprint(TEXT)
    index.add("raw/a.md", base, "Pricing")
    exact = index.match(fingerprint(TEXT.lower() + "\n\n"))  # case/space ignored
    assert (exact.path, exact.similarity, exact.by_title) == ("raw/a.md", 1.0, False)
    near = fingerprint(TEXT.replace("fourteen day", "thirty day"))
    match = index.match(near)
    assert match.path == "raw/a.md" and 0.8 <= match.similarity < 1.0 and not match.by_title
    assert classify(index.match(near), None, None).kind == "near"
    assert classify(index.match(near), "2026-04-01", "2026-01-01").kind == "revision"
    unrelated = fingerprint("Completely different text about gardening, tomatoes, soil and watering schedules " * 3)
    assert index.match(unrelated) is None


def test_same_title_with_dates_is_a_revision_at_lower_similarity():
    index = DedupIndex()
    index.add("raw/a.md", fingerprint(TEXT), "Pricing")
    changed = TEXT.replace("nine dollars", "twelve dollars").replace("fourteen day", "thirty day") \
        .replace("one business day", "four hours").replace("ten minutes", "an hour")
    match = index.match(fingerprint(changed), "Pricing")
    assert match is not None
    verdict = classify(match, "2026-04-01", "2026-01-01")
    assert verdict is not None and verdict.kind in ("revision",)
    # Without two different dates a same-title match that is not near enough is no duplicate at all.
    if match.by_title:
        assert classify(match, None, None) is None


def test_fingerprint_round_trips_through_json():
    fp = fingerprint(TEXT)
    assert Fingerprint.from_json(fp.to_json()) == fp


def test_boilerplate_is_kept_once_and_removed_elsewhere():
    footer = "Internal notes of the team. Do not share outside the company; questions go to ops."
    texts = {f"raw/{n}.md": f"# Doc {n}\n\nUnique paragraph number {n} with its own words.\n\n{footer}" for n in "abcd"}
    boilerplate = Boilerplate.from_fingerprints({p: fingerprint(t) for p, t in texts.items()})
    kept, removed = boilerplate.strip("raw/a.md", texts["raw/a.md"])
    assert removed == 0 and footer in kept
    stripped, removed = boilerplate.strip("raw/c.md", texts["raw/c.md"])
    assert removed == 1 and footer not in stripped and "Unique paragraph number c" in stripped
    two = Boilerplate.from_fingerprints({p: fingerprint(texts[p]) for p in ["raw/a.md", "raw/b.md"]})
    assert two.strip("raw/b.md", texts["raw/b.md"])[1] == 0  # two copies are not yet boilerplate


def test_twin_key_merges_near_identical_titles():
    assert twin_key("The Release Process") == twin_key("release processes")
    catalog = PlanCatalog([CatalogEntry("eng/release-process.md", "Release process", "How we ship.", "eng")])
    assert catalog.twin_of("Release Process!") == "eng/release-process.md"
    assert catalog.twin_of("Relase process") == "eng/release-process.md"  # one typo
    assert catalog.twin_of("Incident review") is None
    numbered = PlanCatalog([CatalogEntry("m/q1-planning.md", "Q1 planning", "Plans.", "m"),
                            CatalogEntry("n/note-00012.md", "Note 00012 on tax plan", "x", "n")])
    assert numbered.twin_of("Q2 planning") is None and numbered.twin_of("Note 00013 on tax plan") is None
    assert numbered.twin_of("Q1 plannings") == "m/q1-planning.md"


def test_catalog_narrowing_ranks_related_entries_first():
    items = [CatalogEntry(f"t/p{i}.md", f"Page {i} about gardening", "Soil and water.", "t") for i in range(50)]
    items.append(CatalogEntry("product/pricing.md", "Pricing", "Plans, prices and the free trial.", "product"))
    related = PlanCatalog(items).related("What do the plans cost? The trial lasts 30 days.", limit=5)
    assert related[0].path == "product/pricing.md" and len(related) <= 5


def test_resolve_plan_rejects_hostile_paths_and_uninvited_updates():
    catalog = PlanCatalog([CatalogEntry("product/pricing.md", "Pricing", "Plans.", "product"),
                           CatalogEntry("ops/secrets.md", "Secrets", "Keys.", "ops")])
    raw = {
        "updates": [{"path": "../../etc/passwd.md"}, {"path": "ops/secrets.md"}, {"path": "product/pricing.md"}],
        "creates": [
            {"topic": "../..", "slug": "etc/passwd", "title": "Owned"},
            {"topic": "general", "slug": "..", "title": "Dots"},
            {"topic": "general", "slug": "master-index", "title": "Index"},
            {"topic": "Product Notes", "slug": "Annual Billing", "title": "Annual billing", "summary": "x" * 300},
            {"topic": "product", "slug": "pricing-page", "title": "The pricing"},
        ],
    }
    result = resolve_plan(raw, source(), catalog, offered={"product/pricing.md"})
    paths = {t.path: t for t in result.targets}
    assert set(paths) == {"product/pricing.md", "product-notes/annual-billing.md"}
    assert paths["product-notes/annual-billing.md"].new and len(paths["product-notes/annual-billing.md"].summary) <= 200
    rejected = " | ".join(result.rejected)
    assert "../../etc/passwd.md" in rejected and "ops/secrets.md" in rejected
    assert "'../..' is not a slug" in rejected and "reserved" in rejected


def test_resolve_plan_falls_back_to_one_article_when_nothing_is_usable():
    result = resolve_plan({"updates": [], "creates": [{"topic": "/", "slug": "/", "title": "x"}]},
                          source(title="Team handbook"), PlanCatalog([]), offered=set())
    assert [t.path for t in result.targets] == ["product/team-handbook.md"]
    assert result.notes


def test_supersede_keeps_history_and_states_only_the_current_fact():
    old = article_body("Pricing", "The Solo plan costs $9 per month.\n\nTrials last 14 days.")
    new = article_body("Pricing", "The Solo plan costs $12 per month.\n\nTrials last 14 days.")
    body, added = supersede(old, new, date="2026-04-01", source="raw/p2.md")
    assert added == 1
    assert "$12 per month" in body and body.count("$9 per month") == 1
    trail = [line for line in body.splitlines() if line.startswith("[Superseded")]
    assert len(trail) == 1 and TRAIL.match(trail[0]).group(1, 2) == ("2026-04-01", "raw/p2.md")
    again, added = supersede(body, new, date="2026-05-01", source="raw/p3.md")
    assert added == 0 and again == body  # idempotent, trail kept


def test_clean_body_summary_tags():
    body = clean_body("```markdown\n---\ntitle: x\n---\n# Other title\n\nText.\n\n# Second H1\n\nMore.\n```", "Title")
    assert body.startswith("# Title\n\nText.") and "## Second H1" in body and "---" not in body
    assert len(summary_or_lead("word " * 100, body, "Title")) <= 200
    assert summary_or_lead("", body, "Title") == "Text."
    assert clean_tags(["Bank Sync", "bank-sync", "../x", "", "a" * 50]) == ["bank-sync", "x"]


def test_apply_edits_touches_only_named_sections():
    body = "# T\n\nLead.\n\n## Keep\n\nHand-written words stay.\n\n## Change\n\nOld.\n"
    new = apply_edits(body, [{"heading": "Change", "action": "replace", "text": "## Change\n\nNew."},
                             {"heading": "Added", "action": "add", "text": "# Big\n\nFresh."}], "T")
    assert "## Keep\n\nHand-written words stay." in new
    assert "## Change\n\nNew." in new and "Old." not in new
    assert new.rstrip().endswith("## Added\n\n### Big\n\nFresh.")


def test_trail_lines_citing_foreign_sources_are_dropped():
    body = ("# T\n\nFact.\n\n[Superseded 2026-01-01 by raw/a.md: earlier \"x\"]\n\n"
            "[Superseded 2026-01-01 by raw/evil.md: earlier \"y\"]\n")
    cleaned, dropped = check_trails(body, {"raw/a.md"})
    assert dropped == 1 and "raw/evil.md" not in cleaned and "raw/a.md" in cleaned


@pytest.mark.parametrize("title", ["Release process", "FAQ: billing & refunds"])
def test_article_body_starts_with_the_title(title):
    body = article_body(title, f"# {title}\n\nSome text.\n\n# Another top heading\n\nMore.")
    assert body.startswith(f"# {title}\n\nSome text.") and "## Another top heading" in body


def test_trail_lines_for_paths_with_spaces_and_crlf_sources(tmp_path):
    from kb_ai.compile.ingest import read_source, walk_raw

    line = '[Superseded 2026-01-01 by raw/support/faq (copy).html: earlier "x"]'
    assert TRAIL.match(line).group(2) == "raw/support/faq (copy).html"
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "win.md").write_bytes(b"---\r\ntitle: Windows\r\n---\r\n# Windows\r\n\r\nLine one here.\r\n")
    [raw] = walk_raw(tmp_path)
    result = read_source(raw)
    assert result.title == "Windows" and "\r" not in result.text


def test_a_topic_named_wiki_gets_a_folder_that_can_be_addressed():
    from kb_ai.compile.topic_rule import folder_topic as topic_hint
    from kb_ai.store.paths import normalize_wiki_path

    folder = topic_hint("raw/Wiki/notes.md")
    assert folder == "wiki-pages"
    assert normalize_wiki_path(f"{folder}/notes.md") == "wiki-pages/notes.md"
    assert topic_hint("raw/product/x.md") == "product"
