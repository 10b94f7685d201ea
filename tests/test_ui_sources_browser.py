"""Issue 17 in a real browser (Debian's Chromium driven by playwright, like test_ui_browser.py):
a refused token says so and the prompt comes back; an admin adds a file and a web page (from a
site on 127.0.0.1) and compiles, watching the stages stream in; the open Wiki tab shows a page
added on disk without a reload; a reader's token gets no Sources tab."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from helpers import write_page
from browser_support import KaasServer, browser_page, open_tab, wait_until
from web_fakes import FakeSite, article

pytestmark = pytest.mark.slow  # drives a real browser

TOKEN = "right-token-5f1e0c9a7d3b"
READER = "reader-token-0123456789abcdef"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


@contextmanager
def _page(browser, kaas_url=None, *, token=None):  # noqa: F811
    """``browser_page``, with ``token`` already in this origin's storage (what an earlier visit left)."""
    with browser_page(browser, timeout=15_000) as (page, errors):
        if token is not None:
            page.goto(kaas_url + "/static/favicon.svg")
            page.evaluate(f"localStorage.setItem('kaas-token', {token!r})")
        yield page, errors


def test_a_refused_token_says_so_and_the_prompt_comes_back(browser, ui_kb):  # noqa: F811
    with (KaasServer(ui_kb.root, env={"KAAS_API_TOKEN": TOKEN}) as kaas,
          _page(browser, kaas.url, token="an-old-wrong-token") as (page, errors)):
        page.goto(kaas.url + "/")
        page.wait_for_selector("#token-dialog[open]")
        assert page.is_visible("#token-refused") and not page.is_visible("#token-needed")
        assert "refused" in page.inner_text("#token-refused")
        page.fill("#token-input", "still-wrong")
        page.click("#token-dialog button[value=ok]")
        wait_until(page, "document.querySelector('#token-dialog').open && "
                          "document.querySelector('#token-input').value === ''")  # asked again, not dropped
        assert page.is_visible("#token-refused")
        page.fill("#token-input", TOKEN)
        page.click("#token-dialog button[value=ok]")
        page.wait_for_selector("body.ready")
        page.wait_for_selector("#wiki-tree a", state="attached")  # the catalog loaded with the token
        assert page.evaluate("localStorage.getItem('kaas-token')") == TOKEN
        assert not [e for e in errors if "401" not in e and "404" not in e], errors  # (404: the setup page's /favicon.ico)


def test_an_admin_adds_a_file_and_a_web_page_and_compiles(browser, ui_kb, tmp_path):  # noqa: F811
    upload = tmp_path / "kettle-guide.md"
    upload.write_text("# Kettle guide\n\nThe kettle is descaled every month with citric acid.\n")
    with (FakeSite() as site, KaasServer(ui_kb.root, env={"KAAS_ADD_PRIVATE_URLS": "1"}) as kaas,
          _page(browser) as (page, errors)):
        url = site.page("/leave", article("Leave policy", "Everyone gets thirty days of paid leave a year."))
        page.goto(kaas.url + "/")
        page.wait_for_selector("body.ready")
        page.click("[data-view-link=sources]")
        page.wait_for_selector("#view-sources:not([hidden])")
        page.set_input_files("#source-files", str(upload))
        page.wait_for_selector("#source-results li.ok:has-text('raw/kettle-guide.md')")
        page.fill("#source-urls", url + "\nftp://example.com/nope")
        page.click("#add-urls")
        page.wait_for_selector("#source-results li.ok:has-text('Leave policy')")
        page.wait_for_selector("#source-results li.error:has-text('only http and https')")
        assert page.input_value("#source-urls") == "ftp://example.com/nope"  # kept, to fix and retry
        from kb_ai.store.lock import CompileLock

        with CompileLock(ui_kb.state_dir):  # `kaas compile` in a terminal holds the knowledge base
            page.click("#compile-start")
            page.wait_for_selector("#compile-progress .error:has-text('another kaas compile is running')")
        wait_until(page, "!document.querySelector('#compile-start').disabled")
        page.click("#compile-start")
        page.wait_for_selector("#compile-progress .compile-done")
        stages = page.locator("#compile-progress .stage").evaluate_all("rows => rows.map(r => r.dataset.stage)")
        assert "ingest" in stages and "write" in stages
        assert "2 articles created" in page.inner_text("#compile-progress .compile-report")
        page.click("[data-view-link=wiki]")
        page.wait_for_selector("#wiki-tree a:has-text('Leave policy')")
        page.wait_for_selector("#wiki-tree a:has-text('Kettle guide')")
        assert not errors, errors


