"""Defects found compiling held-out real documentation (issue 14, checked from outside): each
test is a small sample written in the style of what was found, compiled offline.

* API reference Markdown (Node.js style) with collapsed reference links whose text is code,
  ``[`fs.readFile()`][]``, defined further down: the links are links, not leaked ``[...][]``;
* a site's HTML pages whose ``<h1>`` is the site's banner and whose ``<title>`` is
  "Page | Site": each page keeps its own title (and its own article), permalink marks
  (``<a class="mark" href="#id">#</a>``) are not part of the headings;
* a README that opens with an HTML ``<h1 align="center">`` and ends with a ``# Changelog``
  section: the title is the opening one, not the subsection.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from kb_ai.store.articles import load_article

from compile_checks import compile_offline, manifest


def _kb(root: Path, files: dict[str, str]) -> Path:
    for rel, content in files.items():
        path = root / "raw" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(content).lstrip("\n"), encoding="utf-8")
    return root


def _articles(root: Path) -> dict[str, object]:
    data = manifest(root)
    return {source: load_article(root / "wiki", record["articles"][0])
            for source, record in data["sources"].items() if record.get("articles")}


def test_collapsed_reference_links_with_code_text_become_links(tmp_path):
    root = _kb(tmp_path, {
        "timers.md": """
            # Timers

            <!-- YAML
            added: v0.9.1
            -->

            The timer module exposes a global API (such as [`setTimeout()`][]) for scheduling
            functions, see [`queueMicrotask()`][] and [the loop][`event loop`].

            ## `setTimeout(callback, delay)`

            Schedules `callback`.

            [`event loop`]: events.md#the-event-loop
            [`queueMicrotask()`]: #settimeoutcallback-delay
            [`setTimeout()`]: #settimeoutcallback-delay
            """,
        "events.md": """
            # Events

            Much of the core API is built around an asynchronous event-driven architecture.

            ## The event loop

            It loops.
            """,
    })
    compile_offline(root)
    article = _articles(root)["raw/timers.md"]
    assert article.summary.startswith("The timer module exposes a global API (such as setTimeout()) for"), \
        article.summary
    assert "][" not in article.summary and "][" not in article.body, article.body
    assert "[`setTimeout()`](#settimeoutcallback-delay)" in article.body, article.body
    events = _articles(root)["raw/events.md"]
    events_name = Path(events.path).name
    assert re.search(r"\[the loop\]\([^)]*" + re.escape(events_name) + r"#the-event-loop\)", article.body), \
        article.body


_NODE_STYLE_PAGE = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<title>{title} | Acme.js v9.1 Documentation</title>
<meta property="og:site_name" content="Acme.js v9.1 Documentation"></head><body>
<div id="content"><header><h1>Acme.js v9.1 documentation</h1></header>
<div id="apicontent">
<h2>{title}<span><a class="mark" href="#{anchor}" id="{anchor}">#</a></span></h2>
<p>{prose}</p>
<p>It can be accessed using:</p>
<pre class="with-30-chars"><input class="js-flavor-toggle" type="checkbox" checked aria-label="Show modern ES modules syntax"><code class="language-js mjs">import {anchor} from 'acme:{anchor}';</code><code class="language-js cjs">const {anchor} = require('acme:{anchor}');</code></pre>
<h3>Example<span><a class="mark" href="#{anchor}-example" id="{anchor}-example">#</a></span></h3>
<p>An example of the module is shown in the next paragraphs of this page, with notes.</p>
</div></div></body></html>"""


def test_html_pages_of_one_site_keep_their_own_titles(tmp_path):
    pages = {
        "file-system.html": ("File system", "file-system",
                             "The fs module enables interacting with the file system in a way modeled on POSIX."),
        "path.html": ("Path", "path",
                      "The path module provides utilities for working with file and directory paths."),
    }
    root = _kb(tmp_path, {name: _NODE_STYLE_PAGE.format(title=title, anchor=anchor, prose=prose)
                          for name, (title, anchor, prose) in pages.items()})
    compile_offline(root)
    articles = _articles(root)
    assert {articles[f"raw/{name}"].title for name in pages} == {"File system", "Path"}
    assert articles["raw/file-system.html"].path != articles["raw/path.html"].path
    body = articles["raw/path.html"].body
    assert "Acme.js v9.1 documentation" not in body
    assert not re.search(r"(?m)^#+ .*#$", body), body
    assert "## Path" not in body, body  # the page's own heading is the article's title, not repeated
    assert "\n## Example\n" in body, body  # and its sections are the article's sections
    assert "```\nimport path from 'acme:path';\n```" in body, body
    assert "```\nconst path = require('acme:path');\n```" in body, body


def test_readme_opening_with_an_html_h1_is_titled_by_it(tmp_path):
    root = _kb(tmp_path, {"charset_tool.md": """
        <h1 align="center">Charset Detection, for Everyone</h1>

        <p align="center"><img src="https://example.org/badge.svg" /></p>

        This project offers an alternative to the usual charset detector, with speed in mind.

        ## Installation

        Use pip.

        # Changelog

        ## 3.4.0

        - Fixed things.
        """})
    compile_offline(root)
    assert _articles(root)["raw/charset_tool.md"].title == "Charset Detection, for Everyone"


