"""A frontmatter block kaas does not read as frontmatter never makes a restricted page public.

Every spelling of ``access: [finance]`` below is either read as that rule, or its page is refused
(``store/frontmatter.py: locate_frontmatter`` / ``split_frontmatter`` raise ``ArticleFormatError``)
and then hidden from everyone by every reader: left out of the catalog, 404 to readers, the
precise error to admins, one lint error naming the file. Never body text that anyone may read.
Each case is a page of one wiki, read through HTTP, MCP, the CLI and lint by bob (group eng),
alice (group finance), ops (admin) and the owner."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner
from mcp import Client
from starlette.testclient import TestClient

from kb_ai.cli import cli
from kb_ai.config import Settings
from kb_ai.errors import ArticleFormatError, PageNotFoundError
from kb_ai.server.app import create_app
from kb_ai.server.mcp import build_mcp_server
from kb_ai.store.articles import parse_article
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.pages import load_page
from kb_ai.store.users import UserDirectory

from access_twins import ALICE, BOB, OPS, users_toml
from helpers import write_page
from server_fakes import ServerThread

SECRET = "Zorblax"  # in every hidden page's title and body, and nowhere else
QUESTION = "How large is the budget, in total?"  # the pages' own words, not the secret ones


def assert_hidden(text: str) -> None:
    for secret in (SECRET, SECRET.lower(), "4,321,000"):
        assert secret not in text, f"{secret!r} leaked: {text[:2000]}"


def page(opening: str = "---\n", meta: str = "access: [finance]\n", closing: str = "---\n", nl: str = "\n") -> str:
    text = f"{opening}title: {SECRET} budget\n{meta}{closing}# {SECRET} budget\n\nThe {SECRET.lower()} budget is 4,321,000.\n"
    return text.replace("\n", nl)


# Read as the rule: alice (finance) reads them, bob does not.
READ = {
    "closed by YAML's ...": page(closing="...\n"),
    "opened by --- # comment": page(opening="--- # kaas page\n"),
    "... # comment closer": page(closing="... # end of frontmatter\n"),
    "two byte-order marks": "\ufeff\ufeff" + page(),
    "CRLF": page(nl="\r\n"),
    "CR only": page(nl="\r"),
    "trailing blanks": page(opening="--- \t\n", closing="---  \n"),
    "four dashes": page(opening="----\n", closing="----\n"),
    "a scalar string": page(meta="access: finance\n"),
    "a tab after the colon": page(meta="access:\t[finance]\n"),
}
# Read as a rule that lets only admins in (a wrong type, empty, or a key kaas does not read).
ADMINS_ONLY = {
    "empty list": page(meta="access: []\n"),
    "a number": page(meta="access: 5\n"),
    "a mapping": page(meta="access: {finance: true}\n"),
    "no value": page(meta="access:\n"),
    "key spelt Access": page(meta="Access: [finance]\n"),
}
# Refused: hidden from everyone.
REFUSED = {
    "never closed": page(closing=""),
    "a list": "---\n- access: [finance]\n- " + SECRET + "\n---\n" + SECRET + " text\n",
    "a string": "---\n" + SECRET + " budget, access finance\n---\nThe " + SECRET + " text.\n",
    "access given twice": page(meta="access: [finance]\naccess: [eng]\n"),
    "a tab as indentation": page(meta="access:\n\t- finance\n"),
    "an unterminated quoted string": page(meta='summary: "never ends\naccess: [finance]\n'),
    "enormous": page(meta="access: [finance]\npad: " + "x" * 70_000 + "\n"),
    "a blank line first": "\n" + page(),
    "indented opening": "  " + page(),
    "TOML": f"+++\ntitle = '{SECRET} budget'\naccess = ['finance']\n+++\nThe {SECRET} text.\n",
    "a flow mapping on the opening line": f"--- {{title: {SECRET}, access: [finance]}}\n---\nThe {SECRET} text.\n",
    "a line separator after ---": page(nl="\u2028"),
}
CASES = {**READ, **ADMINS_ONLY, **REFUSED}
PATHS = {name: f"finance/case-{i:02d}.md" for i, name in enumerate(CASES)}


@pytest.fixture
def kb(make_kb) -> KnowledgeBase:
    kb = make_kb(toml=users_toml(alice_group="finance"), reindex=False)
    for name, text in CASES.items():
        file = kb.wiki_dir / PATHS[name]
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(text.encode("utf-8"))
    kb.reindex()
    return kb


def client_for(kb: KnowledgeBase, token: str) -> TestClient:
    return TestClient(create_app(Settings(kb=kb.root), mcp=False), headers={"Authorization": f"Bearer {token}"})


def listed_paths(client: TestClient) -> set[str]:
    return {p["path"] for topic in client.get("/api/index").json()["topics"] for p in topic["pages"]}


@pytest.mark.parametrize("name", list(CASES))
def test_each_spelling_is_read_as_its_rule_or_refused(name):
    text = CASES[name]
    if name in REFUSED:
        with pytest.raises(ArticleFormatError) as info:
            parse_article(text, "finance/x.md")
        assert info.value.message.startswith("finance/x.md: ") and "\n" not in info.value.message
        return
    article = parse_article(text, "finance/x.md")
    assert article.access == (("finance",) if name in READ else ())
    assert article.title == f"{SECRET} budget" and "access" not in article.body


def test_http_a_reader_without_the_group_gets_404_and_no_listing(kb):
    with client_for(kb, BOB) as bob, client_for(kb, ALICE) as alice, client_for(kb, OPS) as ops:
        for name, path in PATHS.items():
            assert bob.get(f"/api/pages/{path}").status_code == 404, name
            assert bob.get(f"/wiki/{path}").status_code == 404, name
            expected = 200 if name in READ else 404
            assert alice.get(f"/api/pages/{path}").status_code == expected, name
            assert ops.get(f"/api/pages/{path}").status_code == (422 if name in REFUSED else 200), name
        for text in (bob.get("/api/index").text, bob.get("/wiki/").text,
                     bob.post("/api/chat", json={"question": QUESTION}).text):
            assert_hidden(text)
        listed = listed_paths(alice)
        assert {PATHS[n] for n in READ} <= listed and not listed & {PATHS[n] for n in [*ADMINS_ONLY, *REFUSED]}
        listed = listed_paths(ops)
        assert {PATHS[n] for n in [*READ, *ADMINS_ONLY]} <= listed and not listed & {PATHS[n] for n in REFUSED}
        page_json = alice.get(f"/api/pages/{PATHS['closed by YAML' + chr(39) + 's ...']}").json()
        assert page_json["frontmatter"]["access"] == ["finance"] and "access" not in page_json["html"]


async def test_mcp_a_reader_without_the_group_lists_reads_and_asks_nothing(kb):
    bob = UserDirectory(kb.root).reader_named("bob")
    async with Client(build_mcp_server(Settings(kb=kb.root), stdio_reader=bob)) as client:
        listing = await client.call_tool("list_pages", {})
        reads = [await client.call_tool("read_page", {"path": path}) for path in PATHS.values()]
        answer = await client.call_tool("ask", {"question": QUESTION})
        named = await client.call_tool("ask", {"question": "budget", "paths": [PATHS["never closed"]]})
    assert all(read.is_error for read in reads)
    assert named.is_error and "no page" in named.content[0].text
    for result in (listing, answer):
        shown = json.dumps(result.structured_content) + "".join(c.text for c in result.content)
        assert_hidden(shown)


async def test_mcp_over_http_with_a_token_lacking_the_group(kb):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    app = create_app(Settings(kb=kb.root), allowed_hosts=["127.0.0.1", "localhost"])
    with ServerThread(app) as server:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {BOB}"}, timeout=30) as http:
            async with Client(streamable_http_client(server.url + "/mcp", http_client=http)) as client:
                listing = await client.call_tool("list_pages", {})
                reads = [await client.call_tool("read_page", {"path": PATHS[name]})
                         for name in ("closed by YAML's ...", "opened by --- # comment", "never closed")]
    assert all(read.is_error for read in reads)
    assert_hidden(json.dumps(listing.structured_content) + "".join(c.text for c in listing.content))


def test_cli_ask_as_a_user_and_lint_agree_with_the_server(kb):
    runner = CliRunner()
    as_bob = runner.invoke(cli, ["--kb", str(kb.root), "ask", "--user", "bob", "--json", QUESTION])
    assert as_bob.exit_code == 0, as_bob.output
    assert_hidden(as_bob.stdout)
    lint = runner.invoke(cli, ["--kb", str(kb.root), "lint", "--json"])
    findings = [f for f in json.loads(lint.stdout)["findings"] if f["path"].startswith("finance/")]
    refused = [f for f in findings if f["check"] == "frontmatter"]
    assert sorted(f["path"] for f in refused) == sorted(PATHS[n] for n in REFUSED)  # one each, naming it
    assert all(f["severity"] == "error" and "hidden from everyone" in f["message"] for f in refused)


def test_the_owner_reads_what_is_read_and_is_told_about_what_is_refused(kb):
    runner = CliRunner()
    shown = runner.invoke(cli, ["--kb", str(kb.root), "ask", "--page", PATHS["opened by --- # comment"], "budget"])
    assert "4,321,000" in shown.stdout
    refused = runner.invoke(cli, ["--kb", str(kb.root), "ask", "--page", PATHS["never closed"], "budget"])
    said = [line for line in refused.stderr.splitlines() if "not closed" in line]
    assert len(said) == 1 and PATHS["never closed"] in said[0] and "4,321,000" not in refused.stdout


def test_a_hand_edit_into_an_unclosed_block_hides_the_page_before_and_after_a_reindex(make_kb):
    kb = make_kb(toml=users_toml(alice_group="finance"))
    file = write_page(kb.wiki_dir, "finance/plan.md", "Plan", "The plan.", "# Plan\n\nNothing yet.")
    kb.reindex()
    with client_for(kb, BOB) as bob:
        assert bob.get("/api/pages/finance/plan.md").status_code == 200  # public, catalog loaded
        file.write_text(page(closing=""), encoding="utf-8")  # now restricted, but never closed
        stamp = kb.master_index.stat().st_mtime_ns + 10_000_000
        os.utime(file, ns=(stamp, stamp))
        assert bob.get("/api/pages/finance/plan.md").status_code == 404
        assert_hidden(bob.post("/api/chat", json={"question": QUESTION}).text)
    cold = KnowledgeBase(kb.root)  # a new process, from the catalog snapshot
    with pytest.raises(PageNotFoundError):
        load_page(cold, "finance/plan.md", UserDirectory(kb.root).reader_named("bob"))
    kb.reindex()
    assert "finance/plan.md" not in kb.catalog()
