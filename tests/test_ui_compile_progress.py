"""The Sources view's compile progress, in a real browser: while a slow model works, each stage's
row says how many model calls are in flight; a finished stage shows its tick instead."""

from __future__ import annotations

import asyncio

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from browser_support import KaasServer, browser_page
from server_fakes import ServerThread

pytestmark = pytest.mark.slow


def _slow_compile_model(delay: float) -> ServerThread:
    """An OpenAI-compatible server answering the compile prompts (fixtures/compile) after ``delay``."""
    from fixtures.compile.fake_model import compile_responder

    async def chat(request: Request) -> Response:
        body = await request.json()
        await asyncio.sleep(delay)
        reply = compile_responder(body)
        return Response(reply.content, status_code=reply.status_code, media_type="application/json")

    return ServerThread(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]))


def test_the_compile_progress_shows_the_calls_in_flight(browser, ui_kb):
    ui_kb.raw_dir.mkdir(parents=True, exist_ok=True)
    for name in ("kettle", "teapot", "toaster", "fridge", "oven", "blender"):
        (ui_kb.raw_dir / f"{name}.md").write_text(f"# {name.title()}\n\nThe {name} is in the kitchen, next to the sink.\n")
    with _slow_compile_model(0.8) as model, KaasServer(ui_kb.root, env={
        "KAAS_MODEL": "openai/fake-model", "KAAS_API_BASE": f"{model.url}/v1", "KAAS_API_KEY": "k",
        "KAAS_CACHE": "false", "KAAS_MAX_RETRIES": "0", "KAAS_CONCURRENCY": "3",
    }) as server, browser_page(browser, timeout=60_000) as (page, errors):
        page.goto(server.url + "/#/sources")
        page.wait_for_selector("#compile-start:visible")
        page.click("#compile-start")
        seen: set[str] = set()
        while not page.locator(".compile-done").count() and not page.locator("#compile-progress .error").count():
            seen.update(page.locator(".compile-progress .stage-count").all_inner_texts())
            page.wait_for_timeout(100)
        assert not page.locator("#compile-progress .error").count(), page.inner_text("#compile-progress")
        flying = [text for text in seen if "in flight" in text]
        assert flying, seen
        counts = {int(text.split("·")[1].split()[0]) for text in flying}
        assert max(counts) <= 3 and any(text.startswith(("0/", "1/", "2/", "3/", "4/", "5/")) for text in flying)
        finished = page.locator(".compile-progress .stage.done .stage-count").all_inner_texts()
        assert finished and all(text.endswith("✓") and "in flight" not in text for text in finished)
        assert not errors, errors
