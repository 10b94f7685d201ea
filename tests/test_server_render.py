"""Article rendering: sanitized HTML, a table of contents, and links between articles that work."""

from __future__ import annotations

import re
from html import unescape

import pytest

from kb_ai.server.render import render_markdown, sanitize_html
from kb_ai.store.links import resolve_link

PAGES = {"retrieval/citations.md", "retrieval/page-selection.md", "ops/deployment.md"}


def render(body: str, from_path: str = "retrieval/citations.md"):
    return render_markdown(body, from_path=from_path, exists=lambda p: p in PAGES)


@pytest.mark.parametrize("target, expected", [
    ("page-selection.md", "retrieval/page-selection.md"),  # relative to the article's folder
    ("./page-selection.md", "retrieval/page-selection.md"),
    ("../ops/deployment.md", "ops/deployment.md"),
    ("ops/deployment.md", "ops/deployment.md"),  # catalog-style, relative to wiki/
    ("wiki/ops/deployment.md", "ops/deployment.md"),
    ("/wiki/ops/deployment.md", "ops/deployment.md"),
    ("../../../etc/passwd.md", None),
])
def test_links_resolve_like_an_editor_then_like_the_catalog(target, expected):
    found = resolve_link("retrieval/citations.md", target, lambda p: p in PAGES).page
    assert found == expected


def test_links_become_server_urls_and_missing_pages_are_marked():
    result = render("[a](page-selection.md#repair) [b](../ops/deployment.md) [c](gone.md) [d](https://x.org/a) "
                    "[e](../raw/src.pdf) [f](#top) [g](mailto:a@b.c)")
    html = result.html
    assert '<a class="wiki-link" href="/wiki/retrieval/page-selection.md#h-repair"' in html
    assert '<a class="wiki-link" href="/wiki/ops/deployment.md"' in html
    assert '<a class="broken-link" href="/wiki/retrieval/gone.md" title="No page retrieval/gone.md in this wiki"' in html
    assert '<a class="external" href="https://x.org/a" rel="noopener noreferrer">d</a>' in html
    assert '<span class="unavailable-link" title="../raw/src.pdf">e</span>' in html
    assert '<a href="#h-top"' in html and 'href="mailto:a@b.c"' in html
    assert result.links == ["retrieval/page-selection.md", "ops/deployment.md"]
    assert result.broken_links == ["retrieval/gone.md"]


def test_toc_ids_are_prefixed_so_articles_cannot_clobber_the_page():
    result = render("# Title\n\n## App\n\n### Main & more\n\n## App")
    assert [(t.level, t.id, t.title) for t in result.toc] == [
        (1, "h-title", "Title"), (2, "h-app", "App"), (3, "h-main-more", "Main & more"), (2, "h-app_1", "App")]
    assert '<h2 id="h-app">App</h2>' in result.html


@pytest.mark.parametrize("dirty", [
    "<script>alert(1)</script>",
    '<a href="javascript:alert(1)">x</a>',
    '<a href=" JaVaScRiPt:alert(1)">x</a>',
    '<a href="&#106;avascript:alert(1)">x</a>',
    '<img src=x onerror="alert(1)">',
    '<p onclick="alert(1)">x</p>',
    '<div style="background:url(javascript:alert(1))">x</div>',
    '<iframe srcdoc="<script>alert(1)</script>"></iframe>',
    '<svg onload="alert(1)"></svg>',
    '<math><mtext><script>alert(1)</script></mtext></math>',
    '<object data="x.swf"></object>',
    '<meta http-equiv="refresh" content="0;url=javascript:alert(1)">',
    '<base href="https://evil.example/">',
    '<link rel="stylesheet" href="https://evil.example/x.css">',
    '<form action="https://evil.example"><button>go</button></form>',
])
def test_sanitizer_removes_script_handlers_and_dangerous_urls(dirty):
    for html in (sanitize_html(dirty), render(dirty).html, render(f"text {dirty} text").html):
        lowered = html.lower()
        for bad in ("<script", "javascript:", "onerror", "onclick", "onload", "style=", "<iframe", "<svg",
                    "<object", "<meta", "<base", "<link", "<form", "srcdoc"):
            assert bad not in lowered, (dirty, html)


def test_markdown_features_survive_sanitizing():
    html = render("| a | b |\n|:--|--:|\n| 1 | 2 |\n\n```python\nprint('x')\n```\n\nText[^1]\n\n[^1]: Note.").html
    assert '<th align="left">a</th>' in html and '<td align="right">2</td>' in html
    assert '<code class="language-python">' in html
    assert 'class="footnote"' in html and 'href="#h-fn:1"' in html


# Every href a rendered article keeps: an in-page anchor, a /wiki/ page, or an absolute
# http(s)/mailto URL whose host is in plain sight (red team A: raw <a> bypassed the rewriter).
_KEPT_HREF = re.compile(r'^(#h-|/wiki/[^/\\?]|https?://[^/\\]|mailto:)')


@pytest.mark.parametrize("body, expected", [
    # Another host, however it is spelled, is written as the browser would read it.
    ('<a href="//evil.example/x">a</a>', "https://evil.example/x"),
    ('<a href="/\\evil.example/x">a</a>', "https://evil.example/x"),
    ('<a href="\\\\evil.example">a</a>', "https://evil.example"),
    ('<a href="&#47;&#47;evil.example">a</a>', "https://evil.example"),
    ('<a href=" \x01//evil.example">a</a>', "https://evil.example"),
    ('<a href="https:/\\evil.example">a</a>', "https://evil.example"),
    ('<a href="HTTPS://x.org/a">a</a>', "https://x.org/a"),
    ('text <a href="//evil.example">inline</a> text', "https://evil.example"),
    ("[a](//evil.example/x)", "https://evil.example/x"),
    # Other routes of this server, and things it does not serve, lose their target.
    ('<a href="/static/../api/pages">a</a>', None),
    ('<a href="/api/pages">a</a>', None),
    ('<a href="/%5Cevil.example">a</a>', None),
    ('<a href="/wiki/../x.md">a</a>', None),
    ('<a href="/wiki/">a</a>', None),
    ('<a href="?x=1">a</a>', None),
    ('<a href="https:evil.example">a</a>', None),
    ('<a href="data:text/html,x">a</a>', None),
    # A raw <a> to an article resolves like a Markdown link.
    ('<a href="page-selection.md#repair">a</a>', "/wiki/retrieval/page-selection.md#h-repair"),
    ('<a href="../ops/deployment.md">a</a>', "/wiki/ops/deployment.md"),
    ('<a href="/wiki/ops/deployment.md">a</a>', "/wiki/ops/deployment.md"),
    ('<a href="mailto:a@b.c">a</a>', "mailto:a@b.c"),
])
def test_every_href_stays_in_the_wiki_or_shows_its_host(body, expected):
    html = render(body).html
    hrefs = [unescape(h) for h in re.findall(r'href="([^"]*)"', html)]
    assert hrefs == ([expected] if expected else []), html
    assert all(_KEPT_HREF.match(h) for h in hrefs), html


def test_markdown_links_to_other_hosts_are_marked_external():
    html = render("[a](//evil.example/x)").html
    assert '<a class="external" href="https://evil.example/x"' in html