def test_the_open_wiki_tab_shows_pages_changed_on_disk(browser, ui_kb):  # noqa: F811
    with KaasServer(ui_kb.root) as kaas, _page(browser) as (page, errors):
        page.goto(kaas.url + "/#/wiki/retrieval/catalog.md")
        page.wait_for_selector(".wiki-article h1:has-text('The catalog')")
        wait_until(page, "document.body.classList.contains('ready')")
        page.wait_for_timeout(500)  # the change stream is open
        write_page(ui_kb.wiki_dir, "ops/backups.md", "Backups", "Nightly backups.", "# Backups\n\nTaken at 02:00.",
                   topic="ops")
        page.wait_for_selector("#wiki-tree a:has-text('Backups')", timeout=20_000)  # no reload
        catalog = ui_kb.wiki_dir / "retrieval" / "catalog.md"
        catalog.write_text(catalog.read_text().replace("lists every article", "lists each and every article"))
        page.wait_for_selector(".wiki-article:has-text('lists each and every article')", timeout=20_000)
        assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
        assert not errors, errors


def test_a_reader_gets_no_sources_tab(browser, ui_kb):  # noqa: F811
    (ui_kb.root / "kaas.toml").write_text(f'[users.rita]\ntoken = "{READER}"\ngroups = ["staff"]\n')
    with KaasServer(ui_kb.root) as kaas, _page(browser, kaas.url, token=READER) as (page, _):
        page.goto(kaas.url + "/")
        page.wait_for_selector("body.ready")
        assert page.is_hidden("[data-view-link=sources]")
        page.goto(kaas.url + "/#/sources")
        page.wait_for_timeout(300)
        assert page.is_hidden("#view-sources")


def test_chats_are_kept_listed_renamed_deleted_and_answers_copied_regenerated_and_voted(browser, ui_kb):  # noqa: F811
    with KaasServer(ui_kb.root) as kaas, _page(browser) as (page, errors):
        page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=kaas.url)
        page.goto(kaas.url + "/")
        page.wait_for_selector("body.ready")
        page.fill("#question", "How does the navigator read the catalog?")
        page.keyboard.press("Enter")
        page.wait_for_selector(".turn .answer-tools .copy-answer")
        answer = page.locator(".turn .answer-body").first.inner_text()
        # copy the answer
        page.click(".turn .copy-answer")
        wait_until(page, "document.querySelector('.turn .copy-answer').textContent === 'Copied'")
        copied = page.evaluate("navigator.clipboard.readText()")
        assert "catalog" in copied.lower() and "[" in copied  # the Markdown, citations included
        # vote it down: written to .kaas/feedback.jsonl with the question, pages read and citations
        page.click(".turn .vote[data-vote=down]")
        page.wait_for_selector(".turn .vote[data-vote=down][aria-pressed=true]")
        import json

        record = json.loads((ui_kb.root / ".kaas" / "feedback.jsonl").read_text().splitlines()[-1])
        assert record["vote"] == "down" and record["question"] == "How does the navigator read the catalog?"
        assert record["pages"] and record["citations"] and set(record["citations"]) <= set(record["pages"])
        # regenerate: the same question again, in place of the answer
        page.click(".turn .regenerate")
        page.wait_for_selector(".turn .answer-tools .copy-answer")
        assert page.locator(".turn").count() == 1
        # a second question, then a reload: the chat is still there, with both turns
        page.fill("#question", "How are citations validated?")
        page.keyboard.press("Enter")
        wait_until(page, "document.querySelectorAll('.turn .answer-tools .copy-answer').length === 2")
        assert page.locator(".turn").first.locator(".regenerate").count() == 0  # only on the last answer
        page.reload()
        page.wait_for_selector("body.ready")
        assert page.locator(".turn").count() == 2
        assert page.locator(".turn .answer-body").first.inner_text() == answer or "catalog" in page.locator(".turn .answer-body").first.inner_text().lower()
        assert page.locator(".turn .sources li").count() >= 1
        # a new chat; the first one is listed, can be renamed, opened and deleted
        page.click("#new-chat")
        assert page.locator(".turn").count() == 0
        page.fill("#question", "What does the wiki say about deployment?")
        page.keyboard.press("Enter")
        page.wait_for_selector(".turn .answer-tools .copy-answer")
        # the list beside the conversation, renamed in place and deleted without native dialogs
        # (issue 28 item 12; tests/test_ui_chat_list_browser.py covers the rest)
        items = page.locator("#chat-list li[data-chat]")
        assert items.count() == 2
        item = page.locator("#chat-list li", has_text="How does the navigator")
        item.hover()
        item.locator(".chat-rename").click()
        page.locator("#chat-list .chat-rename-input").fill("Catalog questions")
        page.keyboard.press("Enter")
        page.wait_for_selector("#chat-list li .chat-open:has-text('Catalog questions')")
        page.click("#chat-list .chat-open:has-text('Catalog questions')")
        wait_until(page, "document.querySelectorAll('.turn').length === 2")
        item = page.locator("#chat-list li", has_text="Catalog questions")
        item.hover()
        item.locator(".chat-delete").click()
        wait_until(page, "document.querySelectorAll('#chat-list li[data-chat]').length === 1")
        assert page.locator(".turn").count() == 0  # the open chat was the one deleted
        kept = page.evaluate("JSON.parse(localStorage.getItem('kaas-chats'))")
        assert [c["title"] for c in kept] == ["What does the wiki say about deployment?"]
        assert not errors, errors


