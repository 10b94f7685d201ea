"""The chat list (issue 28 item 12): beside the conversation on a desktop, a drawer on a phone;
searchable by title, renamed in place (Enter keeps, Escape cancels), deleted with an Undo for a
few seconds; never the browser's prompt or confirm. No sideways scroll at 390 px. Real Chromium,
light and dark."""

from __future__ import annotations

import pytest

from browser_support import DESKTOP, PHONE, KaasServer, ask, browser_page, shot, wait_until

pytestmark = pytest.mark.slow  # drives a real browser

NO_SIDEWAYS = "document.documentElement.scrollWidth <= window.innerWidth"


def _titles(page) -> list[str]:
    return page.evaluate("[...document.querySelectorAll('#chat-items .chat-title')].map((e) => e.textContent)")


def _two_chats(page, url):
    page.goto(url + "/")
    page.wait_for_selector("body.ready")
    ask(page, "How does the navigator read the catalog?")
    page.click("#new-chat")
    ask(page, "How are citations validated?")
    wait_until(page, "document.querySelectorAll('#chat-items li[data-chat]').length === 2")


def _rename_delete_undo_search(page, open_list) -> None:
    native: list[str] = []
    page.on("dialog", lambda d: (native.append(d.type), d.dismiss()))
    # rename in place: Escape cancels, Enter keeps
    open_list()
    item = page.locator("#chat-items li", has_text="How does the navigator")
    item.hover()
    item.locator(".chat-rename").click()
    field = page.locator("#chat-items .chat-rename-input")
    field.fill("Not kept")
    field.press("Escape")
    assert "Not kept" not in _titles(page)
    item.hover()
    item.locator(".chat-rename").click()
    page.locator("#chat-items .chat-rename-input").fill("Catalog questions")
    page.keyboard.press("Enter")
    wait_until(page, "[...document.querySelectorAll('#chat-items .chat-title')]"
                     ".some((e) => e.textContent === 'Catalog questions')")
    assert "Catalog questions" in [c["title"] for c in page.evaluate("JSON.parse(localStorage.getItem('kaas-chats'))")]

    # search by title
    page.fill("#chat-search", "catalog q")
    wait_until(page, "document.querySelectorAll('#chat-items li[data-chat]').length === 1")
    assert _titles(page) == ["Catalog questions"]
    page.fill("#chat-search", "zzz")
    page.wait_for_selector("#chat-items .chat-none")
    page.fill("#chat-search", "")

    # open it, delete it (it was open: the view empties), then Undo brings it back, open again
    page.locator("#chat-items .chat-open", has_text="Catalog questions").click()
    wait_until(page, "document.querySelectorAll('.turn').length === 1")
    open_list()
    item = page.locator("#chat-items li", has_text="Catalog questions")
    item.hover()
    item.locator(".chat-delete").click()
    page.wait_for_selector(".toast:has-text('Deleted')")
    assert page.locator(".turn").count() == 0
    kept = page.evaluate("JSON.parse(localStorage.getItem('kaas-chats'))")
    assert "Catalog questions" not in [c["title"] for c in kept]
    page.click(".toast .toast-action:has-text('Undo')")
    wait_until(page, "document.querySelectorAll('#chat-items li[data-chat]').length === 2")
    wait_until(page, "document.querySelectorAll('.turn').length === 1")
    assert "Catalog questions" in [c["title"] for c in page.evaluate("JSON.parse(localStorage.getItem('kaas-chats'))")]

    # delete for good: after the undo time the toast is gone and so is the chat
    open_list()
    item = page.locator("#chat-items li", has_text="How are citations")
    item.hover()
    item.locator(".chat-delete").click()
    page.wait_for_selector(".toast:has-text('How are citations')")
    assert len(page.evaluate("JSON.parse(localStorage.getItem('kaas-chats'))")) == 1
    assert native == [], native


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_list_beside_the_conversation_at_desktop(browser, ui_kb, scheme):
    with KaasServer(ui_kb.root) as server, \
            browser_page(browser, viewport=DESKTOP, color_scheme=scheme) as (page, errors):
        _two_chats(page, server.url)
        box = page.evaluate("""(() => { const l = document.getElementById('chat-list').getBoundingClientRect();
            const c = document.getElementById('conversation').getBoundingClientRect();
            return { listRight: l.right, convLeft: c.left, listWidth: l.width }; })()""")
        assert box["listWidth"] > 150 and box["listRight"] <= box["convLeft"], box  # beside, not above
        assert page.is_hidden("#chats-toggle")
        assert page.locator("#chat-items li[aria-current=true]").inner_text().startswith("How are citations")
        shot(page, f"chat-list-desktop-{scheme}")
        _rename_delete_undo_search(page, lambda: None)
        assert page.evaluate(NO_SIDEWAYS)
        assert not errors, errors


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_list_is_a_drawer_at_390_px(browser, ui_kb, scheme):
    with KaasServer(ui_kb.root) as server, \
            browser_page(browser, viewport=PHONE, color_scheme=scheme) as (page, errors):
        _two_chats(page, server.url)
        assert page.evaluate(NO_SIDEWAYS)
        assert not page.evaluate("document.body.classList.contains('drawer-open')")
        assert page.evaluate("document.getElementById('chat-list').getBoundingClientRect().right <= 0")

        def open_drawer():
            if not page.evaluate("document.body.classList.contains('drawer-open')"):
                page.click("#chats-toggle")
            wait_until(page, "document.getElementById('chat-list').getBoundingClientRect().left >= 0")

        open_drawer()
        assert page.evaluate(NO_SIDEWAYS)
        assert page.evaluate("document.activeElement.id") == "chat-search"
        shot(page, f"chat-drawer-phone-{scheme}")
        page.keyboard.press("Escape")  # closes the drawer
        wait_until(page, "!document.body.classList.contains('drawer-open')")
        open_drawer()
        page.click("#chat-backdrop", position={"x": 370, "y": 400})  # a tap beside it closes it too
        wait_until(page, "!document.body.classList.contains('drawer-open')")
        _rename_delete_undo_search(page, open_drawer)
        assert page.evaluate(NO_SIDEWAYS)
        assert not errors, errors
