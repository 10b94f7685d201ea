"""The top bar on a phone (issue 17): at 390 px wide, with the three tabs an admin gets (Chat,
Wiki, Sources), every element of the header lies inside the viewport and the mode badge is
shown whole (it was cut to "O…"), offline and with a model; at 320 px the header still fits and
the Ask button stays on screen. Real Chromium, real server."""

from __future__ import annotations

import pytest

from browser_support import PHONE, KaasServer, browser_page, shot

pytestmark = pytest.mark.slow  # drives a real browser

HEADER = """() => [...document.querySelectorAll('.topbar, .topbar *')]
  .filter((e) => e.getClientRects().length && getComputedStyle(e).visibility !== 'hidden')
  .map((e) => { const r = e.getBoundingClientRect();
    return { what: e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className + ' ' + (e.textContent || '').trim().slice(0, 20),
             left: r.left, right: r.right, cut: e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX === 'hidden' }; })"""


@pytest.mark.parametrize("env, short, full", [
    ({}, "Offline", "Offline mode"),
    ({"KAAS_MODEL": "openai/gpt-4o-mini", "KAAS_API_BASE": "http://127.0.0.1:9/v1", "KAAS_API_KEY": "k"},
     "gpt-4o-mini", "openai/gpt-4o-mini"),
], ids=["offline", "model"])
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_at_390_px_no_header_element_leaves_the_screen_and_the_badge_is_whole(browser, ui_kb, env, short, full, scheme):
    with KaasServer(ui_kb.root, env=env) as server, \
            browser_page(browser, viewport=PHONE, color_scheme=scheme) as (page, errors):
        page.goto(server.url + "/")
        page.wait_for_selector("body.ready")
        assert page.is_visible("[data-view-link=sources]")  # an admin: three tabs
        width = page.evaluate("window.innerWidth")
        assert width == 390
        for element in page.evaluate(HEADER):
            assert element["left"] >= 0 and element["right"] <= width, element
            assert not element["cut"], element  # nothing clipped or ellipsed
        badge = page.locator("#mode-badge")
        assert badge.inner_text() == short and full in badge.get_attribute("title")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        for tab in ("Chat", "Wiki", "Sources"):  # each tab whole and reachable
            assert page.locator(f".tabs a:text-is('{tab}')").is_visible()
        shot(page, f"topbar-390-{scheme}-{short}")
        page.set_viewport_size({"width": 320, "height": 640})  # the smallest phones: the same, and Ask on screen
        for element in page.evaluate(HEADER):
            assert element["left"] >= 0 and element["right"] <= 320, element
        assert page.evaluate("document.getElementById('send').getBoundingClientRect().right") <= 320
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        page.set_viewport_size({"width": 1280, "height": 820})  # wide: the long form again
        assert badge.inner_text() == full
        assert not errors, errors
