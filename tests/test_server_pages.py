"""The wiki over HTTP: catalog JSON, one article, rendered pages (sanitized), path safety on every
path parameter, and hand edits saved atomically and re-indexed."""

from __future__ import annotations

import asyncio
import os

import pytest
from starlette.testclient import TestClient

from kb_ai.config import Settings
from kb_ai.server import create_app
from kb_ai.server.pages import text_version
from kb_ai.server.watch import WikiWatcher

from helpers import write_page

HOSTILE_BODY = """# Hostile page

Hello <script>alert('xss')</script> world.

<a href="javascript:alert(1)" onclick="steal()">click me</a>

[markdown js](javascript:alert(2)) and [encoded js](jAvAsCrIpT:alert(3)) and [data](data:text/html;base64,PHNjcmlwdD4=)

<img src="x" onerror="alert(4)"> <div onmouseover="alert(5)" style="position:fixed">hover</div>

<iframe src="https://evil.example"></iframe><form action="https://evil.example"><input name="q"></form>

<svg><script>alert(6)</script></svg> <h2 id="main">clobber</h2>

See [Citations](../retrieval/citations.md), [missing](nope.md) and [a source](../../raw/x.pdf).
"""


@pytest.fixture
def client(sample_kb) -> TestClient:
    with TestClient(create_app(Settings(kb=sample_kb.root))) as test_client:
        yield test_client


def test_index_groups_the_catalog_by_topic(client):
    data = client.get("/api/index").json()
    assert data["mode"] == "offline" and data["articles"] == 4
    assert [t["topic"] for t in data["topics"]] == ["ops", "retrieval"]
    retrieval = data["topics"][1]["pages"]
    assert retrieval[0] == {"path": "retrieval/citations.md", "title": "Citations",
                            "summary": "How answers cite pages and how citations are validated."}


def test_page_has_frontmatter_markdown_html_and_toc(client, sample_kb):
    data = client.get("/api/pages/retrieval/page-selection.md").json()
    assert data["title"] == "Page selection" and data["topic"] == "retrieval"
    assert data["frontmatter"]["summary"].startswith("How the navigator picks")
    assert data["markdown"] == (sample_kb.wiki_dir / "retrieval/page-selection.md").read_text()
    assert '<h2 id="h-repair">Repair</h2>' in data["html"]
    assert data["toc"] == [{"level": 1, "id": "h-page-selection", "title": "Page selection"},
                           {"level": 2, "id": "h-repair", "title": "Repair"}]
    assert data["version"] == text_version(data["markdown"])


def test_wiki_pages_are_rendered_with_toc_and_working_links(client, sample_kb):
    write_page(sample_kb.wiki_dir, "ops/linked.md", "Linked", "Links.",
               "# Linked\n\n## One\n\nSee [deploy](deployment.md#reverse-proxy) and [cite](../retrieval/citations.md).\n\n## Two\n\nx")
    sample_kb.reindex()
    page = client.get("/wiki/ops/linked.md")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<a class="wiki-link" href="/wiki/ops/deployment.md#h-reverse-proxy"' in page.text
    assert 'href="/wiki/retrieval/citations.md"' in page.text
    assert '<a href="#h-one">One</a>' in page.text  # table of contents
    catalog_page = client.get("/wiki/")
    assert 'href="/wiki/ops/linked.md"' in catalog_page.text and "5 articles" in catalog_page.text
    assert client.get("/wiki", follow_redirects=False).status_code == 308
    missing = client.get("/wiki/ops/nothing.md")
    assert missing.status_code == 404 and "no page" in missing.text


def test_hostile_article_html_never_reaches_the_page(client, sample_kb):
    write_page(sample_kb.wiki_dir, "ops/hostile.md", "Hostile <script>alert(7)</script>", "Bad.", HOSTILE_BODY)
    sample_kb.reindex()
    wiki_page = client.get("/wiki/ops/hostile.md").text
    article = wiki_page.split('class="prose article-body">', 1)[1].split("</article>", 1)[0]
    for html in (article, client.get("/api/pages/ops/hostile.md").json()["html"]):
        lowered = html.lower()
        for bad in ("<script", "javascript:", "onclick", "onerror", "onmouseover", "<iframe", "<form",
                    "<input", "data:text/html", "style=", "<svg", 'id="main"'):
            assert bad not in lowered, bad
        assert "click me" in html and "hover" in html  # the text survives, the behaviour does not
        assert '<a class="wiki-link" href="/wiki/retrieval/citations.md"' in html
        assert 'class="broken-link" href="/wiki/ops/nope.md"' in html
        assert '<span class="unavailable-link"' in html  # raw/ sources are not served
    page = client.get("/wiki/ops/hostile.md").text
    assert "Hostile &lt;script&gt;" in page  # titles are escaped by the template
    assert "content-security-policy" in client.get("/wiki/ops/hostile.md").headers


