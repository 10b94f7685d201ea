"""A hand edit (or a slow disk) does not stall the answers being streamed.

After an article changes on disk, the wiki is re-indexed (by the server's watcher, or by
``kaas index``) and the next question needs a new keyword index, built from every page. That
work (re-indexing, loading the catalog, building the index, reading pages) runs in worker
threads: an answer already streaming to another client keeps its pace meanwhile. And the watcher
builds the new index itself, right after it re-indexed, so the first question after an edit
does not wait for it. The model's reply cache (a file read per call, a durable write per reply)
is read and written in worker threads too.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from kb_ai.config import Settings
from kb_ai.offline.lexical import LexicalIndex
from kb_ai.server.app import create_app
from kb_ai.store.kb import KnowledgeBase

from helpers import write_page
from server_fakes import FakeLLMServer, ServerThread, parse_sse

SLOW = 1.5   # seconds each slowed rebuild step takes (a big wiki on a slow disk)
GAP = 0.7    # the longest pause allowed between two tokens of the open stream (one every 0.1 s)
pytestmark = pytest.mark.slow  # each trial streams a paced answer for seconds

NEW_PAGE = ("ops/backups.md", "Backups", "How the wiki is backed up.", "# Backups\n\nSnapshots run nightly.")


class SlowRebuilds:
    """Once armed, every keyword index build and every re-index takes ``SLOW`` seconds longer
    (``time.sleep``: on the event loop it would stop every stream; in a thread it stops none)."""

    def __init__(self, monkeypatch):
        self.armed = threading.Event()
        self.spans: list[tuple[str, float, float]] = []
        self.builds = 0
        real_build = LexicalIndex.load_or_build.__func__
        real_reindex = KnowledgeBase.reindex

        def load_or_build(cls, *args, **kwargs):
            self.builds += 1
            self._maybe_slow("index")
            return real_build(cls, *args, **kwargs)

        def reindex(kb):
            self._maybe_slow("reindex")
            return real_reindex(kb)

        monkeypatch.setattr(LexicalIndex, "load_or_build", classmethod(load_or_build))
        monkeypatch.setattr(KnowledgeBase, "reindex", reindex)

    def _maybe_slow(self, what: str) -> None:
        if self.armed.is_set():
            started = time.monotonic()
            time.sleep(SLOW)
            self.spans.append((what, started, time.monotonic()))


def _stream_tokens(client: httpx.Client, question: str, times: list[float], events: list[str]) -> None:
    with client.stream("POST", "/api/chat", json={"question": question}) as response:
        for line in response.iter_lines():
            if line.startswith("event: "):
                events.append(line[len("event: "):])
                if line == "event: token":
                    times.append(time.monotonic())


def _open_stream(client: httpx.Client) -> tuple[threading.Thread, list[float], list[str]]:
    """A question answered in a thread, once its first tokens arrived: the thread, the arrival
    time of each token, and the event names."""
    times: list[float] = []
    events: list[str] = []
    thread = threading.Thread(target=_stream_tokens, daemon=True,
                              args=(client, "How is the server deployed?", times, events))
    thread.start()
    deadline = time.monotonic() + 20
    while len(times) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(times) >= 3, f"the open stream did not start: {events}"
    return thread, times, events


def _assert_kept_pace(times: list[float], events: list[str], spans: list[tuple[float, float]], what: str) -> None:
    assert events[-1] == "done", events
    assert any(times[0] < start and end < times[-1] for start, end in spans), \
        f"the {what} must happen while the stream is open"
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert max(gaps) < GAP, f"the open stream stalled for {max(gaps):.2f} s during the {what}"


@pytest.mark.parametrize("rebuilt_by", ["the next question", "the watcher"])
def test_an_open_stream_keeps_flowing_while_another_request_rebuilds_after_an_edit(sample_kb, monkeypatch, rebuilt_by):
    slow = SlowRebuilds(monkeypatch)
    watcher = rebuilt_by == "the watcher"
    with FakeLLMServer(token_delay=0.1) as llm:  # ~40 answer tokens, one every 0.1 s
        settings = Settings(kb=sample_kb.root, model="openai/fake", api_base=llm.api_base, api_key="k",
                            max_retries=0, timeout=30.0, cache=False)
        app = create_app(settings, mcp=False, watch_interval=0.1 if watcher else None)
        with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=60) as client, \
                httpx.Client(base_url=server.url, timeout=60) as other:
            warm = client.post("/api/chat", json={"question": "How are citations validated?"})
            assert "event: done" in warm.text, warm.text

            open_stream, times, events = _open_stream(client)

            slow.armed.set()
            write_page(sample_kb.wiki_dir, *NEW_PAGE)  # an edit made in a text editor
            if watcher:
                deadline = time.monotonic() + 20
                while not slow.spans and time.monotonic() < deadline:
                    time.sleep(0.02)
            else:
                KnowledgeBase(sample_kb.root).reindex()  # `kaas index` in a terminal (slow: 1.5 s)
                answer = other.post("/api/chat", json={"question": "How is the wiki backed up?"})
                assert "event: done" in answer.text, answer.text
            open_stream.join(timeout=30)

    index_spans = [(start, end) for what, start, end in slow.spans if what == "index"]
    assert index_spans, f"nothing rebuilt the keyword index after the edit: {slow.spans}"
    _assert_kept_pace(times, events, index_spans[:1], "keyword index rebuild")


def _edit_and_wait_for_the_watcher(app, wiki_dir) -> None:
    """Write a page as an editor would, and wait until the server's watcher re-indexed it (its
    count goes up once the caches are warmed, after the re-index)."""
    watcher = app.state.kaas.watcher
    seen = watcher.reindexed
    write_page(wiki_dir, *NEW_PAGE)
    deadline = time.monotonic() + 20
    while watcher.reindexed == seen and time.monotonic() < deadline:
        time.sleep(0.05)
    assert watcher.reindexed > seen, "the watcher did not re-index the hand edit"


def test_the_first_question_after_a_hand_edit_finds_the_index_already_built(sample_kb, monkeypatch):
    slow = SlowRebuilds(monkeypatch)  # never armed: counts builds only
    app = create_app(Settings(kb=sample_kb.root), mcp=False, watch_interval=0.1)
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        first = client.post("/api/chat", json={"question": "How are citations validated?"})
        assert "event: done" in first.text
        _edit_and_wait_for_the_watcher(app, sample_kb.wiki_dir)

        builds = slow.builds
        answer = client.post("/api/chat", json={"question": "How is the wiki backed up?"})
        events = dict(parse_sse(answer.text))
    assert [p["path"] for p in events["pages"]["pages"]][:1] == ["ops/backups.md"], events["pages"]
    assert slow.builds == builds, "the first question after the edit built the keyword index itself"


def _ask_while_another_streams(kb, armed: threading.Event, *, cache: bool) -> tuple[list[float], list[str]]:
    """With a model (a fake that streams a token every 0.1 s): open one answer stream, then arm the
    slowdown and ask a second question; the open stream's token times and event names."""
    with FakeLLMServer(token_delay=0.1) as llm:
        settings = Settings(kb=kb.root, model="openai/fake", api_base=llm.api_base, api_key="k",
                            max_retries=0, timeout=30.0, cache=cache)
        with ServerThread(create_app(settings, mcp=False)) as server, \
                httpx.Client(base_url=server.url, timeout=60) as client, \
                httpx.Client(base_url=server.url, timeout=60) as other:
            open_stream, times, events = _open_stream(client)
            armed.set()
            answer = other.post("/api/chat", json={"question": "How are citations validated?"})
            assert "event: done" in answer.text, answer.text
            open_stream.join(timeout=30)
    return times, events


