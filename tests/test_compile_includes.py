"""Includes never carry a restricted source into a page more people read (issue 25): an article
is at least as restricted as every file whose text it holds (``ReadContext``, ``Source.for_page``,
docs/compile.md "Restricted articles"), and a source added from outside (uploaded, fetched from
the web) includes no other file at all, wherever it is moved. Checked as a reader sees the wiki:
every page over ``/api/pages`` with her token, and ``kaas ask --user``."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from kb_ai.cli import cli

from kb_ai.compile.fetch import FetchPolicy
from kb_ai.config import Settings
from kb_ai.server import create_app
from kb_ai.store.access import parse_access
from kb_ai.store.articles import iter_article_paths, load_article
from kb_ai.store.kb import KnowledgeBase, init_kb

from compile_checks import compile_offline, manifest
from helpers import ADMIN, READER, USERS as BASE_USERS
from web_fakes import FakeSite

SECRET = "Zorblatt earns 412,000 a year"
USERS = BASE_USERS + """
[users.fiona]
token = "finance-token-0123456789abcdef"
groups = ["finance"]
"""
OCTET = {"Content-Type": "application/octet-stream"}
ADDED_FILE = ".kaas-added.json"  # raw/.kaas-added.json: the sources added from outside (compile/add.py)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


def _write(root: Path, rel: str, text: str) -> None:
    path = root / "raw" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")


def restrict(root: Path, source: str, groups: list[str]) -> str:
    """Give the article(s) compiled from ``source`` an ``access`` rule, by hand; its path."""
    paths = manifest(root)["sources"][source]["articles"]
    for path in paths:
        file = root / "wiki" / path
        file.write_text(file.read_text(encoding="utf-8").replace("---\n", f"---\naccess: {json.dumps(groups)}\n", 1),
                        encoding="utf-8")
    KnowledgeBase(root).reindex()
    return paths[0]


@pytest.fixture
def kb(tmp_path) -> Path:
    """A wiki whose salaries and pay pages (compiled from raw/finance/) are for finance only, and a
    public holidays page."""
    root = tmp_path / "kb"
    init_kb(root)
    (root / "kaas.toml").write_text(USERS)
    _write(root, "finance/salaries.md", f"# Salaries\n\n{SECRET}. The bands are reviewed in spring.\n")
    _write(root, "hr/holidays.md", "# Holidays\n\nEveryone gets 25 days of holiday, whatever they earn a year.\n")
    _write(root, "finance/pay.rst", """
        Pay
        ===

        .. _pay-bands:

        Zorblatt band is secret
        -----------------------

        The bands of the board.
        """)
    compile_offline(root)
    restrict(root, "raw/finance/salaries.md", ["finance"])
    restrict(root, "raw/finance/pay.rst", ["finance"])
    return root


def seen_by(root: Path, token: str) -> str:
    """Everything a reader with ``token`` can read of the wiki: the catalog and every page."""
    with TestClient(create_app(Settings(kb=root), mcp=False), headers={"Authorization": f"Bearer {token}"}) as client:
        seen = [client.get("/api/index").text]
        for path in iter_article_paths(root / "wiki"):
            page = client.get(f"/api/pages/{path}")
            if page.status_code == 200:
                seen.append(page.text)
    return "\n".join(seen)


def admin_client(root: Path) -> TestClient:
    app = create_app(Settings(kb=root), mcp=False)
    app.state.kaas.fetch_policy = FetchPolicy.for_server(allow_private=True)  # the fake site is on loopback
    return TestClient(app, headers={"Authorization": f"Bearer {ADMIN}"})


def compile_through_the_ui(client: TestClient) -> dict:
    events = client.post("/api/compile").text
    report = [json.loads(line[5:]) for block in events.split("\n\n") for line in block.splitlines()
              if line.startswith("data:") and "exit_code" in line]
    assert report and report[0]["exit_code"] == 0, events
    return report[0]


def _fetch_and_compile(root: Path, kind: str, body: str) -> tuple[str, dict]:
    with FakeSite() as site:
        url = site.page("/pay", body, kind)
        with admin_client(root) as client:
            fetched = client.post("/api/sources/urls", json={"urls": [url]}).json()["results"][0]
            assert fetched["status"] == "added", fetched
            return fetched["path"], compile_through_the_ui(client)


def test_a_fetched_page_with_a_snippet_line_includes_nothing(kb):
    """A text/plain page is stored as it was sent: its snippet line stays in raw/web/."""
    path, _ = _fetch_and_compile(kb, "text/plain; charset=utf-8",
                                 'Pay notes\n\n--8<-- "../finance/salaries.md"\n\nThat is all we know about pay.\n')
    assert '--8<-- "../finance/salaries.md"' in (kb / path).read_text()
    assert SECRET not in seen_by(kb, READER)
    record = manifest(kb)["sources"][path]
    assert any("not read (added from outside: web" in note for note in record["notes"]), record
    assert record["articles"] and all(SECRET not in (kb / "wiki" / a).read_text() for a in record["articles"])
    # The page's own frontmatter (source_url) says where it came from, should the record be lost.
    (kb / "raw" / ADDED_FILE).unlink()
    compile_offline(kb, full=True)
    assert SECRET not in seen_by(kb, READER)


def test_a_fetched_html_page_keeps_no_live_snippet_line(kb):
    """(A guard, not a regression: the HTML reader's Markdown escapes ``<``, so ``--8<--`` in a
    paragraph is stored as ``--8\\<--``, which is no snippet.)"""
    _fetch_and_compile(kb, "text/html; charset=utf-8",
                       '<html><head><title>Pay notes</title></head><body><article><h1>Pay notes</h1>'
                       '<p>--8&lt;-- "../finance/salaries.md"</p><p>That is all we know about pay, '
                       'said the page that was fetched from the web today.</p></article></body></html>')
    assert SECRET not in seen_by(kb, READER)


@pytest.mark.parametrize("name, body", [
    ("notes.md", '# Pay notes\n\n--8<-- "finance/salaries.md"\n\nThat is all we know about pay.\n'),
    ("notes.rst", "Pay notes\n=========\n\n.. include:: finance/salaries.md\n\nThat is all we know about pay.\n"),
    ("notes.txt", "Pay notes\n=========\n\n.. literalinclude:: finance/salaries.md\n\n"
                  "That is all we know about pay, see :ref:`pay-bands`.\n"),
])
def test_an_uploaded_source_includes_nothing(kb, name, body):
    with admin_client(kb) as client:
        added = client.post(f"/api/sources/upload?name={name}", content=body.encode(), headers=OCTET)
        assert added.status_code == 201, added.text
        compile_through_the_ui(client)
    assert SECRET not in seen_by(kb, READER)
    record = manifest(kb)["sources"][f"raw/{name}"]
    assert any("added from outside: upload" in note for note in record.get("notes", [])), record


def test_an_uploaded_source_with_the_same_bytes_is_recognised_by_its_checksum(kb):
    """Moved and renamed by hand (its name changed, not its bytes): still from outside."""
    body = b'# Pay notes\n\n--8<-- "../finance/salaries.md"\n\nThat is all we know about pay.\n'
    with admin_client(kb) as client:
        assert client.post("/api/sources/upload?name=notes.md&folder=inbox", content=body, headers=OCTET).status_code == 201
    (kb / "raw" / "inbox" / "notes.md").rename(kb / "raw" / "finance-notes.md")  # moved: same bytes
    (kb / "raw" / "docs").mkdir()
    (kb / "raw" / "finance-notes.md").rename(kb / "raw" / "docs" / "notes.md")
    compile_offline(kb)
    assert SECRET not in seen_by(kb, READER)
    assert "added from outside" in json.dumps(manifest(kb)["sources"]["raw/docs/notes.md"])


def test_an_owners_source_including_a_restricted_file_is_restricted_like_it(kb):
    _write(kb, "hr/pay-review.md", """
        # Pay review

        How the yearly pay review runs: managers propose, finance decides.

        --8<-- "../finance/salaries.md"
        """)
    compile_offline(kb)
    articles = manifest(kb)["sources"]["raw/hr/pay-review.md"]["articles"]
    assert articles
    for path in articles:
        article = load_article(kb / "wiki", path)
        assert parse_access(article.meta)[0] == ("finance",), path  # restricted like what it holds
        assert SECRET in article.body
    assert SECRET not in seen_by(kb, READER)
    assert SECRET in seen_by(kb, "finance-token-0123456789abcdef")
    runner = CliRunner()
    as_rita = runner.invoke(cli, ["--kb", str(kb), "ask", "How much does Zorblatt earn?", "--user", "rita", "--json"])
    assert as_rita.exit_code == 0, as_rita.output
    assert "412,000" not in as_rita.stdout


def test_a_public_article_gets_its_source_without_a_restricted_include_and_says_so(kb):
    _write(kb, "hr/pay-review.md", "# Pay review\n\nHow the yearly pay review runs: managers propose.\n")
    compile_offline(kb)  # a public article
    public = manifest(kb)["sources"]["raw/hr/pay-review.md"]["articles"]
    _write(kb, "hr/pay-review.md", """
        # Pay review

        How the yearly pay review runs: managers propose, finance decides.

        --8<-- "../finance/salaries.md"
        """)
    report = compile_offline(kb)
    for path in public:
        article = load_article(kb / "wiki", path)
        assert parse_access(article.meta)[0] is None and SECRET not in article.body
        assert "finance decides" in article.body  # the rest of the source is merged
    assert SECRET not in seen_by(kb, READER)
    assert any(p["path"] == "raw/hr/pay-review.md" and "includes restricted raw/finance/salaries.md" in p["reason"]
               for p in report.partial)


def test_two_includes_of_different_groups_make_an_article_for_admins_only(kb):
    _write(kb, "board/minutes.md", "# Minutes\n\nThe board met in the Quorvex room.\n")
    compile_offline(kb)
    restrict(kb, "raw/board/minutes.md", ["board"])
    _write(kb, "hr/everything.md", """
        # Everything

        All that is known, gathered in one page for the review.

        --8<-- "../finance/salaries.md"
        --8<-- "../board/minutes.md"
        """)
    compile_offline(kb)
    for path in manifest(kb)["sources"]["raw/hr/everything.md"]["articles"]:
        assert parse_access(load_article(kb / "wiki", path).meta)[0] == ()
    for token in (READER, "finance-token-0123456789abcdef"):
        assert "Quorvex" not in seen_by(kb, token)


def test_reference_labels_and_document_titles_of_restricted_sources_stay_hidden(kb):
    _write(kb, "guide.rst", """
        Guide
        =====

        Read :ref:`pay-bands` and :doc:`finance/pay` before the review of the pay of everyone.
        """)
    compile_offline(kb)
    articles = manifest(kb)["sources"]["raw/guide.rst"]["articles"]
    text = "\n".join((kb / "wiki" / a).read_text() for a in articles)
    assert "Zorblatt" not in text and "pay bands" in text  # the label as written, not the hidden title
    assert parse_access(load_article(kb / "wiki", articles[0]).meta)[0] is None
    assert "Zorblatt" not in seen_by(kb, READER)


def test_an_owners_source_never_includes_an_uploaded_one(kb):
    upload = (b'# Snippet\n\nThe uploaded snippet speaks of kettles, tea and the seventh floor kitchen.\n\n'
              b'--8<-- "finance/salaries.md"\n')
    with admin_client(kb) as client:
        assert client.post("/api/sources/upload?name=snippet.md", content=upload, headers=OCTET).status_code == 201
    _write(kb, "handbook.md", """
        # Handbook

        The handbook tells newcomers where the printers are, how to book rooms and whom to ask.

        --8<-- "snippet.md"
        """)
    report = compile_offline(kb)
    handbook = manifest(kb)["sources"]["raw/handbook.md"]["articles"]
    assert handbook and all("seventh floor" not in (kb / "wiki" / a).read_text() for a in handbook)
    assert SECRET not in seen_by(kb, READER)
    assert any(p["path"] == "raw/handbook.md" and "added from outside" in p["reason"] for p in report.partial)


def test_a_damaged_record_of_added_sources_fails_closed(kb):
    (kb / "raw" / ADDED_FILE).write_text("{not json")
    _write(kb, "hr/pay-review.md", '# Pay review\n\nManagers propose.\n\n--8<-- "../finance/salaries.md"\n')
    report = compile_offline(kb)
    assert any(ADDED_FILE in w for w in report.warnings)
    assert not any(s["path"].endswith(ADDED_FILE) for s in report.skipped)  # never a source itself
    with admin_client(kb) as client:
        refused = client.post("/api/sources/upload?name=x.md", content=b"# X\n\ntext", headers=OCTET)
    assert refused.status_code == 400 and "damaged" in refused.json()["error"]["message"]
    assert not (kb / "raw" / "x.md").exists()
    assert SECRET not in seen_by(kb, READER)
    assert re.search(r"added from outside", json.dumps(manifest(kb)["sources"]["raw/hr/pay-review.md"]))
