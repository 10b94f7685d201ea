"""Driving the real UI in a real browser (Debian's ``chromium`` through Python playwright): the
server as ``kaas serve`` runs it, and small helpers for pages. The ``browser`` and ``ui_kb``
fixtures are in conftest.py. Set KAAS_UI_SCREENSHOTS=DIR to save screenshots of the UI there."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

CHROMIUM = os.environ.get("KAAS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
SCREENSHOTS = os.environ.get("KAAS_UI_SCREENSHOTS")


def browser_missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright; never `playwright install`)"
    if not Path(CHROMIUM).is_file():
        return f"Chromium not found at {CHROMIUM} (apt-get install -y chromium)"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class KaasServer:
    """``python -m kb_ai.server`` in a subprocess, the way ``kaas serve`` runs."""

    def __init__(self, kb: Path, env: dict[str, str] | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        clean = {k: v for k, v in os.environ.items() if not k.startswith("KAAS_")}
        self.log = kb / "server.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kb_ai.server", "--kb", str(kb), "--port", str(self.port)],
            env={**clean, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})},
            stdout=self.log.open("w"), stderr=subprocess.STDOUT,
        )

    def __enter__(self) -> "KaasServer":
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("kaas server exited:\n" + self.log.read_text())
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("kaas server did not start:\n" + self.log.read_text())

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def watch_errors(page) -> list[str]:
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
    page.on("console", lambda msg: errors.append(f"console: {msg.text}") if msg.type == "error" else None)
    return errors


DESKTOP = {"width": 1280, "height": 820}
PHONE = {"width": 390, "height": 844}


def open_tab(context, timeout: float = 10_000):
    """A new page (tab) of ``context`` with a default timeout (ms), and the list its page errors
    and console errors go to: ``(page, errors)``."""
    page = context.new_page()
    page.set_default_timeout(timeout)
    return page, watch_errors(page)


@contextmanager
def browser_page(browser, *, timeout: float = 10_000, viewport: dict | None = None, **options) -> Iterator[tuple]:
    """A fresh browser context (its own storage and cookies; ``viewport`` DESKTOP unless given,
    other playwright context options as keywords) with one page: yields ``(page, errors)`` as
    ``open_tab`` does, and closes the context afterwards, also when the test fails. More tabs of
    the same browser: ``open_tab(page.context)``."""
    context = browser.new_context(viewport=viewport or DESKTOP, **options)
    try:
        yield open_tab(context, timeout)
    finally:
        context.close()


def ask(page, question: str):
    """Ask ``question`` in the chat and wait (the page's default timeout) until its answer has
    ended (its usage line is shown); returns the answer's turn."""
    answered = page.locator(".turn .answer-meta .mode-pill").count()
    page.fill("#question", question)
    page.keyboard.press("Enter")
    page.locator(".turn .answer-meta .mode-pill").nth(answered).wait_for()
    return page.locator(".turn").nth(answered)


def wait_until(page, expression: str, timeout: float = 10.0) -> None:
    """Poll a JS expression (page.wait_for_function would need eval, which the UI's CSP forbids)."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {expression}")
        page.wait_for_timeout(50)


def shot(page, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"))
