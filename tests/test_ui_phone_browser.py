"""On a phone, nothing scrolls sideways: every page of a real compiled wiki (the repository's
own ``wiki/``) at 320 and 390 px, light and dark, in the real Chromium. Long code lines and wide
tables scroll inside their own box; the page itself never does (issue 28 item 5)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from browser_support import KaasServer, ask, browser_page

pytestmark = pytest.mark.slow  # drives a real browser over every page of a wiki

REPO_WIKI = Path(__file__).resolve().parents[1] / "wiki"

MEASURE = """() => {
  const article = document.querySelector('.wiki-article');
  const boxes = [...document.querySelectorAll('.wiki-article pre, .wiki-article table')];
  return {page: document.scrollingElement.scrollWidth, viewport: innerWidth,
          article: Math.ceil(article.getBoundingClientRect().right),
          // a box wider than the screen must scroll itself rather than be cut off
          unreachable: boxes.filter(b => b.getBoundingClientRect().right > innerWidth + 1).length,
          scrolling: boxes.filter(b => b.scrollWidth > b.clientWidth).length};
}"""


@pytest.fixture(scope="module")
def repo_wiki_kb(tmp_path_factory) -> Path:
    kb = tmp_path_factory.mktemp("repo-wiki")
    shutil.copytree(REPO_WIKI, kb / "wiki")
    return kb


def _articles(kb: Path) -> list[str]:
    skip = {"master-index.md", "log.md", "topics.md"}
    return [p.relative_to(kb / "wiki").as_posix() for p in sorted((kb / "wiki").rglob("*.md")) if p.name not in skip]


@pytest.mark.parametrize("width,scheme", [(320, "light"), (390, "dark")])
def test_no_wiki_page_scrolls_sideways_on_a_phone(browser, repo_wiki_kb, width, scheme):
    articles = _articles(repo_wiki_kb)
    assert len(articles) > 20
    wide, scrolled_inside = [], 0
    with KaasServer(repo_wiki_kb) as kaas, browser_page(browser, viewport={"width": width, "height": 800},
                                                       color_scheme=scheme) as (page, errors):
        page.goto(kaas.url + "/")
        page.wait_for_selector("body.ready")
        for rel in articles:
            page.goto(f"{kaas.url}/#/wiki/{rel}")
            page.wait_for_selector(f".wiki-article a[href='#/edit/{rel}']")  # this article, not the last
            m = page.evaluate(MEASURE)
            if m["page"] > m["viewport"] or m["article"] > m["viewport"] or m["unreachable"]:
                wide.append((rel, m))
            scrolled_inside += m["scrolling"]
        assert errors == []
    assert wide == []
    assert scrolled_inside > 0  # the wiki has wide code or tables: they scroll in their box


def test_an_answer_with_wide_code_does_not_scroll_the_chat_sideways(browser, repo_wiki_kb):
    with KaasServer(repo_wiki_kb) as kaas, browser_page(browser, viewport={"width": 320, "height": 800}) as (page, _):
        page.goto(kaas.url + "/")
        page.wait_for_selector("body.ready")
        ask(page, "What does kaas ask --json print?")
        assert page.evaluate("document.scrollingElement.scrollWidth") <= 320
