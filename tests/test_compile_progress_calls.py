"""The compile's progress says how many model calls are in flight (the gateway counts the
requests the model is working on): on the command line's progress line and in the stage events
of the UI's compile stream, kept current while a stage waits on a slow model."""

from __future__ import annotations

import asyncio
import io
import json
import re
import time

import httpx
import respx
from starlette.testclient import TestClient

from kb_ai.compile.pipeline import run_compile
from kb_ai.compile.progress import Progress
from kb_ai.llm.config import GatewayConfig
from kb_ai.llm.gateway import LLMGateway
from kb_ai.server import create_app
from kb_ai.store.kb import init_kb

from helpers import llm_settings
from llm_fakes import API_BASE


def test_the_progress_line_shows_calls_in_flight():
    out = io.StringIO()
    progress = Progress(enabled=True, stream=out)
    flying = [0]
    progress.in_flight = lambda: flying[0]
    progress.start("write", 10)
    assert "in flight" not in out.getvalue()
    flying[0] = 16
    progress.advance("notes.md", step=10)  # the last unit: drawn whatever the redraw interval
    assert "(16 calls in flight)" in out.getvalue()


def test_the_gateway_counts_the_calls_the_model_is_working_on():
    gateway = LLMGateway(GatewayConfig(model="openai/fake", api_base="http://127.0.0.1:9/v1", api_key="k",
                                       concurrency=8, max_retries=0))
    seen: list[int] = []

    async def reply(request):
        seen.append(gateway.in_flight)
        await asyncio.sleep(0.05)
        return httpx.Response(200, json={"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                                      "finish_reason": "stop"}],
                                         "usage": {"prompt_tokens": 1, "completion_tokens": 1}})

    async def run() -> None:
        with respx.mock(using="httpx") as mock:
            mock.post("http://127.0.0.1:9/v1/chat/completions").mock(side_effect=reply)
            await asyncio.gather(*(gateway.complete([{"role": "user", "content": f"q{i}"}], purpose="t",
                                                    max_tokens=10) for i in range(5)))

    asyncio.run(run())
    assert max(seen) == 5 and gateway.in_flight == 0


def test_refresh_tells_a_change_of_the_calls_in_flight_between_units():
    """A stage waiting on a slow model does not advance; the line and the listener still learn
    how many calls are out."""
    out, events = io.StringIO(), []
    progress = Progress(enabled=True, stream=out, listener=events.append)
    flying = [0]
    progress.in_flight = lambda: flying[0]
    progress.start("plan", 8)
    flying[0] = 1
    time.sleep(0.11)  # past the redraw interval
    progress.refresh()
    assert events[-1] == {"stage": "plan", "count": 0, "total": 8, "in_flight": 1}
    assert out.getvalue().endswith("0/8 (1 call in flight) ")
    told = len(events)
    progress.refresh()  # nothing changed: the listener is not told again
    assert len(events) == told
    progress.done()
    assert events[-1]["done"] and events[-1]["in_flight"] == 0


def _slow_model(delay: float):
    """The compile fake of fixtures/compile, answering each call after ``delay`` seconds."""
    from fixtures.compile.fake_model import compile_responder

    async def reply(request):
        await asyncio.sleep(delay)
        return compile_responder(json.loads(request.content))

    mock = respx.mock(using="httpx", assert_all_called=False)
    mock.post(API_BASE + "/chat/completions").mock(side_effect=reply)
    return mock


def _six_sources(root) -> None:
    init_kb(root)
    for name in ("kettle", "teapot", "toaster", "fridge", "oven", "blender"):
        (root / "raw" / f"{name}.md").write_text(f"# {name.title()}\n\nThe {name} is in the kitchen, next to the sink.\n")


def test_the_cli_progress_line_shows_the_calls_a_slow_model_is_working_on(tmp_path):
    _six_sources(tmp_path)
    out = io.StringIO()
    with _slow_model(0.4):
        report = run_compile(llm_settings(tmp_path, concurrency=4), progress=Progress(enabled=True, stream=out))
    assert report.created and not report.failed
    shown = [int(n) for n in re.findall(r"\((\d+) calls? in flight\)", out.getvalue())]
    assert shown and max(shown) <= 4 and max(shown) >= 2  # several calls at once, never past the limit


def test_the_ui_compile_stream_carries_the_calls_in_flight(tmp_path):
    _six_sources(tmp_path)
    with _slow_model(0.4), TestClient(create_app(llm_settings(tmp_path, concurrency=4), mcp=False)) as client:
        response = client.post("/api/compile")
    stages = [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")
              and '"stage"' in line]
    flying = [s["in_flight"] for s in stages if not s.get("done")]
    assert max(flying) >= 2 and max(flying) <= 4
    assert all(s["in_flight"] == 0 for s in stages if s.get("done"))


def test_a_finished_stage_is_not_drawn_again_by_refresh():
    out = io.StringIO()
    progress = Progress(enabled=True, stream=out)
    progress.in_flight = lambda: 3
    progress.start("write", 2)
    progress.advance("a.md", step=2)
    progress.done()
    cleared = out.getvalue()
    progress.refresh()  # the next stage has not started: the cleared line stays cleared
    assert out.getvalue() == cleared and cleared.endswith("\r")
