"""POST /api/chat: the SSE events of DESIGN.md in order, errors as events, multi-turn history,
and a client that goes away stops the answer (and the model stream under it)."""

from __future__ import annotations

import time

import httpx
import pytest
from starlette.testclient import TestClient

from kb_ai.config import Settings
from kb_ai.navigate.ask import AskService, build_service
from kb_ai.navigate.navigator import LexicalIndexCache
from kb_ai.server import create_app
from kb_ai.store.kb import KnowledgeBase

from helpers import llm_settings, page_refs
from llm_fakes import ANSWER, SELECT, FakeOpenAI
from server_fakes import FakeLLMServer, PacedNavigator, ServerThread, parse_sse

ORDER = ["rewrite", "pages", "token", "citations", "suggestions", "usage", "done"]


def offline_client(kb: KnowledgeBase, **kwargs) -> TestClient:
    return TestClient(create_app(Settings(kb=kb.root), **kwargs))


def paced_client(kb: KnowledgeBase, navigator: PacedNavigator) -> TestClient:
    settings = Settings(kb=kb.root)
    service = AskService(kb, settings, navigator)  # type: ignore[arg-type]
    return TestClient(create_app(settings, service=service))


def chat(client: TestClient, body: dict | str, **headers) -> tuple[httpx.Response, list[tuple[str, dict]]]:
    if isinstance(body, dict):
        response = client.post("/api/chat", json=body, headers=headers)
    else:
        response = client.post("/api/chat", content=body, headers={"content-type": "application/json", **headers})
    return response, parse_sse(response.text)


def assert_in_order(names: list[str]) -> None:
    """Event names follow DESIGN.md's order (notices may come anywhere, tokens repeat)."""
    ranks = [ORDER.index(n) for n in names if n != "notice"]
    assert ranks == sorted(ranks), names


def test_offline_answer_streams_every_event_in_order(sample_kb):
    with offline_client(sample_kb) as client:
        response, events = chat(client, {"question": "How are citations validated?", "history": [],
                                         "rewrite": False, "suggest": True})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    names = [n for n, _ in events]
    assert_in_order(names)
    assert names[-1] == "done" and "rewrite" not in names
    assert {"pages", "token", "citations", "suggestions", "usage"} <= set(names)
    data = dict(events)
    assert data["pages"]["pages"][0]["path"] == "retrieval/citations.md"
    assert {"path": "retrieval/citations.md", "title": "Citations"} in page_refs(data["citations"]["citations"])
    assert data["usage"]["mode"] == "offline" and data["usage"]["llm_calls"] == 0
    answer = "".join(d["text"] for n, d in events if n == "token")
    # issue 28 item 9: the mode is usage.mode, never a line of the answer's text
    assert "Offline mode" not in answer and "(retrieval/citations.md)" in answer


def test_rewrite_runs_only_when_asked_and_comes_first(sample_kb):
    navigator = PacedNavigator(tokens=3)
    with paced_client(sample_kb, navigator) as client:
        _, events = chat(client, {"question": "and the catalog?", "rewrite": True,
                                  "history": [{"role": "user", "content": "What is a citation?"},
                                              {"role": "assistant", "content": "A link to a page read."}]})
    names = [n for n, _ in events]
    assert names[0] == "rewrite" and names[-1] == "done" and "suggestions" not in names
    assert_in_order(names)
    assert dict(events)["rewrite"] == {"query": "standalone: and the catalog?"}
    assert navigator.questions == ["standalone: and the catalog?"]
    assert [(t.role, t.content) for t in navigator.histories[0]] == [
        ("user", "What is a citation?"), ("assistant", "A link to a page read.")]


@pytest.mark.parametrize("body, fragment", [
    ("{not json", "not valid JSON"),
    ('["a list"]', "JSON object"),
    ({"question": 42}, "'question' must be a string"),
    ({"question": "ok", "history": "nope"}, "'history'"),
    ({"question": "ok", "history": [{"role": "system", "content": "x"}]}, "history item 1"),
    ({"question": "ok", "rewrite": "yes"}, "'rewrite'"),
    ({"question": "ok", "max_pages": 0}, "'max_pages'"),
])
def test_bad_input_is_an_error_event(sample_kb, body, fragment):
    with offline_client(sample_kb) as client:
        response, events = chat(client, body)
    assert response.status_code == 400  # and the body is still the event stream, with the error
    assert response.headers["content-type"].startswith("text/event-stream")
    assert [n for n, _ in events] == ["error"]
    assert events[0][1]["code"] == "bad_request" and fragment in events[0][1]["message"]


def test_wrong_content_type_is_refused_before_any_work(sample_kb):
    with offline_client(sample_kb) as client:
        response = client.post("/api/chat", content='{"question": "hi"}', headers={"content-type": "text/plain"})
    events = parse_sse(response.text)
    assert events == [("error", {"code": "bad_request", "message": "send the request as JSON (Content-Type: application/json)"})]


