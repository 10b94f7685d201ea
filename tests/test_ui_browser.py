"""End to end in a real headless Chromium (Debian's ``chromium`` driven by Python playwright):
the real server (``python -m kb_ai.server``, uvicorn) on a free loopback port, on a temporary
wiki. Offline: ask, read the answer, open a citation in the side panel, follow a suggestion, edit
an article and see the change. With a model (a fake OpenAI-compatible server on loopback that
streams slowly): watch the answer stream in, stop an answer and see the model stream stopped.

Skips when Chromium or playwright is missing, except under CI=true, where that is a failure.
Set KAAS_UI_SCREENSHOTS=DIR to save screenshots of the UI there.
"""

from __future__ import annotations

import time

import frontmatter
import httpx
import pytest

from browser_support import KaasServer, ask, browser_page, shot, wait_until
from helpers import write_page
from server_fakes import FakeLLMServer

pytestmark = pytest.mark.slow  # drives a real browser


def test_offline_chat_citation_panel_and_hand_edit(browser, ui_kb):
    # a page of the same topic folder that the question does not read: offline follow-ups come
    # from the cited pages' folders, never from an unrelated keyword match elsewhere
    write_page(ui_kb.wiki_dir, "retrieval/topic-indexes.md", "Topic indexes", "One index per topic folder.",
               "# Topic indexes\n\nEach topic folder has an index page listing its articles.\n")
    ui_kb.reindex()
    with KaasServer(ui_kb.root) as server, browser_page(browser) as (page, errors):
        page.goto(server.url + "/")
        page.wait_for_selector("body.ready")
        assert page.inner_text("#mode-badge") == "Offline mode"
        assert page.is_visible("#offline-note")

        # ask: the answer arrives, with the pages read and citations
        turn = ask(page, "How does the navigator read the catalog?")
        assert turn.locator(".mode-pill").inner_text() == "Offline answer"
        # the mode is the answer's badge, never a line of its text (issue 28 item 9)
        assert "Offline mode" not in turn.locator(".answer-body").inner_text()
        assert turn.locator(".pages-read summary").inner_text().startswith("Read ")
        citation = turn.locator(".answer-body a.citation").first
        cited_title = turn.locator(".sources li a").first.inner_text()
        assert turn.locator(".sources li").count() >= 1

        # a citation opens the article beside the answer; Esc closes it
        citation.click()
        page.wait_for_selector("#panel-body .prose")
        assert page.is_visible("#panel")
        assert page.inner_text("#panel-title") == cited_title
        assert len(page.inner_text("#panel-body")) > 40
        shot(page, "chat-panel")
        # Escape closes the citation's preview card first (the clicked citation has focus and the
        # pointer), then the panel
        page.keyboard.press("Escape")
        page.wait_for_selector("#cite-card", state="hidden")
        if page.is_visible("#panel"):
            page.keyboard.press("Escape")
        page.wait_for_selector("#panel", state="hidden")

        # file the answer into wiki/answers/ (navigation only)
        turn.locator("button.save-answer").click()
        page.wait_for_selector(".turn a.saved-answer")
        saved_path = turn.locator("a.saved-answer").get_attribute("data-path")
        assert saved_path.startswith("answers/") and (ui_kb.wiki_dir / saved_path).is_file()
        assert "kind: answer" in (ui_kb.wiki_dir / saved_path).read_text()
        # the UI sends every page read for the answer, not only those cited: the saved copy may
        # be read only by those who may read all of them
        read_paths = [turn.locator(".pages-read li .path").nth(i).text_content()
                      for i in range(turn.locator(".pages-read li").count())]
        assert read_paths and frontmatter.load(ui_kb.wiki_dir / saved_path)["read"] == read_paths

        # a suggested follow-up is a second turn of the same conversation
        turn.locator(".suggestions .chip").first.click()
        wait_until(page, "document.querySelectorAll('.turn .answer-meta .mode-pill').length === 2")

        # the wiki browser: tree by topic, article with a table of contents, links between articles
        page.click("[data-view-link=wiki]")
        page.click("#wiki-tree a:text-is('The catalog')")  # (the saved answer, now listed too, has "the catalog" in its title)
        page.wait_for_selector(".wiki-article .article-body h1")
        assert page.locator(".toc-side li").count() == 2
        assert page.evaluate("window.__pwned") is None  # the article's script never ran
        page.click(".article-body a.wiki-link:has-text('Citations')")
        wait_until(page, "location.hash === '#/wiki/retrieval/citations.md'")
        page.wait_for_selector(".wiki-article h1:has-text('Citations')")

        # edit by hand, save with the keyboard, see the change everywhere
        page.click("a[data-action=edit]")
        editor = page.locator("textarea.editor-text")
        text = editor.input_value()
        assert text.startswith("---\ntitle: Citations")
        editor.fill(text.replace("title: Citations", "title: Citing pages").replace(
            "# Citations", "# Citing pages\n\nEdited in the browser."))
        editor.press("Control+s")
        wait_until(page, "location.hash === '#/wiki/retrieval/citations.md'")
        page.wait_for_selector(".article-body:has-text('Edited in the browser.')")
        assert page.locator("#wiki-tree a:has-text('Citing pages')").count() == 1
        assert "title: Citing pages" in (ui_kb.wiki_dir / "retrieval/citations.md").read_text()
        assert "Citing pages" in ui_kb.master_index.read_text()

        # an invalid edit is refused with a message, and nothing is written
        page.click("a[data-action=edit]")
        page.locator("textarea.editor-text").fill("---\nsummary: no title\n---\nbody")
        page.click("form button.primary:has-text('Save')")
        page.wait_for_selector(".editor-status.error")
        assert "needs a title" in page.inner_text(".editor-status")
        assert "title: Citing pages" in (ui_kb.wiki_dir / "retrieval/citations.md").read_text()
        page.click("[data-view-link=chat]")  # unsaved: the in-app dialog asks first (issue 28 item 8)
        page.click("dialog.confirm-dialog button:has-text('Discard changes')")
        page.wait_for_selector("#view-chat:not([hidden])")

        # phone width: nothing overflows sideways, the panel covers the screen
        page.set_viewport_size({"width": 390, "height": 844})
        page.locator(".turn .answer-body a.citation").first.click()
        page.wait_for_selector("#panel-body .prose")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        assert page.evaluate("document.getElementById('panel').getBoundingClientRect().width") >= 389
        shot(page, "phone-panel")
        assert [e for e in errors if "422" not in e] == []  # the refused save above is the only error

        # the answer renderer turns model output into text and safe links only, never markup
        rendered = page.evaluate("""async () => {
            const { renderMarkdown } = await import('/static/js/markdown.js');
            const box = document.createElement('div');
            box.append(renderMarkdown('<script>window.pwnedToo = 1</script> <img src=x onerror="window.pwnedToo = 1">\\n\\n'
              + '[a](javascript:alert(1)) [b](JaVaScRiPt:alert(1)) [c](data:text/html,x) [d](../../etc/passwd.md) '
              + '[cite](retrieval/citations.md) [web](https://example.org/x) **bold** `<b>code</b>`\\n\\n'
              + '| h |\\n|---|\\n| <i onclick=x>cell</i> |'));
            document.body.append(box);
            const links = [...box.querySelectorAll('a')].map((a) => [a.getAttribute('href'), a.className]);
            const tags = [...box.querySelectorAll('*')].map((e) => e.tagName.toLowerCase());
            const handlers = [...box.querySelectorAll('*')].some((e) => [...e.attributes].some((a) => a.name.startsWith('on')));
            box.remove();
            return { links, tags, handlers, text: box.textContent };
        }""")
        assert rendered["links"] == [["/wiki/retrieval/citations.md", "citation"], ["https://example.org/x", "external"]]
        assert not {"script", "img", "i", "b"} & set(rendered["tags"]) and not rendered["handlers"]
        assert "<script>window.pwnedToo = 1</script>" in rendered["text"] and "<b>code</b>" in rendered["text"]
        assert page.evaluate("window.pwnedToo") is None


