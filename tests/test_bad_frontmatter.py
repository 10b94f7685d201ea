"""One article with a frontmatter value PyYAML cannot build (an impossible date, a 5,000-digit
integer, an unknown ``!!bool``, nesting too deep, ...) is skipped with a one-line warning naming
it, through every interface: ``kaas index``, ``lint``, ``compile`` (offline and with a model),
``ask``, the HTTP API and rendered pages, saves (of another page and of the bad page itself), the
watcher, and the MCP tools. Everything else keeps working."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from click.testing import CliRunner
from mcp import Client
from starlette.testclient import TestClient

from kb_ai.cli import cli
from kb_ai.config import Settings, load_settings
from kb_ai.errors import ArticleFormatError
from kb_ai.server import create_app
from kb_ai.server.pages import text_version
from kb_ai.server.watch import WikiWatcher
from kb_ai.server.mcp import build_mcp_server
from kb_ai.store.articles import parse_article

from fixtures.compile.fake_model import compile_responder
from helpers import write_page, page_refs
from llm_fakes import API_BASE, MODEL, FakeOpenAI

BAD = "ops/bad.md"

# Values PyYAML reads as a date, number or tag it then cannot build, each raising its own
# non-YAML exception (ValueError, KeyError, AttributeError, RecursionError, ...).
UNBUILDABLE = {
    "impossible date": "updated: 2026-13-45",
    "year zero": "updated: 0000-01-01",
    "offset out of range": "updated: 2026-01-01T00:00:00+99:00",
    "5000-digit integer": "count: " + "9" * 5000,
    "int tag on a word": "count: !!int many",
    "float tag on a word": "ratio: !!float much",
    "bool tag on a word": "flag: !!bool maybe",
    "timestamp tag on a word": "when: !!timestamp never",
    "deep nesting, pure-Python loader": "x: " + "[" * 3000 + "]" * 3000 + "\nnote: '*'",
}
# Values PyYAML builds but nothing after it can print or serialize (json, YAML, str()).
UNPRINTABLE = {
    "huge hex integer": "count: 0x" + "f" * 5000,
    "huge sexagesimal integer": "count: 1" + ":59" * 3000,
    "deep nesting": "x: " + "[" * 100 + "]" * 100,
}
BAD_VALUES = {**UNBUILDABLE, **UNPRINTABLE}
SLOW = {"deep nesting, pure-Python loader"}  # 3000 levels through the pure-Python YAML loader: seconds a case


def cases(names) -> list:
    """``names`` as pytest params (id = the name), the slow one marked ``slow``."""
    return [pytest.param(n, id=n, marks=[pytest.mark.slow] if n in SLOW else []) for n in sorted(names)]


def bad_text(value: str) -> str:
    return f"---\ntitle: Broken page\nsummary: Has one bad value.\n{value}\n---\n# Broken\n\nThe broken page body.\n"


@pytest.fixture(params=cases(BAD_VALUES))
def bad_value(request) -> str:
    return BAD_VALUES[request.param]


@pytest.fixture(params=cases(UNBUILDABLE))
def unbuildable_value(request) -> str:
    return UNBUILDABLE[request.param]


@pytest.fixture
def bad_kb(sample_kb, bad_value):
    (sample_kb.wiki_dir / BAD).write_text(bad_text(bad_value), encoding="utf-8")
    return sample_kb


def run_cli(*args: str):
    return CliRunner().invoke(cli, list(args))


def no_traceback(result) -> None:
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)


@pytest.mark.parametrize("name", cases(BAD_VALUES))
def test_parser_raises_only_article_format_error_naming_the_file(name):
    with pytest.raises(ArticleFormatError) as info:
        parse_article(bad_text(BAD_VALUES[name]), BAD)
    message = info.value.message
    assert message.startswith(f"{BAD}: malformed frontmatter") and "\n" not in message and len(message) < 300


def test_the_message_says_which_value_and_line():
    with pytest.raises(ArticleFormatError) as info:
        parse_article(bad_text("updated: 2026-13-45"), BAD)
    assert "2026-13-45" in info.value.message and "line 4" in info.value.message


def test_non_finite_floats_are_kept_and_served_as_json_strings():
    article = parse_article("---\ntitle: T\nratio: .nan\nlimit: .inf\n---\nbody", "t/p.md")
    assert json.dumps(article.frontmatter_json, allow_nan=False)
    assert article.frontmatter_json["limit"] == "inf"


# -- CLI ------------------------------------------------------------------------------------------


def test_index_skips_the_page_with_a_one_line_warning(bad_kb):
    result = run_cli("--kb", str(bad_kb.root), "index")
    no_traceback(result)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if BAD in line]
    assert len(warnings) == 1 and warnings[0].startswith("kaas: warning: skipped ops/bad.md: malformed frontmatter")
    assert "indexed 4 articles" in result.stdout
    assert BAD not in bad_kb.master_index.read_text()


def test_lint_reports_the_page_and_checks_the_rest(bad_kb):
    result = run_cli("--kb", str(bad_kb.root), "lint", "--json")
    no_traceback(result)
    assert result.exit_code == 1  # an error finding, not a crash
    findings = json.loads(result.stdout)["findings"]
    bad = [f for f in findings if f["path"] == BAD]
    assert [f["check"] for f in bad] == ["frontmatter"] and bad[0]["severity"] == "error"


@pytest.mark.parametrize("value", [BAD_VALUES["impossible date"], BAD_VALUES["huge hex integer"]],
                         ids=["date", "hex"])
def test_offline_compile_skips_the_bad_page(sample_kb, value):
    (sample_kb.root / "raw").mkdir()
    (sample_kb.root / "raw" / "alpha.md").write_text("# Alpha\n\nAlpha is the first project and ships in May.\n")
    (sample_kb.wiki_dir / BAD).write_text(bad_text(value), encoding="utf-8")
    result = run_cli("--kb", str(sample_kb.root), "compile", "--offline")
    no_traceback(result)
    assert result.exit_code == 0, result.output
    assert f"skipped {BAD}: malformed frontmatter" in result.stdout  # the report's warnings
    catalog = sample_kb.master_index.read_text()
    assert "Alpha" in catalog and BAD not in catalog
    assert (sample_kb.wiki_dir / BAD).read_text(encoding="utf-8") == bad_text(value)  # left as it was


def test_compile_with_a_model_skips_the_bad_page(sample_kb, monkeypatch):
    (sample_kb.root / "raw").mkdir()
    (sample_kb.root / "raw" / "alpha.md").write_text("# Alpha\n\nAlpha is the first project and ships in May.\n")
    (sample_kb.wiki_dir / BAD).write_text(bad_text(BAD_VALUES["impossible date"]), encoding="utf-8")
    for name, value in {"KAAS_MODEL": MODEL, "KAAS_API_BASE": API_BASE, "KAAS_API_KEY": "sk-test",
                        "KAAS_MAX_RETRIES": "0"}.items():
        monkeypatch.setenv(name, value)
    with FakeOpenAI() as fake:
        fake.add(compile_responder, repeat=True)
        result = run_cli("--kb", str(sample_kb.root), "compile")
    no_traceback(result)
    assert result.exit_code == 0, result.output
    assert fake.call_count > 0
    assert f"skipped {BAD}: malformed frontmatter" in result.stdout
    assert BAD not in sample_kb.master_index.read_text()


@pytest.fixture
def broken_after_index(sample_kb, unbuildable_value):
    """The page was fine when the catalog was written, then edited by hand into a bad one."""
    write_page(sample_kb.wiki_dir, BAD, "Broken page", "Has one bad value.", "# Broken\n\nThe broken page body.")
    sample_kb.reindex()
    file = sample_kb.wiki_dir / BAD
    file.write_text(bad_text(unbuildable_value), encoding="utf-8")
    stamp = sample_kb.master_index.stat().st_mtime_ns + 10_000_000
    os.utime(file, ns=(stamp, stamp))  # newer than the catalog, as a later edit is
    return sample_kb


def test_ask_answers_from_the_other_pages(broken_after_index):
    result = run_cli("--kb", str(broken_after_index.root), "ask", "--json", "How are citations validated?")
    no_traceback(result)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"path": "retrieval/citations.md", "title": "Citations"} in page_refs(data["citations"])


def test_ask_reading_the_bad_page_says_so_in_one_line(broken_after_index):
    result = run_cli("--kb", str(broken_after_index.root), "ask", "--page", BAD, "anything")
    no_traceback(result)
    said = [line for line in result.stderr.splitlines() if f"{BAD}: malformed frontmatter" in line]
    assert len(said) == 1 and said[0].startswith(("kaas: note:", "kaas: error:")), result.stderr


# -- HTTP -----------------------------------------------------------------------------------------


@pytest.fixture
def client(bad_kb):
    with TestClient(create_app(Settings(kb=bad_kb.root), mcp=False)) as test_client:
        yield test_client


def test_http_serves_everything_else_and_reports_the_page(client, bad_kb):
    index = client.get("/api/index")
    assert index.status_code == 200 and index.json()["articles"] == 4
    bad = client.get(f"/api/pages/{BAD}")
    assert bad.status_code == 422
    assert bad.json()["error"]["code"] == "bad_article" and BAD in bad.json()["error"]["message"]
    rendered = client.get(f"/wiki/{BAD}")
    assert rendered.status_code == 422 and "malformed frontmatter" in rendered.text
    assert client.get("/api/pages/ops/deployment.md").status_code == 200
    assert client.get("/wiki/ops/deployment.md").status_code == 200
    assert client.get("/wiki/").status_code == 200


@pytest.fixture
def unbuildable_client(sample_kb, unbuildable_value):
    (sample_kb.wiki_dir / BAD).write_text(bad_text(unbuildable_value), encoding="utf-8")
    with TestClient(create_app(Settings(kb=sample_kb.root), mcp=False)) as test_client:
        yield test_client


def test_saving_another_page_works_and_reindexes(unbuildable_client, sample_kb):
    client, bad_kb = unbuildable_client, sample_kb
    page = client.get("/api/pages/ops/deployment.md").json()
    edited = page["markdown"].replace("Running the chat server", "Running the edited server")
    saved = client.put("/api/pages/ops/deployment.md", json={"markdown": edited, "version": page["version"]})
    assert saved.status_code == 200, saved.text
    assert saved.json()["summary"].startswith("Running the edited server")
    assert "Running the edited server" in bad_kb.master_index.read_text()


def test_saving_the_bad_page_as_is_is_refused_and_fixing_it_works(client, bad_kb):
    text = (bad_kb.wiki_dir / BAD).read_text(encoding="utf-8")
    refused = client.put(f"/api/pages/{BAD}", json={"markdown": text, "version": text_version(text)})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "bad_article"
    assert (bad_kb.wiki_dir / BAD).read_text(encoding="utf-8") == text  # nothing written
    fixed = "---\ntitle: Broken page\nsummary: Fixed now.\n---\n# Broken\n\nFixed.\n"
    saved = client.put(f"/api/pages/{BAD}", json={"markdown": fixed, "version": text_version(text)})
    assert saved.status_code == 200, saved.text
    assert BAD in bad_kb.master_index.read_text()


def test_the_watcher_keeps_reindexing_after_meeting_the_bad_page(sample_kb):
    app = create_app(Settings(kb=sample_kb.root), mcp=False)
    state = app.state.kaas
    watcher = WikiWatcher(sample_kb, 60, lambda: state.save_lock)

    async def scenario() -> list[bool]:
        seen = [await watcher.check()]
        (sample_kb.wiki_dir / BAD).write_text(bad_text(BAD_VALUES["impossible date"]), encoding="utf-8")
        seen.append(await watcher.check())
        write_page(sample_kb.wiki_dir, "ops/new.md", "Written in an editor", "By hand.", "# Written\n\ntext")
        seen.append(await watcher.check())
        return seen

    assert asyncio.run(scenario()) == [False, True, True]
    catalog = sample_kb.master_index.read_text()
    assert "Written in an editor" in catalog and BAD not in catalog


# -- MCP ------------------------------------------------------------------------------------------


async def test_mcp_read_page_is_a_tool_error_and_list_pages_works(bad_kb):
    bad_kb.reindex()
    async with Client(build_mcp_server(load_settings(bad_kb.root, env={}))) as client:
        bad = await client.call_tool("read_page", {"path": BAD})
        good = await client.call_tool("read_page", {"path": "ops/deployment.md"})
        listing = await client.call_tool("list_pages", {})
        answer = await client.call_tool("ask", {"question": "reverse proxy", "paths": [BAD, "ops/deployment.md"]})
    assert bad.is_error and f"{BAD}: malformed frontmatter" in bad.content[0].text
    assert not good.is_error and good.structured_content["title"] == "Deployment"
    assert not listing.is_error and listing.structured_content["total"] == 4
    assert answer.is_error or BAD not in [p["path"] for p in answer.structured_content["pages"]]


def test_a_page_with_nan_and_inf_is_served_as_strict_json(sample_kb):
    write_page(sample_kb.wiki_dir, "ops/limits.md", "Limits", "Numbers YAML has and JSON has not.",
               "# Limits\n\nNone.", ratio=float("nan"), ceiling=float("inf"))
    sample_kb.reindex()

    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")

    with TestClient(create_app(Settings(kb=sample_kb.root), mcp=False)) as client:
        got = client.get("/api/pages/ops/limits.md")
    assert got.status_code == 200
    data = json.loads(got.text, parse_constant=refuse)  # what a browser's JSON.parse accepts
    assert data["frontmatter"]["ceiling"] == "inf" and data["frontmatter"]["ratio"] == "nan"