def test_rst_readme_with_badges_and_backslash_escapes_is_compiled(tmp_path):
    root = _kb(tmp_path, {"web_cors.rst": r"""
        .. image:: https://img.example.org/v/web-cors.svg
            :target: https://pypi.example.org/web-cors/
            :alt: Latest Version

        Web-CORS
        ========

        |Build Status| |Latest Version|

        A web extension for handling Cross Origin Resource Sharing, making cross-origin calls possible.

        Installation
        ------------

        Install the extension with pip, or easy\_install. If it helps you, please |donate| to the authors.

        .. |donate| image:: https://pay.example.org/button.gif
           :target: https://pay.example.org/give
           :alt: Donate with Paypal

        .. |Build Status| image:: https://ci.example.org/web-cors.svg
           :target: https://ci.example.org/web-cors
        .. |Latest Version| image:: https://img.example.org/v/web-cors.svg
           :target: https://pypi.example.org/web-cors/
        """})
    compile_offline(root)
    article = _articles(root).get("raw/web_cors.rst")
    assert article is not None, manifest(root)["sources"]["raw/web_cors.rst"]
    assert article.title == "Web-CORS"
    assert article.summary == ("A web extension for handling Cross Origin Resource Sharing, making cross-origin "
                               "calls possible.")
    assert "easy_install" in article.body and "\x00" not in article.body
    assert "ci.example.org" not in article.body and "img.example.org" not in article.body, article.body
    assert "please [Donate with Paypal](https://pay.example.org/give) to the authors." in article.body, article.body


def test_html_tags_shown_in_code_do_not_hide_the_rest_of_the_page(tmp_path):
    """``<script>`` and ``<!--`` written in backticks or a code block are what the page shows;
    they once swallowed everything after them (half of an API page, its link definitions too)."""
    root = _kb(tmp_path, {"contexts.md": """
        # Contexts

        <!-- YAML
        added: v0.3.1
        -->

        A context can emulate a browser window and then run all `<script>` tags together within it.

        ```html
        <!-- a page -->
        <style>body { color: red }</style>
        ```

        ## Isolation

        Globals of the [contextified][] object stay apart.

        [contextified]: #contexts
        """})
    compile_offline(root)
    body = _articles(root)["raw/contexts.md"].body
    assert "run all `<script>` tags together within it." in body, body
    assert "<!-- a page -->\n<style>body { color: red }</style>" in body, body
    assert "## Isolation" in body and "[contextified](#contexts)" in body, body
    assert "YAML" not in body and "added: v0.3.1" not in body, body


def test_a_table_of_contents_page_is_summarized_by_its_entries(tmp_path):
    """A page that is only a list of links has no prose sentence: its catalog line names its
    first entries, not whichever entry happens to have four words."""
    root = _kb(tmp_path, {"index.md": """
        <!-- if you move this file, update the site generator -->

        * [About these docs](about.md)
        * [Usage](usage.md)

        <hr class="line"/>

        * [Assertion testing](assert.md)
        * [C/C++ addons with Node-API](addons.md)
        """,
        "about.md": "# About these docs\n\nThese docs describe the runtime and its modules in detail.\n",
        "usage.md": "# Usage\n\nRun the program with a script file as its argument.\n",
        "assert.md": "# Assertion testing\n\nThe assert module provides a set of assertion functions.\n",
        "addons.md": "# C/C++ addons with Node-API\n\nNode-API is an API for building native addons.\n"})
    compile_offline(root)
    article = _articles(root)["raw/index.md"]
    assert article.summary == ("Contents: About these docs, Usage, Assertion testing, "
                               "C/C++ addons with Node-API"), article.summary


def test_an_h1_in_a_code_example_is_not_the_title(tmp_path):
    root = _kb(tmp_path, {"templates.md": """
        Templates are rendered with the context you pass, for example:

        ```html
        <h1>Hello, {{ name }}!</h1>
        ```

        Write `<h1>` only once per page.
        """})
    compile_offline(root)
    assert _articles(root)["raw/templates.md"].title == "Templates"


def test_mkdocstrings_autorefs_read_as_their_text(tmp_path):
    root = _kb(tmp_path, {"lifespan.md": """
        # Lifespan

        The lifespan task runs apart: if you create a [`ContextVar`][contextvars.ContextVar] in it,
        requests will not see it. See [the config][myserver.Config] too, and `[a][b.c]` stays code.
        """})
    compile_offline(root)
    body = _articles(root)["raw/lifespan.md"].body
    assert "if you create a `ContextVar` in it," in body and "See the config too" in body, body
    assert "`[a][b.c]`" in body, body


def test_readme_logo_and_sponsor_image_blocks_are_dropped(tmp_path):
    root = _kb(tmp_path, {"classy.md": """
        <p align="center">
          <a href="https://classy.example.org/">
            <img src="https://classy.example.org/logo.svg" width="35%" alt="classy" />
          </a>
        </p>

        *classy* brings back the joy of writing classes without the boilerplate.

        ## Sponsors

        <p align="center">

        <a href="https://one.example.org/"><img title="One" src="https://one.example.org/logo.svg" /></a>
        <a href="https://two.example.org/"><img title="Two" src="https://two.example.org/logo.svg" /></a>

        </p>

        <p align="center"><strong>Please consider joining them.</strong></p>

        ```html
        <p align="center"><img src="kept-in-code.svg"></p>
        ```
        """})
    compile_offline(root)
    body = _articles(root)["raw/classy.md"].body
    assert "logo.svg" not in body and '<p align="center">\n\n</p>' not in body, body
    assert "<strong>Please consider joining them.</strong>" in body, body
    assert '<p align="center"><img src="kept-in-code.svg"></p>' in body, body
    assert "*classy* brings back the joy" in body, body
