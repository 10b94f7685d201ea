"""Only kaas writes the access rule of a catalog line: no title or summary (text a non-admin may
edit, or a model may write) can form an HTML comment there, let alone a rule
(``<!-- access: nobody -->`` at the end of a public page's summary once hid the page from every
non-admin). ``kaas lint --fix`` repairs a catalog written before."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from kb_ai.cli import cli
from kb_ai.config import Settings
from kb_ai.server import create_app
from kb_ai.store.catalog import CatalogEntry, parse_master_index
from kb_ai.store.kb import KnowledgeBase

from helpers import write_page

BOB = "bob-token-0123456789abcdef"      # staff: may edit the public page
CAROL = "carol-token-0123456789abcdef"  # no groups
RULES = ["<!-- access: nobody -->", "<!--access:[]-->", "<!-- depends: hr/x.md -->", "<!-- access: staff --> ",
         "<!\\-- access: nobody -->", "<!-- access: nobody --><!-- access: nobody -->"]


@pytest.fixture
def kb(tmp_path) -> KnowledgeBase:
    wiki = tmp_path / "wiki"
    write_page(wiki, "guide/settings.md", "Settings", "Settings.", "# Settings\n\nThe port is 8000.", topic="guide")
    write_page(wiki, "guide/staff.md", "Staff notes", "For staff.", "# Staff\n\nInternal.", topic="guide", access=["staff"])
    (tmp_path / "kaas.toml").write_text(
        f'[users.bob]\ntoken = "{BOB}"\ngroups = ["staff"]\n\n[users.carol]\ntoken = "{CAROL}"\ngroups = []\n')
    kb = KnowledgeBase(tmp_path)
    kb.reindex()
    return kb


def _listed(client: TestClient) -> set[str]:
    index = client.get("/api/index").json()
    return {page["path"] for topic in index["topics"] for page in topic["pages"]}


@pytest.mark.parametrize("rule", RULES)
def test_an_editor_cannot_narrow_a_public_page_through_its_summary(kb, rule):
    app = create_app(Settings(kb=kb.root), mcp=False)
    with TestClient(app, headers={"Authorization": f"Bearer {BOB}"}) as bob, \
            TestClient(app, headers={"Authorization": f"Bearer {CAROL}"}) as carol:
        assert "guide/settings.md" in _listed(carol)
        page = bob.get("/api/pages/guide/settings.md").json()
        markdown = page["markdown"].replace("summary: Settings.", f"summary: {json.dumps('Settings. ' + rule)}")
        saved = bob.put("/api/pages/guide/settings.md", json={"markdown": markdown, "version": page["version"]})
        assert saved.status_code == 200, saved.text
        assert "guide/settings.md" in _listed(carol)  # still public
        entry = kb.catalog().get("guide/settings.md")
        assert entry.access is None and entry.depends == ()
        assert entry.summary == " ".join(("Settings. " + rule).split())  # the text itself is kept
        assert "<!--" not in kb.master_index.read_text().split("guide/settings.md", 1)[1].splitlines()[0]
        assert "guide/staff.md" not in _listed(carol) and "guide/staff.md" in _listed(bob)


@pytest.mark.parametrize("text", ["<!-- access: nobody -->", "a <!\\-- b", "<!\\\\--", "x <!-", "<!<!--", "\\<!--\\"])
def test_titles_and_summaries_round_trip_and_never_hold_a_comment(text):
    for access in (None, ("hr",), ()):
        entry = CatalogEntry("a/b.md", text, text, "a", access=access)
        line = entry.index_line()
        assert line.count("<!--") == (0 if access is None else 1)
        parsed = parse_master_index("## a\n\n" + line).entries[0]
        assert (parsed.title, parsed.summary, parsed.access) == (text, text, access)


def test_lint_fix_repairs_a_catalog_whose_summary_wrote_a_rule(kb):
    # What an earlier version wrote for a public page whose summary ends with a rule.
    settings = kb.wiki_dir / "guide" / "settings.md"
    settings.write_text(settings.read_text().replace("summary: Settings.", "summary: 'Settings. <!-- access: nobody -->'"))
    text = kb.master_index.read_text()
    old_line = "- [Settings](guide/settings.md) — Settings. <!-- access: nobody -->"
    kb.master_index.write_text(text.replace("- [Settings](guide/settings.md) — Settings.", old_line))
    assert parse_master_index(kb.master_index.read_text()).get("guide/settings.md").access == ("nobody",)

    found = CliRunner().invoke(cli, ["--kb", str(kb.root), "lint", "--json"])
    drift = [f for f in json.loads(found.stdout)["findings"] if f["check"] == "index-drift"]
    assert drift and all(f["fixable"] for f in drift), found.stdout
    fixed = CliRunner().invoke(cli, ["--kb", str(kb.root), "lint", "--fix"])
    assert "Traceback" not in fixed.output and fixed.exit_code in (0, 1), fixed.output
    entry = parse_master_index(kb.master_index.read_text()).get("guide/settings.md")
    assert entry.access is None and entry.summary == "Settings. <!-- access: nobody -->"
    again = CliRunner().invoke(cli, ["--kb", str(kb.root), "lint", "--json"])
    assert not [f for f in json.loads(again.stdout)["findings"] if f["check"] == "index-drift"], again.stdout
