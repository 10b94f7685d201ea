"""The compile's progress line says how many model calls are in flight (the gateway counts the
requests the model is working on)."""

from __future__ import annotations

import asyncio
import io

import respx
import httpx

from kb_ai.compile.progress import Progress
from kb_ai.llm.config import GatewayConfig
from kb_ai.llm.gateway import LLMGateway


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
