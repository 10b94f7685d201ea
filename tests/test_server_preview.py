"""``POST /api/render``: the editor's preview (issue 28 item 8). The HTML of the text sent, by the
page view's renderer and sanitizer; nothing written; only for a page the reader may read (an
admin: any article path); links resolved as the reader may know them."""

from __future__ import annotations

from test_access import BOB, OPS, client_for, kb  # noqa: F401  (the fixture and its users)
from test_server_pages import HOSTILE_BODY, client  # noqa: F401


def test_the_preview_is_the_sanitized_html_of_the_text_and_writes_nothing(client, sample_kb):  # noqa: F811
    before = (sample_kb.wiki_dir / "retrieval/citations.md").read_text()
    response = client.post("/api/render", json={"path": "retrieval/citations.md",
                                                "markdown": "---\ntitle: Citations\n---\n" + HOSTILE_BODY})
    assert response.status_code == 200, response.text
    html = response.json()["html"]
    assert "Hostile page" in html and "<script" not in html and "onerror" not in html and "javascript:" not in html
    assert (sample_kb.wiki_dir / "retrieval/citations.md").read_text() == before
    assert "nope.md" in " ".join(response.json()["broken_links"])
    # what the page view shows for the same text: one renderer
    assert client.get("/api/pages/retrieval/citations.md").json()["html"] == client.post(
        "/api/render", json={"path": "retrieval/citations.md", "markdown": before}).json()["html"]


def test_bad_preview_requests_are_clear_errors(client):  # noqa: F811
    assert client.post("/api/render", json={"markdown": "x"}).json()["error"]["code"] == "bad_request"
    broken = client.post("/api/render", json={"path": "retrieval/citations.md", "markdown": "---\ntitle: [\n---\nx"})
    assert broken.status_code >= 400 and "error" in broken.json()
    assert client.post("/api/render", json={"path": "../etc/passwd.md", "markdown": "x"}).status_code in (400, 404)
    assert client.post("/api/render", json={"path": "index.md", "markdown": "x"}).status_code in (400, 404)


def test_a_reader_previews_only_pages_they_may_read(kb):  # noqa: F811
    text = {"markdown": "---\ntitle: Mine\n---\n# Mine\n\nSee [bands](../hr/salaries.md)."}
    with client_for(kb, BOB) as bob, client_for(kb, OPS) as ops:
        assert bob.post("/api/render", json={"path": "hr/salaries.md", **text}).status_code == 404
        assert bob.post("/api/render", json={"path": "hr/brand-new.md", **text}).status_code == 404
        mine = bob.post("/api/render", json={"path": "ops/links.md", **text})
        assert mine.status_code == 200 and "hr/salaries.md" in " ".join(mine.json()["broken_links"])
        admin = ops.post("/api/render", json={"path": "ops/links.md", **text})
        assert admin.status_code == 200 and admin.json()["broken_links"] == []
        assert ops.post("/api/render", json={"path": "hr/brand-new.md", **text}).status_code == 200
        assert bob.post("/api/render", json={"path": "ops/links.md", **text},
                        headers={"Origin": "https://evil.example"}).status_code == 403
