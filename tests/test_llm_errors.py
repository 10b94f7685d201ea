"""What a caller may do about a model error is said once, by the error class (``retryable``,
``fatal``, ``unanswered``, ``stops_compile``), and every caller asks it: no module keeps a list of
its own. The gateway takes its retry sleep and its clock from its constructor."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import httpx
import pytest

import kb_ai
from kb_ai import errors
from kb_ai.config import Settings
from kb_ai.errors import LLMError
from kb_ai.llm.gateway import GatewayConfig, LLMGateway, build_gateway
from kb_ai.llm.transports import transport_for
from kb_ai.store.kb import KnowledgeBase

from llm_fakes import API_BASE, MODEL, FakeOpenAI, error_response

MESSAGES = [{"role": "user", "content": "hi"}]
SRC = Path(kb_ai.__file__).resolve().parent


def llm_errors() -> dict[str, type[LLMError]]:
    return {cls.__name__: cls for cls in errors.error_classes() if issubclass(cls, LLMError)}


def test_each_model_error_says_what_a_caller_may_do():
    classes = llm_errors()
    assert {n for n, c in classes.items() if c.fatal} == {"UnknownModelError", "MissingApiKeyError", "LLMAuthError"}
    assert {n for n, c in classes.items() if c.unanswered} == {
        "LLMTimeoutError", "LLMDeadlineError", "LLMUnreachableError", "LLMModelDownError"}
    assert {n for n, c in classes.items() if c.retryable} == {
        "LLMTimeoutError", "LLMUnreachableError", "LLMRateLimitError", "LLMServerError"}
    stops = {n for n, c in classes.items() if c("x").stops_compile if n != "LLMReplyCutOff"}
    assert stops == {"UnknownModelError", "MissingApiKeyError", "LLMAuthError", "LLMUnreachableError",
                     "LLMModelDownError"}


def test_no_module_keeps_its_own_list_of_fatal_errors():
    """A second home for "fatal" (a tuple, list or set of these classes or codes) would drift
    again: it did, four times, with different members."""
    names = {"UnknownModelError", "MissingApiKeyError", "LLMAuthError", "LLMUnreachableError", "LLMTimeoutError"}
    codes = {"unknown_model", "missing_api_key", "llm_auth", "llm_unreachable", "llm_timeout"}
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                continue
            named = sum(isinstance(e, ast.Name) and e.id in names for e in node.elts)
            coded = sum(isinstance(e, ast.Constant) and e.value in codes for e in node.elts)
            if named >= 2 or coded >= 2:
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not offenders, offenders


async def test_a_rejected_key_stops_where_a_busy_server_is_retried():
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    gateway = LLMGateway(GatewayConfig(model=MODEL, api_base=API_BASE, api_key="k", max_retries=2), sleep=sleep)
    with FakeOpenAI() as fake:
        fake.fail(503, "busy", headers={"Retry-After": "7"})
        fake.reply("fine")
        assert await gateway.complete(MESSAGES, purpose="t", max_tokens=20) == "fine"
        assert slept == [7.0]  # waited through the sleep the gateway was given
        fake.add(error_response(401, "bad key"), repeat=True)
        with pytest.raises(LLMError) as caught:
            await gateway.complete(MESSAGES, purpose="t", max_tokens=20)
    assert caught.value.fatal and not caught.value.retryable
    assert fake.call_count == 3 and slept == [7.0]  # a fatal error is not retried


async def test_the_breaker_cools_down_on_the_gateway_clock():
    now = [1000.0]

    def refused(body):
        raise httpx.ConnectError("refused")

    gateway = LLMGateway(GatewayConfig(model=MODEL, api_base=API_BASE, api_key="k", max_retries=0,
                                       breaker_failures=1, breaker_cooldown=60), clock=lambda: now[0])
    with FakeOpenAI() as fake:
        fake.add(refused)
        fake.reply("back", repeat=True)
        with pytest.raises(LLMError) as first:
            await gateway.complete(MESSAGES, purpose="t", max_tokens=20)
        assert first.value.unanswered
        with pytest.raises(LLMError) as down:
            await gateway.complete(MESSAGES, purpose="t", max_tokens=20)
        assert "treated as down" in down.value.message and down.value.stops_compile
        now[0] += 61  # no real waiting: the cool-down is read from the clock the gateway was given
        assert await gateway.complete(MESSAGES, purpose="t", max_tokens=20) == "back"
    assert fake.call_count == 2


def test_build_gateway_is_the_settings_gateway_for_a_knowledge_base(tmp_path):
    settings = Settings(kb=tmp_path, model=MODEL, api_base=API_BASE, compile_model="openai/other", debug=True)
    kb = KnowledgeBase(tmp_path)
    asked = build_gateway(settings, kb)
    compiling = build_gateway(settings, kb, model=settings.effective_compile_model)
    assert asked.config.model == MODEL and compiling.config.model == "openai/other"
    assert asked.config.cache_dir == kb.state_dir / "cache" / "llm"
    assert asked.config.trace_file == kb.state_dir / "logs" / "llm-trace.jsonl"
    assert asked.transport.name == "openai-http"  # openai/<model> at an api_base
    assert transport_for(MODEL, api_base=API_BASE, api_key=None, timeout=1, direct_http=False).name == "litellm"
    assert transport_for("anthropic/claude", api_base=None, api_key=None, timeout=1, direct_http=True).name == "litellm"


def test_no_module_of_the_llm_package_is_a_monolith():
    """The gateway was 1,400 lines; each module now has one job."""
    for path in (SRC / "llm").rglob("*.py"):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        assert lines <= 500, f"{path.relative_to(SRC)} has {lines} lines"
    assert not re.search(r"SimpleNamespace", "".join(p.read_text() for p in (SRC / "llm").rglob("*.py")))
