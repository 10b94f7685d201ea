"""The request guard: bearer token on every /api route (and /wiki pages) when KAAS_API_TOKEN is
set, never from a cookie, nothing when it is not; loopback host names only; same-origin writes; security headers."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from kb_ai.config import Settings, load_settings
from kb_ai.server import create_app
from kb_ai.server.app import hosts_for
from kb_ai.store.access import OWNER
from kb_ai.store.users import UserDirectory

TOKEN = "s3cret-t0ken/+="
API_CALLS = [
    ("GET", "/api/index", None),
    ("GET", "/api/pages/ops/deployment.md", None),
    ("PUT", "/api/pages/ops/deployment.md", {"markdown": "---\ntitle: Changed\n---\nx"}),
    ("POST", "/api/chat", {"question": "deployment?"}),
    ("GET", "/api/nothing-here", None),
]


@pytest.fixture
def guarded(sample_kb) -> TestClient:
    with TestClient(create_app(Settings(kb=sample_kb.root, api_token=TOKEN))) as client:
        yield client


@pytest.mark.parametrize("method, url, body", API_CALLS)
@pytest.mark.parametrize("authorization", [None, "Bearer wrong", "Bearer ", f"Basic {TOKEN}", f"Bearer {TOKEN}x"])
def test_every_api_route_needs_the_token(guarded, sample_kb, method, url, body, authorization):
    headers = {"Authorization": authorization} if authorization else {}
    response = guarded.request(method, url, json=body, headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert "Changed" not in (sample_kb.wiki_dir / "ops/deployment.md").read_text()


@pytest.mark.parametrize("method, url, body", API_CALLS[:4])
def test_the_right_token_opens_every_api_route(guarded, method, url, body):
    response = guarded.request(method, url, json=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.text


def test_wiki_pages_take_the_header_and_never_a_cookie(guarded):
    assert guarded.get("/wiki/ops/deployment.md").status_code == 401
    assert guarded.get("/wiki/").status_code == 401
    assert guarded.get("/wiki/ops/deployment.md", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    # A cookie is sent to every port of the host: whatever it holds, it opens nothing.
    for value in ("s3cret-t0ken%2F%2B%3D", TOKEN):  # as earlier UIs wrote it (encodeURIComponent), and plain
        guarded.cookies.set("kaas_token", value)
        assert guarded.get("/wiki/ops/deployment.md").status_code == 401
        assert guarded.get("/api/index").status_code == 401


def test_a_wiki_page_opened_without_the_token_links_to_it_in_the_app(guarded):
    refused = guarded.get("/wiki/ops/deployment%20notes.md")
    assert refused.status_code == 401 and refused.headers["content-type"].startswith("text/html")
    assert 'href="/#/wiki/ops/deployment%20notes.md"' in refused.text and "Open this page in the app" in refused.text
    assert "Deployment" not in refused.text  # nothing of the page itself
    assert refused.headers["content-security-policy"].startswith("default-src 'self'")
    assert 'href="/#/wiki"' in guarded.get("/wiki/").text
    hostile = guarded.get('/wiki/"><script>alert(1)</script>.md')
    assert hostile.status_code == 401 and "<script>" not in hostile.text


def test_the_ui_shell_and_health_need_no_token(guarded):
    assert guarded.get("/").status_code == 200  # the shell holds no wiki content; it asks for the token
    assert guarded.get("/static/app.css").status_code == 200
    assert guarded.get("/healthz").json()["status"] == "ok"


def test_without_a_token_everything_is_open(sample_kb):
    with TestClient(create_app(Settings(kb=sample_kb.root))) as client:
        assert client.get("/api/index").status_code == 200
        assert client.get("/wiki/ops/deployment.md").status_code == 200


def test_token_comes_from_the_environment(sample_kb):
    settings = load_settings(sample_kb.root, env={"KAAS_API_TOKEN": TOKEN})
    with TestClient(create_app(settings)) as client:
        assert client.get("/api/index").status_code == 401


def test_token_comparison(tmp_path):
    users = UserDirectory(tmp_path, TOKEN)
    assert users.reader_for(TOKEN) == OWNER
    assert users.reader_for(None) is None
    assert users.reader_for(TOKEN[:-1]) is None
    assert users.reader_for("") is None


def test_loopback_server_answers_only_to_loopback_host_names(sample_kb):
    app = create_app(Settings(kb=sample_kb.root), allowed_hosts=hosts_for("127.0.0.1"))
    for host, status in [("127.0.0.1:8000", 200), ("localhost:8000", 200), ("[::1]:8000", 200),
                         ("evil.example", 421), ("evil.example:8000", 421)]:
        with TestClient(app, base_url=f"http://{host}") as client:
            assert client.get("/api/index").status_code == status, host
    assert hosts_for("0.0.0.0") is None


def test_writes_from_another_origin_are_refused(sample_kb):
    with TestClient(create_app(Settings(kb=sample_kb.root)), base_url="http://127.0.0.1:8000") as client:
        body = {"markdown": "---\ntitle: Changed\n---\nx"}
        for origin in ("https://evil.example", "null", "http://127.0.0.1:9999"):
            response = client.put("/api/pages/ops/deployment.md", json=body, headers={"Origin": origin})
            assert response.status_code == 403 and response.json()["error"]["code"] == "bad_origin"
            chat = client.post("/api/chat", json={"question": "x"}, headers={"Origin": origin})
            assert chat.status_code == 403
        ok = client.put("/api/pages/ops/deployment.md", json=body, headers={"Origin": "http://127.0.0.1:8000"})
        assert ok.status_code == 200
    assert "Changed" in (sample_kb.wiki_dir / "ops/deployment.md").read_text()


def test_security_headers_on_every_response(sample_kb):
    with TestClient(create_app(Settings(kb=sample_kb.root))) as client:
        for url in ("/", "/api/index", "/wiki/ops/deployment.md", "/static/app.css", "/api/missing"):
            headers = client.get(url).headers
            assert "script-src 'self'" in headers["content-security-policy"], url
            assert headers["x-content-type-options"] == "nosniff"
            assert headers["x-frame-options"] == "DENY"
        chat = client.post("/api/chat", json={"question": "deployment"})
        assert "default-src 'self'" in chat.headers["content-security-policy"]


def test_the_mcp_endpoint_is_behind_the_token_too(sample_kb):
    app = create_app(Settings(kb=sample_kb.root, api_token=TOKEN))
    with TestClient(app) as client:
        assert client.post("/mcp", json={}).status_code == 401
        authorized = client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                 headers={"Authorization": f"Bearer {TOKEN}", "Accept": "application/json, text/event-stream"})
        assert authorized.status_code != 401  # past the guard, the MCP transport answers
