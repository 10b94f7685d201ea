"""Rendering a page costs a bounded time, whatever its text (red-team finding A2c).

Python-Markdown is quadratic on some shapes (runs of ``<a ``, setext ``=`` lines, lines of
``#``): 80 KB took over a minute per render, and every GET of ``/api/pages`` or ``/wiki``
rendered again, so a non-admin editor could freeze the server with one save. kaas cannot make
the library linear, so it renders in a worker process with a time limit (``RENDER_SECONDS``)
and shows a page that takes longer as plain text, remembered so the cost is paid once per
version. The shared text passes on the save path are covered by tests/test_linear_time.py.

Each test that could hang runs under a hard limit: SIGALRM in-process (Python-Markdown is pure
Python, so the alarm interrupts it), or a subprocess timeout for the HTTP server.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kb_ai.server import render
from kb_ai.server.render import render_markdown

HARD_LIMIT = 20  # seconds for one test's renders; main took over 40 s for one of these pages
QUADRATIC = {  # shapes Python-Markdown renders in quadratic time, each about 60 KB
    "open anchors": "<a " * 20_000,
    "setext lines": "a\n=\n" * 15_000,
    "hash lines": "#\n" * 30_000,
}


class _TooSlow(Exception):
    pass


@pytest.fixture
def hard_limit():
    def alarm(_signum, _frame):
        raise _TooSlow(f"rendering took over {HARD_LIMIT} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HARD_LIMIT)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def short_limit(monkeypatch):
    monkeypatch.setattr(render, "RENDER_SECONDS", 1.0, raising=False)
    return 1.0


def _timed(body: str, path: str = "ops/a.md"):
    started = time.monotonic()
    result = render_markdown(body, from_path=path, exists=lambda p: p == "ops/b.md")
    return result, time.monotonic() - started


@pytest.mark.slow  # real deadlines and time bounds: flaky on a loaded machine
@pytest.mark.parametrize("shape", sorted(QUADRATIC))
def test_a_page_too_slow_to_render_is_shown_as_plain_text_within_the_limit(shape, hard_limit, short_limit):
    render_markdown("# warm\n\nThe worker is started.")  # starting a worker is not a render's cost
    body = "# Page\n\n<script>alert(1)</script>\n\n" + QUADRATIC[shape] + "\n"
    result, seconds = _timed(body)
    assert seconds < short_limit + 3, f"{shape}: {seconds:.1f} s"
    if "Shown as plain text" in result.html:  # the usual outcome; a fast machine may render in time
        assert "takes longer than" in result.html and result.toc == []
    assert "<script>" not in result.html
    again, seconds = _timed(body)  # remembered: the next view does not pay the time again
    # (rendering again would take the whole limit; a cache hit takes milliseconds, even on a
    # machine shared with other jobs)
    assert seconds < short_limit and again.html == result.html


@pytest.mark.slow  # real deadlines and time bounds: flaky on a loaded machine
def test_rendering_goes_on_after_a_render_was_stopped(hard_limit, short_limit):
    slow, _ = _timed("<a " * 20_000 + "\n\nunique text 1")
    assert "Shown as plain text" in slow.html
    fine, seconds = _timed("# Title\n\nSee [b](b.md) and [c](c.md).\n\n## Part\n\ntext")
    assert seconds < short_limit + 3
    assert '<a class="wiki-link" href="/wiki/ops/b.md"' in fine.html
    assert '<a class="broken-link" href="/wiki/ops/c.md"' in fine.html
    assert fine.links == ["ops/b.md"] and fine.broken_links == ["ops/c.md"]
    assert [entry.id for entry in fine.toc] == ["h-title", "h-part"]


def test_a_hostile_page_saved_over_http_does_not_freeze_the_server(sample_kb):
    """Bob's save and every later view of the page stay within the limit (the whole server run
    is a subprocess with a timeout, so on code without the bound the test fails, not hangs)."""
    code = textwrap.dedent(f"""
        import json, time
        from starlette.testclient import TestClient
        from kb_ai.server import render
        from kb_ai.config import Settings
        from kb_ai.server import create_app
        render.RENDER_SECONDS = 1.0
        path = "/api/pages/ops/deployment.md"
        with TestClient(create_app(Settings(kb={str(sample_kb.root)!r}), mcp=False)) as client:
            page = client.get(path).json()
            # no summary: the save takes the lead sentence, past a heading of 20,000 spaces
            front = "".join(line for line in page["markdown"].splitlines(True) if not line.startswith("summary:"))
            hostile = front + "\\n#" + " " * 20000 + "x\\n\\nText.\\n\\n" + "<a " * 20000 + "\\n"
            times = []
            started = time.monotonic()
            saved = client.put(path, json={{"markdown": hostile, "version": page["version"]}})
            times.append(time.monotonic() - started)
            for route in (path, path, "/wiki/ops/deployment.md", "/healthz"):
                started = time.monotonic()
                got = client.get(route)
                times.append(time.monotonic() - started)
            data = client.get(path).json()
            print(json.dumps([saved.status_code, times, data["markdown"] == hostile, data["html"][:200]]))
    """)
    try:
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                             cwd=Path(__file__).parent)
    except subprocess.TimeoutExpired:
        pytest.fail("the server spent over 60 s on one saved page")
    assert run.returncode == 0, run.stderr[-2000:]
    status, times, kept, html = json.loads(run.stdout.strip().splitlines()[-1])
    assert status == 200 and kept
    assert max(times) < 10, times  # the limit (1 s) plus starting a worker on a busy machine
    assert "Shown as plain text" in html
