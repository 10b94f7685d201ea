"""One record, one shape: a page's path, title, summary and topic are ``CatalogEntry.record()``
wherever an interface shows them — MCP ``list_pages`` and ``read_page``, ``GET /api/index`` and
``GET /api/pages/<path>`` — and the compile planner's catalog holds the same entries."""

from __future__ import annotations

from mcp import Client
from starlette.testclient import TestClient

from kb_ai.compile.plan_catalog import PlanCatalog
from kb_ai.compile.records import PlanTarget
from kb_ai.config import load_settings
from kb_ai.server.app import create_app
from kb_ai.server.mcp import build_mcp_server
from kb_ai.store.catalog import RECORD_FIELDS


async def test_mcp_tools_show_the_catalog_record(sample_kb):
    catalog = sample_kb.catalog()
    async with Client(build_mcp_server(load_settings(sample_kb.root, env={}))) as client:
        listing = (await client.call_tool("list_pages", {})).structured_content
        page = (await client.call_tool("read_page", {"path": "ops/configuration.md"})).structured_content
    assert listing["pages"] == [e.record() for e in catalog.entries]
    assert {k: page[k] for k in RECORD_FIELDS} == catalog.get("ops/configuration.md").record()


def test_http_api_shows_the_catalog_record(sample_kb):
    catalog = sample_kb.catalog()
    with TestClient(create_app(load_settings(sample_kb.root, env={}))) as client:
        index = client.get("/api/index").json()
        page = client.get("/api/pages/ops/configuration.md").json()
    pages = [p for topic in index["topics"] for p in topic["pages"]]
    assert pages == [e.record("path", "title", "summary") for e in catalog.entries]  # grouped by topic
    assert {k: page[k] for k in RECORD_FIELDS} == catalog.get("ops/configuration.md").record()


def test_the_planner_catalog_holds_catalog_entries_and_plans_round_trip(sample_kb):
    entries = sample_kb.catalog().entries
    plan = PlanCatalog(list(entries))
    assert list(plan.items.values()) == entries
    update = PlanTarget.update_of(entries[0], reason="more on it")
    assert not update.new and update.entry() == entries[0] and update.reason == "more on it"
    new = PlanTarget("ops/x.md", "X", "About x.", "ops", new=True, access=["hr"])
    plan.add_target(new)
    assert plan.items["ops/x.md"].record() == {"path": "ops/x.md", "title": "X", "summary": "About x.", "topic": "ops"}
    assert plan.items["ops/x.md"].access == ("hr",) and "ops/x.md" in plan.restricted
