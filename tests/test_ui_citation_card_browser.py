"""Citations preview their passage in a card (issue 28 item 7): on hover, on keyboard focus and on
a tap (the first tap opens the card, its "Open page" opens the page), never as a native title
tooltip; the quote is text, never markup; Escape and a tap elsewhere close it. Opening the page
marks the whole passage, every block of a multi-block one (an admonition with a list). Real
Chromium at desktop width and 390 px, light and dark."""

from __future__ import annotations

import pytest

from browser_support import DESKTOP, PHONE, KaasServer, ask, browser_page, shot, wait_until

pytestmark = pytest.mark.slow  # drives a real browser

ADMONITION = ("> **Warning:** The purge command deletes every cached object of the bucket at once.\n>\n"
              "> - It cannot be undone, and the next requests go to the origin.\n"
              "> - Run it only outside peak hours.\n")
HOSTILE = 'The warmup option keeps <b>bold</b> & <img src=x onerror="window.pwnedCard = 1"> sockets primed.'
BODY = (f"# Cache\n\nHow the cache is cleared.\n\n## Purging\n\n{ADMONITION}\n## Warm-up\n\n{HOSTILE}\n\n"
        "## Other\n\nThe cache keeps objects for an hour.\n")
QUESTION = "what does the purge command delete?"


@pytest.fixture
def cache_kb(make_kb):
    return make_kb(("ops/cache.md", "Cache", "How the cache is cleared.", BODY), sample=False)


def _card(page) -> dict:
    return page.evaluate("""(() => { const c = document.getElementById('cite-card');
        const r = c.getBoundingClientRect();
        return { hidden: c.hidden, title: c.querySelector('.cite-card-title').textContent,
                 heading: c.querySelector('.cite-card-heading').textContent,
                 quote: c.querySelector('.cite-card-quote').textContent, left: r.left, right: r.right,
                 width: window.innerWidth, elements: c.querySelectorAll('.cite-card-quote *').length }; })()""")


def _marked(page) -> str:
    return page.evaluate("[...document.querySelectorAll('#panel-body mark.cited-passage')]"
                         ".map((m) => m.textContent).join(' ')")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_hover_and_focus_open_the_card_and_the_page_marks_the_whole_passage(browser, cache_kb, scheme):
    with KaasServer(cache_kb.root) as server, \
            browser_page(browser, viewport=DESKTOP, color_scheme=scheme) as (page, errors):
        page.goto(server.url + "/")
        page.wait_for_selector("body.ready")
        turn = ask(page, QUESTION)
        citation = turn.locator(".answer-body a.citation").first
        assert citation.get_attribute("title") is None  # no native tooltip
        assert page.is_hidden("#cite-card")
        citation.hover()
        page.wait_for_selector("#cite-card:not([hidden])")
        card = _card(page)
        assert card["title"] == "Cache" and card["heading"] == "Purging"
        assert "deletes every cached object" in card["quote"] and "outside peak hours" in card["quote"]
        assert citation.get_attribute("aria-describedby") == "cite-card"
        shot(page, f"citation-card-desktop-{scheme}")
        page.mouse.move(5, 700)  # away: the card closes
        wait_until(page, "document.getElementById('cite-card').hidden")

        # keyboard: focus opens it, Escape closes it and keeps the focus on the citation
        citation.focus()
        page.wait_for_selector("#cite-card:not([hidden])")
        page.keyboard.press("Escape")
        wait_until(page, "document.getElementById('cite-card').hidden")
        assert page.evaluate("document.activeElement.classList.contains('citation')")

        # "Open page" opens the page with all of the passage marked: the warning and both list items
        citation.hover()
        page.click("#cite-card .cite-card-open")
        page.wait_for_selector("#panel-body mark.cited-passage")
        marked = _marked(page)
        for part in ("Warning:", "deletes every cached object of the bucket at once.",
                     "It cannot be undone, and the next requests go to the origin.", "Run it only outside peak hours."):
            assert part in marked, marked
        assert "keeps objects for an hour" not in marked
        assert page.locator("#panel-body li mark.cited-passage").count() == 2
        shot(page, f"citation-passage-desktop-{scheme}")
        assert not errors, errors


def test_a_tap_opens_the_card_first_and_its_button_opens_the_page(browser, cache_kb):
    with KaasServer(cache_kb.root) as server, \
            browser_page(browser, viewport=PHONE, has_touch=True, is_mobile=True) as (page, errors):
        page.goto(server.url + "/")
        page.wait_for_selector("body.ready")
        turn = ask(page, "what does the warmup option keep primed?")
        citation = turn.locator(".answer-body a.citation").first
        citation.tap()
        page.wait_for_selector("#cite-card:not([hidden])")
        assert page.is_hidden("#panel")  # the first tap previews, it does not open the page
        card = _card(page)
        assert '<img src=x onerror="window.pwnedCard = 1">' in card["quote"], card["quote"]
        assert card["elements"] == 0 and page.evaluate("window.pwnedCard") is None  # text, never markup
        assert card["left"] >= 0 and card["right"] <= card["width"]  # inside the 390 px screen
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        shot(page, "citation-card-phone")
        page.tap(".question p")  # a tap elsewhere closes it
        wait_until(page, "document.getElementById('cite-card').hidden")
        citation.tap()
        page.wait_for_selector("#cite-card:not([hidden])")
        page.tap("#cite-card .cite-card-open")
        page.wait_for_selector("#panel-body .prose")
        assert page.is_visible("#panel") and page.is_hidden("#cite-card")
        assert not errors, errors
