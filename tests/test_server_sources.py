"""The server's "Add sources" routes, the Compile stream, the wiki change stream and the
feedback route, through real HTTP (Starlette's TestClient) on real files: who may use them,
what they refuse (hostile names, huge bodies, local URLs, a reader's token), and what a reader
learns from the change stream (only pages they may read)."""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.testclient import TestClient

from kb_ai.compile.fetch import FetchPolicy
from kb_ai.config import Settings
from kb_ai.server import create_app
from kb_ai.server.events import ChangeFeed, wiki_events
from kb_ai.store.access import Reader
from kb_ai.store.kb import init_kb

from helpers import ADMIN, READER, USERS, build_kb, write_page
from web_fakes import FakeSite, article

OCTET = {"Content-Type": "application/octet-stream"}


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def kb(tmp_path):
    root = tmp_path / "kb"
    init_kb(root)
    (root / "kaas.toml").write_text(USERS)
    return root


def _client(root, **options):
    return TestClient(create_app(Settings(kb=root), mcp=False, **options))


def _auth(token):
    return {"Authorization": f"Bearer {token}"}


def _events(text: str) -> list[tuple[str, dict]]:
    found = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data = "message", None
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data = json.loads(line[5:].strip())
        if data is not None:
            found.append((name, data))
    return found


def test_an_admin_uploads_files_by_the_naming_rules(kb):
    with _client(kb) as client:
        ok = client.post("/api/sources/upload?name=notes.md", content=b"# Notes\n\nThe kettle.", headers={**OCTET, **_auth(ADMIN)})
        assert ok.status_code == 201 and ok.json()["path"] == "raw/notes.md"
        same = client.post("/api/sources/upload?name=notes.md", content=b"# Notes\n\nThe kettle.", headers={**OCTET, **_auth(ADMIN)})
        assert same.status_code == 200 and same.json()["status"] == "unchanged"
        other = client.post("/api/sources/upload?name=notes.md", content=b"# Notes\n\nOther.", headers={**OCTET, **_auth(ADMIN)})
        assert other.json()["path"] == "raw/notes-2.md"
        hostile = client.post("/api/sources/upload", params={"name": "../../../etc/cron.d/x.md", "folder": "a/../../b"},
                              content=b"x", headers={**OCTET, **_auth(ADMIN)})
        assert hostile.status_code == 400 and "inside raw/" in hostile.json()["error"]["message"]
        flat = client.post("/api/sources/upload", params={"name": "../../../etc/x<script>.md"},
                           content=b"x", headers={**OCTET, **_auth(ADMIN)})
        assert flat.json()["path"] == "raw/x<script>.md"  # one component of raw/; shown as text by the UI
        for name in ("", ".htaccess", "evil.exe", "..", "x.png"):
            refused = client.post("/api/sources/upload", params={"name": name}, content=b"x", headers={**OCTET, **_auth(ADMIN)})
            assert refused.status_code == 400, name
        form = client.post("/api/sources/upload?name=a.md", content=b"x",
                           headers={"Content-Type": "text/plain", **_auth(ADMIN)})
        assert form.status_code == 400  # what a cross-site form could send
    # (and raw/.kaas-added.json, the record of the sources added from outside: they include nothing)
    assert sorted(p.name for p in (kb / "raw").iterdir()) == [".kaas-added.json", "notes-2.md", "notes.md", "x<script>.md"]
    recorded = json.loads((kb / "raw" / ".kaas-added.json").read_text())["sources"]
    assert sorted(e["path"] for e in recorded) == ["raw/notes-2.md", "raw/notes.md", "raw/x<script>.md"]
    assert not (kb.parent / "etc").exists() and not (kb / "b").exists()


def test_a_huge_upload_is_refused_without_reading_it_all(kb, monkeypatch):
    from kb_ai.server import sources

    monkeypatch.setattr(sources, "MAX_UPLOAD_BYTES", 1000)
    with _client(kb) as client:
        declared = client.post("/api/sources/upload?name=big.md", content=b"a" * 5000, headers={**OCTET, **_auth(ADMIN)})
        assert declared.status_code == 400 and "larger than" in declared.json()["error"]["message"]

        def chunks():
            for _ in range(10):
                yield b"a" * 500

        streamed = client.post("/api/sources/upload?name=big.md", content=chunks(), headers={**OCTET, **_auth(ADMIN)})
        assert streamed.status_code == 400
    assert not (kb / "raw" / "big.md").exists()