def test_code_blocks_in_answers_get_a_copy_button(browser, ui_kb):  # noqa: F811
    from helpers import write_page as write

    write(ui_kb.wiki_dir, "ops/install.md", "Install", "How to install.",
          "# Install\n\nRun this command to install the tool:\n\n```sh\npip install kaas-tool\n```\n", topic="ops")
    ui_kb.reindex()
    with KaasServer(ui_kb.root) as kaas, _page(browser) as (page, _):
        page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=kaas.url)
        page.goto(kaas.url + "/")
        page.wait_for_selector("body.ready")
        chats = [{"id": "x1", "title": "Install", "created": 1, "updated": 1, "turns": [
            {"question": "How do I install it?", "answer": "Run:\n\n```sh\npip install kaas-tool\n```\n\n[Install](ops/install.md)",
             "citations": [{"path": "ops/install.md", "title": "Install"}], "pages": [{"path": "ops/install.md", "title": "Install"}],
             "mode": "offline", "failed": False}]}]
        page.evaluate(f"localStorage.setItem('kaas-chats', {json_text(chats)}); localStorage.setItem('kaas-chat-current', 'x1')")
        page.reload()
        page.wait_for_selector(".turn pre .copy-code")
        page.click(".turn pre .copy-code")
        wait_until(page, "document.querySelector('.turn pre .copy-code').textContent === 'Copied'")
        assert page.evaluate("navigator.clipboard.readText()").strip() == "pip install kaas-tool"


def json_text(value) -> str:
    import json

    return json.dumps(json.dumps(value))


def test_two_tabs_one_compiles_the_other_follows_it_and_a_second_compile_is_refused(browser, ui_kb):  # noqa: F811
    """Two tabs of one admin: tab A starts a compile; tab B, whose Compile button was still
    enabled, clicks it too and is told a compile is already running — no second compile starts —
    then follows the running compile's progress; its Wiki tab shows the new pages when they land
    (the change stream), without a reload. A third tab opened mid-compile follows it at once."""
    raw = ui_kb.root / "raw"
    raw.mkdir(exist_ok=True)
    for name in ("kettle", "teapot", "toaster"):
        (raw / f"{name}.md").write_text(f"# {name.title()} manual\n\nThe {name} is cleaned every month with vinegar.\n")
    log = ui_kb.wiki_dir / "log.md"
    compiles = log.read_text().count(" compile: ") if log.exists() else 0
    slow = {"KAAS_FAULT": "compile.write.before_file:sleep=1"}  # each article takes a second to write
    with KaasServer(ui_kb.root, env=slow) as kaas, _page(browser) as (tab_a, errors_a):
        tab_b, errors_b = open_tab(tab_a.context, 15_000)
        for tab in (tab_a, tab_b):
            tab.goto(kaas.url + "/#/sources")
            tab.wait_for_selector("#view-sources:not([hidden])")
        tab_a.click("#compile-start")
        tab_a.wait_for_selector("#compile-progress .stage")
        assert tab_b.is_enabled("#compile-start")  # B loaded before the compile began
        tab_b.click("#compile-start")
        tab_b.wait_for_selector("#compile-progress .compile-busy")
        busy = tab_b.inner_text("#compile-progress .compile-busy")
        assert "already running" in busy and "no second compile" in busy.lower(), busy
        tab_b.wait_for_selector("#compile-progress .stage")  # and it follows that compile's stages
        assert tab_b.is_disabled("#compile-start")

        tab_c, errors_c = open_tab(tab_a.context, 15_000)  # opened mid-compile: follows it at once
        tab_c.goto(kaas.url + "/#/sources")
        tab_c.wait_for_selector("#compile-progress .stage")
        assert tab_c.is_disabled("#compile-start") and tab_c.locator(".compile-busy").count() == 0

        tab_b.click("[data-view-link=wiki]")
        tab_b.wait_for_selector("#wiki-tree a:has-text('Kettle manual')", timeout=30_000)
        tab_b.wait_for_selector("#wiki-tree a:has-text('Toaster manual')", timeout=30_000)
        for tab in (tab_a, tab_c):
            tab.wait_for_selector("#compile-progress .compile-done", timeout=30_000)
            assert "3 articles created" in tab.inner_text("#compile-progress .compile-report")
            assert tab.is_enabled("#compile-start")
        assert tab_b.evaluate("performance.getEntriesByType('navigation').length") == 1  # no reload
        assert log.read_text().count(" compile: ") == compiles + 1  # one compile, not two
        assert not errors_a and not errors_c, (errors_a, errors_c)
        assert all("409" in e for e in errors_b), errors_b  # the refused start, as the console logs it