TRAVERSALS = [
    "../kaas.toml", "..%2F..%2Fetc%2Fpasswd.md", "%2e%2e/%2e%2e/etc/passwd.md", "%252e%252e/secret.md",
    "ops/../../secret.md", "/etc/passwd.md", "%2Fetc%2Fpasswd.md", "ops/..%5C..%5Csecret.md", "C:/x.md",
    ".hidden/x.md", "ops/outside-link.md",
]


@pytest.fixture
def kb_with_escape_hatches(sample_kb, tmp_path):
    outside = tmp_path.parent / (tmp_path.name + "-outside")
    outside.mkdir(exist_ok=True)
    (outside / "secret.md").write_text("---\ntitle: SECRET\n---\nTOP SECRET\n")
    (tmp_path / "secret.md").write_text("---\ntitle: SECRET\n---\nTOP SECRET\n")
    os.symlink(outside / "secret.md", sample_kb.wiki_dir / "ops" / "outside-link.md")
    return sample_kb


@pytest.mark.parametrize("path", TRAVERSALS)
def test_path_traversal_is_refused_on_every_path_parameter(kb_with_escape_hatches, path):
    kb = kb_with_escape_hatches
    with TestClient(create_app(Settings(kb=kb.root))) as client:
        got = client.get(f"/api/pages/{path}")
        assert got.status_code in (400, 404) and "SECRET" not in got.text
        assert got.json()["error"]["code"] in ("unsafe_path", "page_not_found", "not_found")
        page = client.get(f"/wiki/{path}")
        assert page.status_code in (400, 404) and "SECRET" not in page.text
        saved = client.put(f"/api/pages/{path}", json={"markdown": "---\ntitle: pwned\n---\nx\n"})
        assert saved.status_code in (400, 404, 405), saved.text
        static = client.get(f"/static/{path}")
        assert static.status_code in (400, 404) and "SECRET" not in static.text
    assert "TOP SECRET" in (kb.root.parent / (kb.root.name + "-outside") / "secret.md").read_text()
    assert not list(kb.root.parent.glob("**/pwned*"))
    assert all("pwned" not in p.read_text(errors="replace") for p in kb.root.parent.rglob("*.md") if p.is_file())


def test_edit_and_save_round_trip_updates_the_catalog(client, sample_kb):
    page = client.get("/api/pages/ops/deployment.md").json()
    edited = page["markdown"].replace("title: Deployment", "title: Deploying behind a proxy")
    edited = edited.replace("# Deployment", "# Deploying behind a proxy\n\nUse caddy or nginx.  # YAML-free line")
    edited = edited.replace("summary: ", "# a comment kept as typed\nsummary: ", 1)
    saved = client.put("/api/pages/ops/deployment.md", json={"markdown": edited, "version": page["version"]})
    assert saved.status_code == 200, saved.text
    assert saved.json()["title"] == "Deploying behind a proxy"
    on_disk = (sample_kb.wiki_dir / "ops/deployment.md").read_text()
    assert on_disk == edited.rstrip("\n") + "\n" and "# a comment kept as typed" in on_disk
    titles = [p["title"] for t in client.get("/api/index").json()["topics"] for p in t["pages"]]
    assert "Deploying behind a proxy" in titles and "Deployment" not in titles
    assert "Deploying behind a proxy" in sample_kb.master_index.read_text()
    # the navigator sees the change too
    client_events = client.post("/api/chat", json={"question": "caddy"}).text
    assert "ops/deployment.md" in client_events


def test_save_creates_a_new_article(client, sample_kb):
    text = "---\ntitle: Backups\nsummary: How to back up a KB.\ntopic: ops\n---\n# Backups\n\nCopy the folder.\n"
    saved = client.put("/api/pages/ops/backups.md", json={"markdown": text})
    assert saved.status_code == 201
    assert any(p["path"] == "ops/backups.md" for t in client.get("/api/index").json()["topics"] for p in t["pages"])


@pytest.mark.parametrize("markdown, fragment", [
    ("---\ntitle: [unclosed\n---\nbody", "malformed frontmatter"),
    ("---\nsummary: no title\n---\nbody", "needs a title"),
    ("no frontmatter at all", "needs YAML frontmatter"),
    ("---\ntitle: '   '\n---\nbody", "needs a title"),
    ("---\n- a list\n---\nbody", "mapping"),
    ("---\ntitle: &a x\nsummary: *a\n---\nbody", "aliases"),
])
def test_invalid_edits_are_refused_and_the_file_is_untouched(client, sample_kb, markdown, fragment):
    before = (sample_kb.wiki_dir / "ops/deployment.md").read_text()
    saved = client.put("/api/pages/ops/deployment.md", json={"markdown": markdown})
    assert saved.status_code == 422 and fragment in saved.json()["error"]["message"]
    assert (sample_kb.wiki_dir / "ops/deployment.md").read_text() == before


