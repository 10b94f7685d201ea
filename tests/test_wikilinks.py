"""Wikilinks: an Obsidian vault works as it is. ``[[Title]]``, ``[[path/page]]``, ``[[page|label]]``,
``[[page#Heading]]`` and ``![[page]]`` are links for the link finder, the one resolver (by path,
file name, title or ``aliases:``, case-insensitive), the renderer, lint and ``--fix``; a
wikilink to a page a reader may not see renders as a link to a missing page."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from kb_ai.config import Settings
from kb_ai.quality.lint import lint_kb, run_lint
from kb_ai.server.app import create_app
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.markdown_text import find_links, plain_text

from access_twins import ALICE, BOB, users_toml
from helpers import write_page


def vault(root: Path, toml: str | None = None) -> KnowledgeBase:
    """An Obsidian-style vault as ``wiki/``: wikilinks of every form, aliases, tags, an embed, a
    ``.obsidian/`` folder with its settings, and a page restricted to the hr group."""
    wiki = root / "wiki"
    write_page(wiki, "ops/incident-response.md", "Incident response", "What to do when production breaks.",
               "# Incident response\n\nPage the on-call engineer, then open [[depot-locations|the depots]] "
               "to find the spare hardware. Escalation is in [[ops/escalation#Second line]].\n\n"
               "`[[not a link]]` in code stays code.\n",
               topic="ops", aliases=["IR", "Outage playbook"], tags=["ops", "runbook"])
    write_page(wiki, "ops/escalation.md", "Escalation", "Who to call after the on-call engineer.",
               "# Escalation\n\n## Second line\n\nCall the platform lead (numbers in [[contacts]]). See the [[outage playbook]].\n",
               topic="ops", tags=["ops"])
    write_page(wiki, "sites/depot-locations.md", "Depots", "Where spare hardware is kept.",
               "# Depots\n\nThe north depot holds spare disks.\n\n![[Incident response]]\n",
               topic="sites", tags=["sites"])
    write_page(wiki, "hr/payroll-secrets.md", "Zanzibarite pay", "Pay bands.",
               "# Pay\n\nThe bands. Back to [[IR]].\n", topic="hr", access=["hr"])
    write_page(wiki, "ops/contacts.md", "Contacts", "Phone numbers.",
               "# Contacts\n\nPay questions: [[Zanzibarite pay]].\n", topic="ops")
    (wiki / ".obsidian").mkdir()
    (wiki / ".obsidian" / "app.json").write_text('{"useMarkdownLinks": false}\n')
    (wiki / ".obsidian" / "notes.md").write_text("not an article\n")
    if toml is not None:
        (root / "kaas.toml").write_text(toml)
    kb = KnowledgeBase(root)
    kb.reindex()
    return kb


def test_the_link_finder_reads_every_wikilink_form_and_none_in_code():
    body = ("See [[Incident response]], [[depot-locations|the depots]], ![[ops/page#Setup]] and [[a\\|b]].\n\n"
            "`[[in code]]`\n\n    [[indented code]]\n\n\\[[escaped]]\n")
    found = [(link.kind, link.target, link.text, link.image) for link in find_links(body)]
    assert found == [("wikilink", "Incident response", "Incident response", False),
                     ("wikilink", "depot-locations", "the depots", False),
                     ("wikilink", "ops/page#Setup", "ops/page", True),
                     ("wikilink", "a", "b", False)]
    assert plain_text("See [[A|the a]] and [[B]].") == "See the a and B."


def test_wikilinks_resolve_by_path_file_name_title_and_alias_case_insensitively(tmp_path):
    from kb_ai.store.links import resolve_wikilink  # new in this change

    catalog = vault(tmp_path).catalog()
    names = catalog.wiki_page
    for written, page in [("ops/incident-response", "ops/incident-response.md"),
                          ("Ops/Incident-Response.md", "ops/incident-response.md"),
                          ("depot-locations", "sites/depot-locations.md"),
                          ("depots", "sites/depot-locations.md"),
                          ("incident RESPONSE", "ops/incident-response.md"),
                          ("ir", "ops/incident-response.md"),
                          ("Outage  playbook", "ops/incident-response.md")]:
        assert resolve_wikilink(written, names).page == page, written
    assert resolve_wikilink("escalation#Second line", names).fragment == "second-line"
    assert resolve_wikilink("Nowhere at all", names).page == "Nowhere at all.md"  # missing: broken
    assert resolve_wikilink("../../etc/passwd", names).page is None


def test_an_obsidian_vault_lints_clean_and_obsidian_files_are_not_articles(tmp_path):
    kb = vault(tmp_path)
    report = lint_kb(kb)
    assert [f for f in report.findings if f.check in ("broken-link", "index-drift", "orphan")] == [], \
        report.render_text()
    assert "ops/incident-response.md" in kb.catalog()
    assert not any(".obsidian" in e.path for e in kb.catalog().entries)
    assert "aliases: IR Outage%20playbook" in kb.master_index.read_text()  # the catalog keeps the names


def test_a_broken_wikilink_is_a_lint_error_and_fix_keeps_its_text(tmp_path):
    kb = vault(tmp_path)
    page = kb.wiki_dir / "ops" / "contacts.md"
    page.write_text(page.read_text().replace("[[Zanzibarite pay]].", "[[Zanzibarite pay]]. Also [[gone forever]] "
                                             "and [[nowhere#Top|the old list]]."))
    report = lint_kb(kb)
    broken = [f for f in report.findings if f.check == "broken-link"]
    assert sorted(f.message for f in broken) == [
        "wikilink [[gone forever]]: no page has the name 'gone forever' (path, file name, title or alias)",
        "wikilink [[nowhere#Top]]: no page has the name 'nowhere' (path, file name, title or alias)"]
    assert all(f.severity == "error" and f.line == 8 for f in broken) and report.exit_code == 1
    run_lint(Settings(kb=kb.root), fix=True)
    text = page.read_text()
    assert "Pay questions: [[Zanzibarite pay]]. Also gone forever and the old list." in text  # a working link stays
    assert not [f for f in lint_kb(kb).findings if f.check == "broken-link"]


def test_fix_repoints_a_wikilink_to_a_renamed_page_keeping_what_the_reader_saw(tmp_path):
    kb = vault(tmp_path)
    old = kb.wiki_dir / "sites" / "depot-locations.md"
    old.rename(kb.wiki_dir / "sites" / "depots-2024.md")
    kb.reindex()
    page = kb.wiki_dir / "ops" / "incident-response.md"
    page.write_text(page.read_text().replace("[[depot-locations|the depots]]", "[[depot-locations|Depots]] "
                                             "and [[Depot locations#North]]"))
    report = lint_kb(kb)
    assert sorted(f.message for f in report.findings if f.check == "broken-link") == [
        "wikilink [[Depot locations#North]]: no page has the name 'Depot locations' (path, file name, title or alias)",
        "wikilink [[depot-locations]]: no page has the name 'depot-locations' (path, file name, title or alias)"]
    run_lint(Settings(kb=kb.root), fix=True)
    # the one page titled like the link's text: the label (what the reader saw) and heading kept
    assert "open [[sites/depots-2024|Depots]] and Depot locations to find" in page.read_text()
    assert not [f for f in lint_kb(kb).findings if f.check == "broken-link"]


def test_the_ui_renders_wikilinks_and_a_hidden_page_is_a_missing_one(tmp_path):
    kb = vault(tmp_path, toml=users_toml(alice_group="hr"))
    app = create_app(Settings(kb=kb.root), mcp=False)
    alice = TestClient(app, headers={"Authorization": f"Bearer {ALICE}"})
    bob = TestClient(app, headers={"Authorization": f"Bearer {BOB}"})
    html = alice.get("/api/pages/ops/incident-response.md").json()["html"]
    assert '<a class="wiki-link" href="/wiki/sites/depot-locations.md" rel="noopener noreferrer">the depots</a>' in html
    assert 'href="/wiki/ops/escalation.md#h-second-line"' in html
    assert "<code>[[not a link]]</code>" in html
    depots = alice.get("/api/pages/sites/depot-locations.md").json()
    assert '<a class="wiki-link" href="/wiki/ops/incident-response.md"' in depots["html"]  # the embed, as a link
    assert alice.get("/api/pages/ops/escalation.md").json()["links"] == ["ops/contacts.md", "ops/incident-response.md"]  # an alias
    seen = alice.get("/api/pages/ops/contacts.md").json()
    assert '<a class="wiki-link" href="/wiki/hr/payroll-secrets.md"' in seen["html"]
    hidden = bob.get("/api/pages/ops/contacts.md").json()
    missing_page = bob.get("/api/pages/ops/contacts.md").json()["html"]
    assert "payroll-secrets" not in hidden["html"] and hidden["links"] == []
    assert '<a class="broken-link" href="/wiki/Zanzibarite%20pay.md" title="No page Zanzibarite pay.md in this wiki"' \
        in missing_page  # exactly what a wikilink to no page at all renders as


def test_page_json_has_links_out_and_in_and_backlinks_never_list_hidden_pages(tmp_path):
    kb = vault(tmp_path, toml=users_toml(alice_group="hr"))
    app = create_app(Settings(kb=kb.root), mcp=False)
    alice = TestClient(app, headers={"Authorization": f"Bearer {ALICE}"})
    bob = TestClient(app, headers={"Authorization": f"Bearer {BOB}"})
    seen = alice.get("/api/pages/ops/incident-response.md").json()
    assert [p["path"] for p in seen["links_out"]] == ["sites/depot-locations.md", "ops/escalation.md"]
    assert [p["path"] for p in seen["links_in"]] == ["hr/payroll-secrets.md", "ops/escalation.md",
                                                     "sites/depot-locations.md"]
    hidden = bob.get("/api/pages/ops/incident-response.md").json()
    assert [p["path"] for p in hidden["links_in"]] == ["ops/escalation.md", "sites/depot-locations.md"]
    assert "payroll" not in bob.get("/api/pages/ops/incident-response.md").text.lower()


async def test_mcp_read_page_returns_links_out_and_in_as_the_reader_may_know_them(tmp_path):
    from mcp import Client

    from kb_ai.server.mcp import build_mcp_server
    from kb_ai.store.users import UserDirectory

    kb = vault(tmp_path, toml=users_toml(alice_group="hr"))
    bob = UserDirectory(kb.root).reader_named("bob")
    async with Client(build_mcp_server(Settings(kb=kb.root), stdio_reader=bob)) as client:
        page = await client.call_tool("read_page", {"path": "ops/incident-response.md"})
    data = page.structured_content
    assert data["links_out"] == ["sites/depot-locations.md", "ops/escalation.md"]
    assert data["links_in"] == ["ops/escalation.md", "sites/depot-locations.md"]


def test_navigation_follows_wikilinks_from_the_pages_read(tmp_path):
    from kb_ai.navigate.bridge import BridgeOptions, bridge_candidates
    from kb_ai.navigate.records import ReadPage
    from kb_ai.store.pages import load_page
    from kb_ai.store.access import OWNER

    kb = vault(tmp_path)
    article = load_page(kb, "ops/incident-response.md", OWNER).article
    read = [ReadPage(article.path, article.title, article.body)]
    assert bridge_candidates(read, kb.catalog(), BridgeOptions(mentions=False)) == [
        "sites/depot-locations.md", "ops/escalation.md"]