def test_a_slow_disk_under_the_reply_cache_does_not_stall_other_streams(sample_kb, monkeypatch):
    from kb_ai.llm.cache import ResponseCache

    spans: list[tuple[float, float]] = []
    armed = threading.Event()

    def slowed(real):
        def call(*args, **kwargs):
            if armed.is_set():
                started = time.monotonic()
                time.sleep(SLOW)  # a reply cache on a busy disk: every read and fsync'd write waits
                spans.append((started, time.monotonic()))
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(ResponseCache, "get", slowed(ResponseCache.get))
    monkeypatch.setattr(ResponseCache, "put", slowed(ResponseCache.put))
    times, events = _ask_while_another_streams(sample_kb, armed, cache=True)

    assert len(spans) >= 2, "the second question neither read nor wrote the reply cache"
    _assert_kept_pace(times, events, spans, "reply cache work")


def test_a_slow_model_check_before_a_question_does_not_stall_other_streams(sample_kb, monkeypatch):
    """The check before any model call (``preflight``: for a litellm model, its first run imports
    litellm, seconds of work) runs in a worker thread, not on the loop that streams the others."""
    from kb_ai.llm.gateway import LLMGateway

    spans: list[tuple[float, float]] = []
    armed = threading.Event()
    real = LLMGateway.preflight

    def preflight(gateway):
        if armed.is_set():
            started = time.monotonic()
            time.sleep(SLOW)
            spans.append((started, time.monotonic()))
        return real(gateway)

    monkeypatch.setattr(LLMGateway, "preflight", preflight)
    times, events = _ask_while_another_streams(sample_kb, armed, cache=False)

    assert spans, "the second question did not check the model"
    _assert_kept_pace(times, events, spans, "model check")


def test_a_reader_who_sees_part_of_the_wiki_finds_his_index_built_after_a_hand_edit(tmp_path, monkeypatch):
    """Each kind of reader who may not read everything has an index of his own view; the watcher
    builds it again after a re-index too (not only the full catalog's), for the kinds that asked."""
    from access_twins import BOB, USERS_TOML
    from helpers import build_kb

    kb = build_kb(tmp_path, ("hr/pay.md", "Payroll", "Payroll notes.", "# Payroll\n\nLedger entries.",
                             {"topic": "hr", "access": ["payroll"]}), toml=USERS_TOML)
    slow = SlowRebuilds(monkeypatch)  # never armed: counts builds only
    app = create_app(Settings(kb=kb.root), mcp=False, watch_interval=0.1)
    headers = {"Authorization": f"Bearer {BOB}"}
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=60, headers=headers) as bob:
        first = bob.post("/api/chat", json={"question": "How are citations validated?"})
        assert "event: done" in first.text, first.text
        _edit_and_wait_for_the_watcher(app, kb.wiki_dir)

        builds = slow.builds
        answer = bob.post("/api/chat", json={"question": "How is the wiki backed up?"})
        events = dict(parse_sse(answer.text))
    assert [p["path"] for p in events["pages"]["pages"]][:1] == ["ops/backups.md"], events["pages"]
    assert slow.builds == builds, "bob's first question after the edit built his view's keyword index itself"
