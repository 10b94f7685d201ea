"""The editor (issue 28 item 8): a preview by the page view's renderer (side by side on a wide
screen, a Preview tab at 390 px), a state that says "Unsaved changes" and then "Saved", an in-app
dialog (never the browser's confirm) before leaving with unsaved changes, and the browser's own
warning when the tab is closed. Real Chromium, light and dark."""

from __future__ import annotations

import pytest

from browser_support import DESKTOP, PHONE, KaasServer, browser_page, shot, wait_until

pytestmark = pytest.mark.slow  # drives a real browser

EDIT = "#/edit/retrieval/catalog.md"


def _open_editor(page, url):
    page.goto(url + "/" + EDIT)
    page.wait_for_selector("textarea.editor-text")
    assert page.inner_text(".editor-state") == "No changes"


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_preview_saved_state_and_leave_guard_at_desktop(browser, ui_kb, scheme):
    native: list[str] = []
    with KaasServer(ui_kb.root) as server, \
            browser_page(browser, viewport=DESKTOP, color_scheme=scheme) as (page, errors):
        page.on("dialog", lambda d: (native.append(d.type), d.dismiss()))
        _open_editor(page, server.url)
        editor = page.locator("textarea.editor-text")
        assert page.is_visible(".editor-preview")  # side by side on a wide screen
        # the preview is the page view's HTML: the page's script never runs there either
        assert page.locator(".editor-preview h1").inner_text() == "The catalog"
        editor.fill(editor.input_value() + "\n## Preview check\n\nA *new* paragraph with [a link](citations.md).\n")
        assert page.inner_text(".editor-state") == "Unsaved changes"
        page.wait_for_selector(".editor-preview h2:has-text('Preview check')")
        assert page.locator(".editor-preview em").first.inner_text() == "new"
        assert page.locator(".editor-preview a:has-text('a link')").get_attribute("href").endswith("citations.md")
        assert page.evaluate("window.__pwned") is None
        shot(page, f"editor-desktop-{scheme}")

        # leaving with unsaved changes: an in-app dialog; "Keep editing" stays, nothing lost
        page.click("[data-view-link=chat]")
        page.wait_for_selector("dialog.confirm-dialog[open]")
        shot(page, f"editor-leave-dialog-{scheme}")
        page.click("dialog.confirm-dialog button:has-text('Keep editing')")
        wait_until(page, "location.hash === '#/edit/retrieval/catalog.md'")
        assert "Preview check" in editor.input_value() and page.is_visible("#view-wiki")

        # save: "Saved" is said, and the article shows the change
        editor.press("Control+s")
        page.wait_for_selector(".toast:has-text('Saved wiki/retrieval/catalog.md')")
        wait_until(page, "location.hash === '#/wiki/retrieval/catalog.md'")
        page.wait_for_selector(".article-body h2:has-text('Preview check')")
        assert "Preview check" in (ui_kb.wiki_dir / "retrieval/catalog.md").read_text()
        shot(page, f"editor-saved-{scheme}")

        # "Discard changes" leaves, and the file keeps what was saved
        page.click("a[data-action=edit]")
        page.locator("textarea.editor-text").fill("---\ntitle: The catalog\n---\nThrown away.")
        page.click("[data-view-link=chat]")
        page.click("dialog.confirm-dialog button:has-text('Discard changes')")
        page.wait_for_selector("#view-chat:not([hidden])")
        assert "Thrown away" not in (ui_kb.wiki_dir / "retrieval/catalog.md").read_text()
        assert native == [], native  # no native confirm or prompt anywhere on the way
        assert not errors, errors


def test_preview_tab_and_the_browser_warning_at_390_px(browser, ui_kb):
    with KaasServer(ui_kb.root) as server, browser_page(browser, viewport=PHONE) as (page, errors):
        _open_editor(page, server.url)
        assert page.is_hidden(".editor-preview")  # a narrow screen: Write, then Preview
        editor = page.locator("textarea.editor-text")
        editor.fill(editor.input_value() + "\n\nPhone preview line.\n")
        page.click(".editor-tabs button:has-text('Preview')")
        page.wait_for_selector(".editor-preview p:has-text('Phone preview line.')")
        assert page.is_hidden("textarea.editor-text")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        shot(page, "editor-phone-preview")
        page.click(".editor-tabs button:has-text('Write')")
        assert page.is_visible("textarea.editor-text")

        # closing the tab with unsaved changes: the browser's own warning (beforeunload)
        seen: list[str] = []
        page.on("dialog", lambda d: (seen.append(d.type), d.dismiss()))
        page.close(run_before_unload=True)  # the dialog is dismissed: the page stays open
        wait_until(page, "true")  # one round trip: the dialog event has arrived
        assert seen == ["beforeunload"], seen
        assert not errors, errors
