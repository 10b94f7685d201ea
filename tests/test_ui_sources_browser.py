"""Issue 17 in a real browser (Debian's Chromium driven by playwright, like test_ui_browser.py):
a refused token says so and the prompt comes back; an admin adds a file and a web page (from a
site on 127.0.0.1) and compiles, watching the stages stream in; the open Wiki tab shows a page
added on disk without a reload; a reader's token gets no Sources tab."""

from __future__ import annotations

import pytest

from helpers import write_page
from test_ui_browser import KaasServer, _wait_until, _watch_errors, browser, ui_kb  # noqa: F401 (fixtures)
from web_fakes import FakeSite, article

pytestmark = pytest.mark.slow  # drives a real browser

TOKEN = "right-token-5f1e0c9a7d3b"
READER = "reader-token-0123456789abcdef"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


def _page(browser, kaas_url=None, *, token=None):  # noqa: F811
    context = browser.new_context(viewport={"width": 1280, "height": 820})
    page = context.new_page()
    page.set_default_timeout(15_000)
    if token is not None:  # what an earlier visit left in this origin's storage
        page.goto(kaas_url + "/static/favicon.svg")
        page.evaluate(f"localStorage.setItem('kaas-token', {token!r})")
    return context, page


def test_a_refused_token_says_so_and_the_prompt_comes_back(browser, ui_kb):  # noqa: F811
    with KaasServer(ui_kb.root, env={"KAAS_API_TOKEN": TOKEN}) as kaas:
        context, page = _page(browser, kaas.url, token="an-old-wrong-token")
        errors = _watch_errors(page)
        page.goto(kaas.url + "/")
        page.wait_for_selector("#token-dialog[open]")
        assert page.is_visible("#token-refused") and not page.is_visible("#token-needed")
        assert "refused" in page.inner_text("#token-refused")
        page.fill("#token-input", "still-wrong")
        page.click("#token-dialog button[value=ok]")
        _wait_until(page, "document.querySelector('#token-dialog').open && "
                          "document.querySelector('#token-input').value === ''")  # asked again, not dropped
        assert page.is_visible("#token-refused")
        page.fill("#token-input", TOKEN)
        page.click("#token-dialog button[value=ok]")
        page.wait_for_selector("body.ready")
        page.wait_for_selector("#wiki-tree a", state="attached")  # the catalog loaded with the token
        assert page.evaluate("localStorage.getItem('kaas-token')") == TOKEN
        assert not [e for e in errors if "401" not in e], errors
        context.close()


def test_an_admin_adds_a_file_and_a_web_page_and_compiles(browser, ui_kb, tmp_path):  # noqa: F811
    upload = tmp_path / "kettle-guide.md"
    upload.write_text("# Kettle guide\n\nThe kettle is descaled every month with citric acid.\n")
    with FakeSite() as site, KaasServer(ui_kb.root, env={"KAAS_ADD_PRIVATE_URLS": "1"}) as kaas:
        url = site.page("/leave", article("Leave policy", "Everyone gets thirty days of paid leave a year."))
        context, page = _page(browser)
        errors = _watch_errors(page)
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
        page.click("#compile-start")
        page.wait_for_selector("#compile-progress .compile-done")
        stages = page.locator("#compile-progress .stage").evaluate_all("rows => rows.map(r => r.dataset.stage)")
        assert "ingest" in stages and "write" in stages
        assert "2 articles created" in page.inner_text("#compile-progress .compile-report")
        page.click("[data-view-link=wiki]")
        page.wait_for_selector("#wiki-tree a:has-text('Leave policy')")
        page.wait_for_selector("#wiki-tree a:has-text('Kettle guide')")
        assert not errors, errors
        context.close()


def test_the_open_wiki_tab_shows_pages_changed_on_disk(browser, ui_kb):  # noqa: F811
    with KaasServer(ui_kb.root) as kaas:
        context, page = _page(browser)
        errors = _watch_errors(page)
        page.goto(kaas.url + "/#/wiki/retrieval/catalog.md")
        page.wait_for_selector(".wiki-article h1:has-text('The catalog')")
        _wait_until(page, "document.body.classList.contains('ready')")
        page.wait_for_timeout(500)  # the change stream is open
        write_page(ui_kb.wiki_dir, "ops/backups.md", "Backups", "Nightly backups.", "# Backups\n\nTaken at 02:00.",
                   topic="ops")
        page.wait_for_selector("#wiki-tree a:has-text('Backups')", timeout=20_000)  # no reload
        catalog = ui_kb.wiki_dir / "retrieval" / "catalog.md"
        catalog.write_text(catalog.read_text().replace("lists every article", "lists each and every article"))
        page.wait_for_selector(".wiki-article:has-text('lists each and every article')", timeout=20_000)
        assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
        assert not errors, errors
        context.close()


def test_a_reader_gets_no_sources_tab(browser, ui_kb):  # noqa: F811
    (ui_kb.root / "kaas.toml").write_text(f'[users.rita]\ntoken = "{READER}"\ngroups = ["staff"]\n')
    with KaasServer(ui_kb.root) as kaas:
        context, page = _page(browser, kaas.url, token=READER)
        page.goto(kaas.url + "/")
        page.wait_for_selector("body.ready")
        assert page.is_hidden("[data-view-link=sources]")
        page.goto(kaas.url + "/#/sources")
        page.wait_for_timeout(300)
        assert page.is_hidden("#view-sources")
        context.close()