@pytest.mark.parametrize("path", ["master-index.md", "log.md", "ops/index.md"])
def test_generated_files_cannot_be_saved(client, path):
    saved = client.put(f"/api/pages/{path}", json={"markdown": "---\ntitle: x\n---\nx"})
    assert saved.status_code == 400 and saved.json()["error"]["code"] == "unsafe_path"


def test_a_stale_editor_gets_a_conflict(client, sample_kb):
    page = client.get("/api/pages/ops/deployment.md").json()
    (sample_kb.wiki_dir / "ops/deployment.md").write_text(page["markdown"] + "\nChanged elsewhere.\n")
    saved = client.put("/api/pages/ops/deployment.md", json={"markdown": page["markdown"], "version": page["version"]})
    assert saved.status_code == 409 and saved.json()["error"]["code"] == "conflict"
    assert "Changed elsewhere." in (sample_kb.wiki_dir / "ops/deployment.md").read_text()


@pytest.mark.parametrize("body, headers", [
    ("{oops", {"content-type": "application/json"}),
    ('{"markdown": 3}', {"content-type": "application/json"}),
    ('{"markdown": "---\\ntitle: x\\n---\\n"}', {"content-type": "text/plain"}),
])
def test_malformed_save_requests_are_bad_requests(client, body, headers):
    saved = client.put("/api/pages/ops/deployment.md", content=body, headers=headers)
    assert saved.status_code == 400 and saved.json()["error"]["code"] == "bad_request"


def test_hand_edits_on_disk_are_reindexed_by_the_watcher(sample_kb):
    settings = Settings(kb=sample_kb.root)
    app = create_app(settings)
    state = app.state.kaas
    watcher = WikiWatcher(sample_kb, 60, lambda: state.save_lock)

    async def scenario() -> tuple[bool, bool]:
        first = await watcher.check()  # remembers the current state
        write_page(sample_kb.wiki_dir, "ops/new.md", "Written in an editor", "By hand.", "# Written\n\ntext")
        second = await watcher.check()
        return first, second

    first, second = asyncio.run(scenario())
    assert (first, second) == (False, True)
    assert "Written in an editor" in sample_kb.master_index.read_text()
    with TestClient(app) as client:
        titles = [p["title"] for t in client.get("/api/index").json()["topics"] for p in t["pages"]]
    assert "Written in an editor" in titles


def test_health_and_ui_are_served(client):
    assert client.get("/healthz").json()["status"] == "ok"
    ui = client.get("/")
    assert ui.status_code == 200 and '<script type="module" src="/static/js/main.js">' in ui.text
    assert client.get("/static/js/markdown.js").status_code == 200
    assert client.get("/static/app.css").headers["content-type"].startswith("text/css")


def test_missing_wiki_is_reported_not_crashed(tmp_path):
    (tmp_path / "kb").mkdir()
    with TestClient(create_app(Settings(kb=tmp_path / "kb"))) as client:
        got = client.get("/api/index")
        assert got.status_code == 404 and got.json()["error"]["code"] == "no_wiki"
        assert client.get("/api/pages/a/b.md").json()["error"]["code"] == "no_wiki"
        assert client.get("/wiki/").status_code == 404


def test_kb_fixture_is_untouched_by_reads(client, sample_kb):
    before = {p: p.read_bytes() for p in sample_kb.wiki_dir.rglob("*.md")}
    client.get("/api/index")
    client.get("/api/pages/ops/deployment.md")
    client.get("/wiki/ops/deployment.md")
    assert {p: p.read_bytes() for p in sample_kb.wiki_dir.rglob("*.md")} == before


@pytest.mark.parametrize("raw_path", ["/api/pages/../../secret.md", "/wiki/../../secret.md",
                                      "/api/pages/ops/../../secret.md", "/wiki/ops/outside-link.md"])
def test_raw_dot_segments_that_no_client_normalized_are_refused(kb_with_escape_hatches, raw_path):
    """A hand-made request can carry ``..`` segments that httpx would have removed."""
    app = create_app(Settings(kb=kb_with_escape_hatches.root))
    sent: list[dict] = []

    async def call() -> None:
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
                 "scheme": "http", "path": raw_path, "raw_path": raw_path.encode(), "query_string": b"",
                 "headers": [(b"host", b"127.0.0.1")], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
                 "root_path": ""}
        messages = [{"type": "http.request", "body": b"", "more_body": False}]

        async def receive():
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        await app(scope, receive, send)

    asyncio.run(call())
    status = sent[0]["status"]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    assert status in (400, 404) and b"SECRET" not in body