def test_model_answer_streams_in_and_stop_stops_the_model(browser, ui_kb):
    with FakeLLMServer(token_delay=0.04) as llm, KaasServer(ui_kb.root, env={
        "KAAS_MODEL": "openai/fake-model", "KAAS_API_BASE": llm.api_base, "KAAS_API_KEY": "k",
        "KAAS_CACHE": "false", "KAAS_MAX_RETRIES": "1",
    }) as server, browser_page(browser, timeout=30_000, color_scheme="dark") as (page, errors):
        page.goto(server.url + "/")
        page.wait_for_selector("body.ready")
        assert page.inner_text("#mode-badge") == "openai/fake-model"
        assert page.is_hidden("#offline-note")

        page.fill("#question", "How are citations validated?")
        page.keyboard.press("Enter")
        page.wait_for_selector(".turn .answer-body p")
        lengths = []
        while not page.locator(".turn .answer-meta .mode-pill").count():
            lengths.append(len(page.inner_text(".turn .answer-body")))
            page.wait_for_timeout(100)
        growth = sorted(set(lengths))
        assert len(growth) >= 4, lengths  # the text arrived piece by piece, not all at once
        assert page.inner_text(".turn .mode-pill") == "Model answer"
        assert "pages are chosen from the catalog" in page.inner_text(".turn .answer-body")
        page.locator(".turn .answer-body a.citation").first.click()
        page.wait_for_selector("#panel-body .prose")
        page.keyboard.press("Escape")
        shot(page, "model-answer-dark")

        # stop an answer half-way: the browser closes the stream, the server closes the model's
        page.fill("#question", "And how is the catalog built?")
        page.keyboard.press("Enter")
        wait_until(page, "document.querySelectorAll('.turn')[1]?.querySelector('.answer-body')?.innerText.length > 20")
        page.click("#send")  # the Ask button is Stop while answering
        page.wait_for_selector(".turn >> nth=1 >> .notice:has-text('Stopped')")
        deadline = time.monotonic() + 5
        while llm.stats.streams_abandoned < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert llm.stats.streams_abandoned == 1 and llm.stats.streams_completed == 1
        assert not errors, errors


def test_token_protected_server_asks_for_the_token_once(browser, ui_kb):
    with KaasServer(ui_kb.root, env={"KAAS_API_TOKEN": "let-me-in"}) as server, browser_page(browser) as (page, _):
        assert httpx.get(server.url + "/api/index").status_code == 401
        page.goto(server.url + "/")
        page.wait_for_selector("#token-dialog[open]")
        page.fill("#token-input", "let-me-in")
        page.click("#token-dialog button[value=ok]")
        page.wait_for_selector("body.ready")
        assert page.inner_text("#mode-badge") == "Offline mode"
        ask(page, "deployment behind a proxy")
        # A plain /wiki/ link cannot carry the token (it is never a cookie): the page it opens
        # links to the same article in the app, which sends the token.
        page.goto(server.url + "/wiki/ops/deployment.md")
        page.click("#open-in-app")
        page.wait_for_selector(".wiki-article h1:has-text('Deployment')")
        assert page.url.endswith("/#/wiki/ops/deployment.md")
