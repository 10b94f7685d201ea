"""An abstention in the browser (issue 15, item 2): when the answer stream carries an
``abstained`` event, the chat shows a calm "Not covered by this wiki" block, with the closest
pages as "Related, not an answer" links that look unlike citations and carry no numbers; in light
and dark mode, at 390 px, and again after a reload (the kept chat). Real Chromium, real server.

Since issue 26 the offline answerer abstains only when no page holds any informative word of the
question (then no page is related either); a question some page shares words with is answered
with a small "Weak keyword match" label, kept after a reload."""

from __future__ import annotations

import pytest

from browser_support import PHONE, KaasServer, ask, browser_page, shot, wait_until

pytestmark = pytest.mark.slow  # drives a real browser

NOT_COVERED = "Which volcano erupted on Mars in 1850?"  # no page holds any of its words
WEAK = "Which volcano erupted on Mars in the catalog of 1850?"  # no page says; the catalog pages share a word
COVERED = "How does the navigator read the catalog?"

STYLE = """(selector) => {
  const s = getComputedStyle(document.querySelector(selector));
  return { color: s.color, background: s.backgroundColor, decoration: s.textDecorationStyle,
           border: s.borderBottomStyle + ' ' + s.borderBottomColor };
}"""


def _luminance(css_colour: str) -> float:
    red, green, blue = (int(float(v)) for v in css_colour[css_colour.index("(") + 1:].rstrip(")").split(",")[:3])
    return (0.2126 * red + 0.7152 * green + 0.0722 * blue) / 255


def _check_not_covered(turn) -> None:
    block = turn.locator(".not-covered")
    assert block.is_visible()
    assert block.locator(".not-covered-title").inner_text() == "Not covered by this wiki"
    assert "does not cover this" in block.locator(".not-covered-message").inner_text()
    assert block.locator("a.related-link").count() == 0  # nothing matches: nothing is related
    # an abstention is no answer: no citation, no citation number, no Sources list, no Save
    assert turn.locator("a.citation, .cite-num").count() == 0
    assert turn.locator(".sources").is_hidden() and turn.locator(".save-answer").count() == 0
    # the words of the stream's text are not shown a second time as an answer
    assert "Related pages, not an answer:" not in turn.locator(".answer-body").inner_text()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_an_abstention_is_shown_as_not_covered_with_related_pages_not_citations(browser, ui_kb, scheme):
    with KaasServer(ui_kb.root) as server, browser_page(browser, color_scheme=scheme) as (page, errors):
        page.goto(server.url + "/")
        page.wait_for_selector("body.ready")
        turn = ask(page, NOT_COVERED)
        _check_not_covered(turn)
        shot(page, f"not-covered-{scheme}")

        # calm and readable: the block is neither an error nor a warning, its text stands out
        # from its background in both schemes
        block = page.evaluate(STYLE, ".turn .not-covered")
        title = page.evaluate(STYLE, ".turn .not-covered-title")
        error_bg = page.evaluate("getComputedStyle(document.documentElement).getPropertyValue('--error-bg')")
        warn_bg = page.evaluate("getComputedStyle(document.documentElement).getPropertyValue('--warn-bg')")
        assert block["background"] not in {error_bg.strip(), warn_bg.strip()}
        assert abs(_luminance(title["color"]) - _luminance(block["background"])) > 0.5, (title, block)
        assert (_luminance(block["background"]) < 0.3) == (scheme == "dark"), block

        # a question some page shares words with: answered, with the weak label; a covered one: no label
        weak = ask(page, WEAK)
        assert weak.locator(".not-covered").count() == 0 and weak.locator("a.citation .cite-num").count() >= 1
        assert weak.locator(".match-label").is_visible() and weak.locator(".match-label").inner_text() == "Weak keyword match"
        answer = ask(page, COVERED)
        assert answer.locator("a.citation .cite-num").count() >= 1 and answer.locator(".not-covered").count() == 0
        assert answer.locator(".match-label").is_hidden()

        # at 390 px the block fits the screen: nothing overflows sideways
        page.set_viewport_size(PHONE)
        box = page.evaluate("document.querySelector('.turn .not-covered').getBoundingClientRect().right")
        assert box <= PHONE["width"] and page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        shot(page, f"not-covered-{scheme}-390")

        # the kept chat shows it the same way after a reload
        page.reload()
        page.wait_for_selector("body.ready")
        wait_until(page, "document.querySelectorAll('.turn').length === 3")
        _check_not_covered(page.locator(".turn").first)
        assert page.locator(".turn").nth(1).locator(".match-label").is_visible()
        assert not errors, errors