def test_a_reader_may_not_add_or_compile(kb):
    with _client(kb) as client:
        for path, kwargs in (("/api/sources/upload?name=a.md", {"content": b"x", "headers": OCTET}),
                             ("/api/sources/urls", {"json": {"urls": ["http://example.com/"]}}),
                             ("/api/compile", {})):
            headers = {**kwargs.pop("headers", {}), **_auth(READER)}
            response = client.post(path, headers=headers, **kwargs)
            assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden", path
            assert client.post(path).status_code == 401
    assert list((kb / "raw").iterdir()) == []


def test_urls_are_fetched_for_an_admin_and_local_addresses_refused_by_default(kb):
    with FakeSite() as site:
        url = site.page("/warranty", article("Warranty", "Two years of cover for parts."))
        site.page("/admin", "<p>the admin console of another service</p>")
        with _client(kb) as client:  # the default policy: public addresses only
            refused = client.post("/api/sources/urls", json={"urls": [site.url + "/admin", "file:///etc/passwd"]},
                                  headers=_auth(ADMIN))
            results = refused.json()["results"]
            assert "local or private address" in results[0]["error"]["message"]
            assert "only http and https" in results[1]["error"]["message"]
            assert site.requests == []
            too_many = client.post("/api/sources/urls", json={"urls": ["http://x/"] * 11}, headers=_auth(ADMIN))
            assert too_many.status_code == 400
        app = create_app(Settings(kb=kb), mcp=False)
        app.state.kaas.fetch_policy = FetchPolicy.for_server(allow_private=True)  # KAAS_ADD_PRIVATE_URLS=1
        with TestClient(app) as client:
            fetched = client.post("/api/sources/urls", json={"urls": [url]}, headers=_auth(ADMIN)).json()["results"]
            assert fetched[0]["status"] == "added" and fetched[0]["title"] == "Warranty"
            assert fetched[0]["path"].startswith("raw/web/")


def test_compile_streams_its_progress_and_runs_one_at_a_time(kb):
    (kb / "raw" / "kettle.md").write_text("# Kettle\n\nThe kettle is in the kitchen.\n")
    (kb / "raw" / "sink.md").write_text("# Sink\n\nThe sink is under the window.\n")
    with _client(kb) as client:
        job = client.app.state.kaas.compile_job
        assert job._running.acquire(blocking=False)  # a compile is running
        busy = client.post("/api/compile", headers=_auth(ADMIN))
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "compile_running"
        job._running.release()
        response = client.post("/api/compile", headers=_auth(ADMIN))
        events = _events(response.text)
    names = [name for name, _ in events]
    assert names[-1] == "done" and "report" in names
    stages = [data for name, data in events if name == "stage"]
    assert {"ingest", "write"} <= {s["stage"] for s in stages}
    assert any(s["stage"] == "write" and s.get("done") and s["count"] == 2 for s in stages)
    report = dict(events)["report"]
    assert report["created"] == 2 and report["exit_code"] == 0
    assert (kb / "wiki" / "master-index.md").read_text().count(".md)") >= 2


def test_a_second_stream_follows_the_running_compile_from_where_it_stands(kb):
    """GET /api/compile: another tab's stream of the compile that runs. It first gets where each
    stage stands, then the same events as the stream that started it, to the same report; with
    no compile running, one ``idle`` event. A second start meanwhile is refused, saying so."""
    import time

    from kb_ai import faults

    for name in ("kettle", "sink", "oven"):
        (kb / "raw" / f"{name}.md").write_text(f"# {name.title()}\n\nThe {name} is in the kitchen.\n")
    with faults.at("compile.write.before_file", lambda: time.sleep(0.4)), _client(kb) as client:
        assert _events(client.get("/api/compile", headers=_auth(ADMIN)).text) == [("idle", {"message": "no compile is running"})]
        with client.stream("POST", "/api/compile", headers=_auth(ADMIN)) as started:
            lines = started.iter_lines()
            seen = []
            for line in lines:  # until the first article is being written
                seen.append(line)
                if line.startswith("data:") and '"stage": "write"' in line:
                    break
            busy = client.post("/api/compile", headers=_auth(ADMIN))
            assert busy.status_code == 409 and "already running" in busy.json()["error"]["message"]
            followed = _events(client.get("/api/compile", headers=_auth(ADMIN)).text)
            rest = _events("\n".join(seen + list(lines)))
    assert [n for n, _ in followed][-2:] == ["report", "done"] and [n for n, _ in rest][-2:] == ["report", "done"]
    assert dict(followed)["report"] == dict(rest)["report"] and dict(rest)["report"]["created"] == 3
    replayed = [d["stage"] for n, d in followed if n == "stage"]
    assert replayed[:2] == ["ingest", "dedup"]  # where the stages before stood, first
    assert replayed.count("ingest") == 1  # the latest of each stage, not all of its events again
    assert _events(client.get("/api/compile", headers=_auth(ADMIN)).text)[0][0] == "idle"