def test_empty_question_empty_catalog_and_missing_wiki_are_error_events(tmp_path, sample_kb):
    with offline_client(sample_kb) as client:
        _, events = chat(client, {"question": "   "})
    assert events[-1][0] == "error" and events[-1][1]["code"] == "kaas_error"

    (tmp_path / "empty" / "wiki").mkdir(parents=True)
    empty = KnowledgeBase(tmp_path / "empty")
    empty.reindex()
    with offline_client(empty) as client:
        _, events = chat(client, {"question": "anything?"})
    assert [n for n, _ in events] == ["usage", "error"]
    assert events[-1][1]["code"] == "empty_catalog"

    (tmp_path / "nowiki").mkdir()
    with offline_client(KnowledgeBase(tmp_path / "nowiki")) as client:
        _, events = chat(client, {"question": "anything?"})
    assert events[-1][1]["code"] == "no_wiki"


def test_a_bug_in_the_pipeline_is_an_internal_error_event_not_a_broken_stream(sample_kb):
    class Broken(PacedNavigator):
        async def select(self, *args, **kwargs):
            raise RuntimeError("boom")

    with paced_client(sample_kb, Broken()) as client:
        response, events = chat(client, {"question": "anything?"})
    assert response.status_code == 200
    assert events == [("error", {"code": "internal_error", "message": "the server failed while answering; see its log"})]


def test_llm_answer_through_the_real_gateway(sample_kb):
    settings = llm_settings(sample_kb.root)
    with FakeOpenAI() as fake, TestClient(create_app(settings)) as client:
        fake.reply_json({"paths": ["retrieval/citations.md"]}, when=SELECT)
        fake.reply_stream(["Only pages read ", "count: ", "[Citations](retrieval/citations.md) ",
                           "and not [Deployment](ops/deployment.md)."], when=ANSWER)
        _, events = chat(client, {"question": "How are citations validated?"})
    names = [n for n, _ in events]
    assert_in_order(names)
    assert names.count("token") == 4 and names[-1] == "done"
    data = dict(events)
    assert page_refs(data["citations"]["citations"]) == [{"path": "retrieval/citations.md", "title": "Citations"}]
    assert data["citations"]["invalid"] == ["ops/deployment.md"]
    assert data["usage"]["mode"] == "llm" and data["usage"]["llm_calls"] == 2
    assert any("not valid citations" in d["message"] for n, d in events if n == "notice")


def test_client_disconnect_closes_the_answer_stream(sample_kb):
    navigator = PacedNavigator(tokens=400, token_delay=0.01)
    with paced_client(sample_kb, navigator) as client:
        with client.stream("POST", "/api/chat", json={"question": "long answer please"}) as response:
            seen = 0
            for line in response.iter_lines():
                if line == "event: token":
                    seen += 1
                    if seen == 3:
                        break
        deadline = time.monotonic() + 3
        while navigator.streams_closed_early == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        sent = navigator.tokens_sent
        time.sleep(0.2)
    assert navigator.streams_closed_early == 1 and navigator.streams_finished == 0
    assert navigator.tokens_sent == sent < 50  # nothing more was produced after the close


def test_disconnect_stops_the_model_stream_over_real_http(sample_kb):
    """Real uvicorn, real litellm, a real (loopback) model server: when the browser goes away,
    the model's HTTP stream is closed too."""
    with FakeLLMServer(token_delay=0.05) as llm:
        settings = llm_settings(sample_kb, model="openai/fake", api_base=llm.api_base, timeout=10.0)
        with ServerThread(create_app(settings)) as server:
            with httpx.Client(base_url=server.url, timeout=30) as client:
                with client.stream("POST", "/api/chat", json={"question": "How are citations validated?"}) as response:
                    tokens = 0
                    for line in response.iter_lines():
                        if line == "event: token":
                            tokens += 1
                            if tokens == 3:
                                break
            deadline = time.monotonic() + 5
            while llm.stats.streams_abandoned == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
    assert llm.stats.streams_started == 1
    assert llm.stats.streams_abandoned == 1 and llm.stats.streams_completed == 0
    assert llm.stats.tokens_sent < 20


def test_many_concurrent_streams_all_complete(sample_kb):
    navigator = PacedNavigator(tokens=10, token_delay=0.005)

    async def run() -> list[list[str]]:
        import asyncio

        settings = Settings(kb=sample_kb.root)
        app = create_app(settings, service=AskService(sample_kb, settings, navigator))  # type: ignore[arg-type]
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            async def one(i: int) -> list[str]:
                response = await client.post("/api/chat", json={"question": f"question {i}"})
                return [n for n, _ in parse_sse(response.text)]
            return await asyncio.gather(*(one(i) for i in range(40)))

    import asyncio

    results = asyncio.run(run())
    assert all(names[-1] == "done" and names.count("token") == 11 for names in results)


def test_service_is_built_from_settings_when_not_given(sample_kb):
    app = create_app(Settings(kb=sample_kb.root))
    assert app.state.kaas.mode == "offline"
    assert isinstance(build_service(Settings(kb=sample_kb.root)).navigator.lexical, LexicalIndexCache)
