"""The chat UI shows each further round of reading in the pages display ("round 2: ..."), in a
real headless Chromium against the real server (tests/browser_support.py)."""

from __future__ import annotations

import pytest

from browser_support import KaasServer, ask, browser_page
from test_multihop import COMPOSER, QUESTION, chain_kb

pytestmark = pytest.mark.slow  # drives a real browser


def test_the_pages_display_shows_round_two_and_why(browser, tmp_path):
    kb = chain_kb(tmp_path, toml="max_pages = 3\n")
    with KaasServer(kb.root) as server, browser_page(browser, timeout=15_000) as (page, errors):
        page.goto(server.url + "/")
        page.wait_for_selector("body.ready")
        turn = ask(page, QUESTION)
        turn.locator(".pages-read summary").click()
        rounds = turn.locator(".pages-read .round")
        assert rounds.count() == 1
        assert rounds.first.inner_text().startswith("round 2: ")
        assert "Orla Brandt" in rounds.first.inner_text() and "(1 page)" in rounds.first.inner_text()
        paths = [turn.locator(".pages-read li .path").nth(i).text_content()
                 for i in range(turn.locator(".pages-read li").count())]
        assert paths[-1] == COMPOSER
        assert not errors, errors