def test_a_reader_may_not_follow_a_compile(kb):
    with _client(kb) as client:
        refused = client.get("/api/compile", headers=_auth(READER))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"


def test_a_compile_held_by_the_cli_is_reported_in_the_stream(kb):
    from kb_ai.store.lock import CompileLock

    (kb / "raw" / "a.md").write_text("# A\n\ntext here")
    with CompileLock(kb / ".kaas"), _client(kb) as client:
        events = _events(client.post("/api/compile", headers=_auth(ADMIN)).text)
    assert ("error" in dict(events)) and "another kaas compile" in dict(events)["error"]["message"]


def test_feedback_is_validated_and_appended(kb):
    build_kb(kb, sample=True, toml=USERS)
    with _client(kb) as client:
        good = {"vote": "down", "question": "How much is the Solo plan?", "answer": "No idea.",
                "pages": ["ops/deployment.md"], "citations": [], "mode": "offline"}
        assert client.post("/api/feedback", json=good, headers=_auth(READER)).status_code == 201
        assert client.post("/api/feedback", json={**good, "vote": "up"}, headers=_auth(ADMIN)).status_code == 201
        for bad in ({**good, "vote": "meh"}, {**good, "question": ""},
                    {**good, "pages": ["../../etc/passwd"]}, {**good, "pages": ["a.md"] * 51}, [1, 2], "x"):
            assert client.post("/api/feedback", json=bad, headers=_auth(READER)).status_code == 400, bad
        for large in ({**good, "question": "q" * 5000}, {**good, "comment": "c" * 2001}, {**good, "answer": "a" * 2001}):
            refused = client.post("/api/feedback", json=large, headers=_auth(READER))
            assert refused.status_code == 413 and refused.json()["error"]["code"] == "vote_too_large", large
        huge = client.post("/api/feedback", content=b'{"vote": "up", "question": "' + b"a" * 70_000 + b'"}',
                           headers={"Content-Type": "application/json", **_auth(READER)})
        assert huge.status_code == 413 and huge.json()["error"]["code"] == "vote_too_large"
        assert client.post("/api/feedback", json=good).status_code == 401
    lines = (kb / ".kaas" / "feedback.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["vote"] for r in records] == ["down", "up"] and records[0]["user"] == "rita"
    assert records[0]["pages"] == ["ops/deployment.md"] and records[0]["question"] == good["question"]


def test_the_change_stream_tells_a_reader_only_about_pages_they_may_read(tmp_path):
    """Through the feed the watcher publishes to: a hidden page's change sends nothing."""
    kb = build_kb(tmp_path / "kb", ("hr/salaries.md", "Salaries", "Pay bands.", "# Salaries\n\nBand A.",
                                    {"access": ["hr"]}))
    reader = Reader("rita", frozenset({"staff"}))
    hr = Reader("hana", frozenset({"hr"}))

    async def scenario():
        feed = ChangeFeed()
        feed.bind(asyncio.get_running_loop())
        streams = {who.name: wiki_events(feed, kb, who) for who in (reader, hr)}
        for stream in streams.values():
            assert (await anext(stream)).event == "ready"
        pending = {name: asyncio.ensure_future(anext(stream)) for name, stream in streams.items()}
        feed.publish(["hr/salaries.md"])  # a hidden page changed
        await asyncio.sleep(0.2)
        assert pending["hana"].done() and json.loads(pending["hana"].result().data) == {"pages": ["hr/salaries.md"]}
        assert not pending["rita"].done()  # nothing at all for the reader who may not read it
        write_page(kb.wiki_dir, "ops/new.md", "New", "A new page.", "# New\n\nFresh.", topic="ops")
        kb.reindex()
        feed.publish(["hr/salaries.md", "ops/new.md"])
        rita = json.loads((await asyncio.wait_for(pending["rita"], 5)).data)
        assert rita == {"pages": ["ops/new.md"]}  # the hidden path is not in the batch she gets
        for stream in streams.values():
            await stream.aclose()

    asyncio.run(scenario())


def test_the_watcher_publishes_changed_pages(tmp_path):
    from kb_ai.server.watch import WikiWatcher

    kb = build_kb(tmp_path / "kb")
    seen: list[list[str]] = []

    async def scenario():
        lock = asyncio.Lock()
        watcher = WikiWatcher(kb, 0.05, lambda: lock, on_change=seen.append)
        await watcher.check()  # the baseline
        write_page(kb.wiki_dir, "ops/added.md", "Added", "New.", "# Added\n\nText.", topic="ops")
        (kb.wiki_dir / "ops" / "deployment.md").unlink()
        assert await watcher.check()

    asyncio.run(scenario())
    assert seen == [["ops/added.md", "ops/deployment.md"]]


def test_a_change_made_while_a_compile_holds_the_lock_is_announced_after_it(tmp_path):
    from kb_ai.server.watch import WikiWatcher
    from kb_ai.store.lock import CompileLock

    kb = build_kb(tmp_path / "kb")
    seen: list[list[str]] = []

    async def scenario():
        lock = asyncio.Lock()
        watcher = WikiWatcher(kb, 0.1, lambda: lock, on_change=seen.append)
        await watcher.check()
        held = CompileLock(kb.state_dir).acquire()
        write_page(kb.wiki_dir, "ops/added.md", "Added", "New.", "# Added\n\nText.", topic="ops")
        assert not await watcher.check()  # the compile holds the knowledge base
        held.release()
        for _ in range(50):
            if seen:
                break
            await asyncio.sleep(0.1)

    asyncio.run(scenario())
    assert seen == [["ops/added.md"]]


@pytest.mark.slow  # waits for real file events
def test_over_http_a_readers_change_stream_never_names_a_hidden_page(tmp_path):
    """The real server, its watcher on real file events, and two open /api/events streams: the
    reader who may not read hr/ gets nothing when only an hr page changes, and then a batch
    without it."""
    import threading
    import time

    import httpx

    from server_fakes import ServerThread

    users = USERS + '\n[users.hana]\ntoken = "hr-token-0123456789abcdef"\ngroups = ["hr"]\n'
    kb = build_kb(tmp_path / "kb", ("hr/salaries.md", "Salaries", "Pay bands.", "# Salaries\n\nBand A.",
                                    {"access": ["hr"]}), toml=users)
    app = create_app(Settings(kb=kb.root), mcp=False, watch_interval=0.1)
    received: dict[str, list[str]] = {"rita": [], "hana": []}

    def listen(name, token):
        try:
            with httpx.Client(timeout=httpx.Timeout(30, read=30)) as client:
                with client.stream("GET", server.url + "/api/events", headers=_auth(token)) as response:
                    for line in response.iter_lines():
                        received[name].append(line)
        except httpx.HTTPError:
            pass

    with ServerThread(app) as server:
        for name, token in (("rita", READER), ("hana", "hr-token-0123456789abcdef")):
            threading.Thread(target=listen, args=(name, token), daemon=True).start()
        deadline = time.monotonic() + 10
        while not all(any("ready" in line for line in lines) for lines in received.values()):
            assert time.monotonic() < deadline, received
            time.sleep(0.05)
        time.sleep(0.5)  # the watcher's baseline is taken
        secret = kb.wiki_dir / "hr" / "salaries.md"
        secret.write_text(secret.read_text().replace("Band A.", "Band A and the bonus of the CEO."))
        deadline = time.monotonic() + 20
        while not any("hr/salaries.md" in line for line in received["hana"]):
            assert time.monotonic() < deadline, received
            time.sleep(0.05)
        time.sleep(0.5)
        write_page(kb.wiki_dir, "ops/new.md", "New", "A new page.", "# New\n\nFresh.", topic="ops")
        deadline = time.monotonic() + 20
        while not any("ops/new.md" in line for line in received["rita"]):
            assert time.monotonic() < deadline, received
            time.sleep(0.05)
    rita = "\n".join(received["rita"])
    assert "salaries" not in rita.lower() and "hr/" not in rita
    assert [line for line in received["rita"] if line.startswith("data:")] == ["data: {}", 'data: {"pages": ["ops/new.md"]}']


def test_a_wrong_token_is_told_apart_from_a_missing_one(kb):
    with _client(kb) as client:
        missing = client.get("/api/index")
        wrong = client.get("/api/index", headers=_auth("not-a-token-of-anyone"))
    assert missing.status_code == wrong.status_code == 401
    assert "needs an API token" in missing.json()["error"]["message"]
    assert "that token was refused" in wrong.json()["error"]["message"]


def test_compile_from_the_ui_with_a_model(tmp_path):
    """The Compile button with a model configured: the worker thread's own event loop and
    gateway, its calls counted in the report."""
    from fixtures.compile.fake_model import compile_responder
    from helpers import llm_settings
    from llm_fakes import FakeOpenAI

    root = tmp_path / "kb"
    init_kb(root)
    (root / "raw" / "kettle.md").write_text("# Kettle\n\nThe kettle is in the kitchen, next to the sink.\n")
    with FakeOpenAI() as fake:
        fake.add(compile_responder, repeat=True)
        with TestClient(create_app(llm_settings(root), mcp=False)) as client:
            events = _events(client.post("/api/compile").text)
    report = dict(events)["report"]
    assert report["mode"] == "llm" and report["created"] == 1 and report["usage"]["llm_calls"] >= 2
    assert any(name == "stage" and data["stage"] == "write" for name, data in events)
