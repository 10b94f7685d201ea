"""Formats read as what they are (issue 14, items 2 and 3): reStructuredText with Sphinx's roles
and directives, MkDocs/Material and GitHub Markdown dialects, PDF page furniture, DOCX tables,
compiled offline into articles whose titles are the documents' own and whose catalog lines
carry no markup."""

from __future__ import annotations

import io
import os
import re
import shutil
import textwrap
from pathlib import Path

import pytest

from kb_ai.store.markdown_text import plain_text
from kb_ai.compile.readers import title_from_filename
from kb_ai.store.articles import load_article
from kb_ai.store.sentences import split_sentences

from compile_checks import compile_offline, manifest
from fixtures.compile.make import pdf_pages_bytes

REALDOCS = Path(os.environ.get("KAAS_REALDOCS", "/work/shared/eval-data/realdocs-dev"))

# Markup that must never reach a catalog line (title or summary).
MARKUP = re.compile(
    r"(?:^|\s)\.\.\s|:[\w:.-]+:`|(?:^|\s):[\w-]+:(?:\s|$)|!!!|\?\?\?|\[![A-Z]+\]|\]\(|\]\[|```|`|</?[a-zA-Z][\w-]*[^<>]*>"
    r"|(?:^|\s):::\s|[\x00-\x08\x0b\x0c\x0e-\x1f]"
)


def _kb(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        path = root / "raw" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(textwrap.dedent(content).lstrip("\n"), encoding="utf-8")
    (root / "wiki").mkdir(exist_ok=True)
    return root


def _articles(root: Path) -> dict[str, object]:
    """source path -> the article compiled from it."""
    data = manifest(root)
    out = {}
    for source, record in data["sources"].items():
        if record.get("articles"):
            out[source] = load_article(root / "wiki", record["articles"][0])
    return out


def _catalog_lines(root: Path) -> list[str]:
    return [line for line in (root / "wiki" / "master-index.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("- [")]


def _catalog_text(line: str) -> str:
    match = re.match(r"- \[(.*)\]\(([^)]*)\)(?: — (.*))?$", line)
    assert match, line
    return f"{match.group(1)} {match.group(3) or ''}"


SPHINX_PAGE = """
    :orphan:

    .. currentmodule:: flask

    .. _async_await:

    Using ``async`` and ``await``
    =============================

    .. versionadded:: 2.0

    Routes and error handlers can all be coroutine functions, e.g. when
    :class:`~flask.Flask` is installed with the ``async`` extra. See :doc:`quickstart`
    and :ref:`the tutorial <tutorial-label>`, or :ref:`no-such-label`.

    .. code-block:: python
        :caption: app.py

        @app.route("/")
        async def index():
            return "ok"

    .. note::
        Async views need an event loop per request.

    .. warning:: Do not block the loop.

    .. autofunction:: flask.url_for

    .. toctree::
       :maxdepth: 2

       quickstart

    .. include:: snippet.txt

    .. include:: ../../etc/passwd

    Performance
    -----------

    Async is not inherently faster than sync code, i.e. it helps only with I/O.
"""

QUICKSTART = """
    Quickstart
    ==========

    Eager to get started? This page gives a good introduction to Flask.
"""

TUTORIAL = """
    .. _tutorial-label:

    Tutorial
    ========

    This tutorial will walk you through creating a basic blog application.
"""


def test_sphinx_rst_reads_as_markdown_with_its_own_title(tmp_path):
    root = _kb(tmp_path, {"docs/async-await.rst": SPHINX_PAGE, "docs/quickstart.rst": QUICKSTART,
                          "docs/tutorial/index.rst": TUTORIAL,
                          "docs/snippet.txt": "Included text from a snippet file in raw.\n"})
    report = compile_offline(root)
    articles = _articles(root)
    page = articles["raw/docs/async-await.rst"]
    assert page.title == "Using async and await"
    assert page.summary == ("Routes and error handlers can all be coroutine functions, e.g. when Flask is "
                            "installed with the async extra.")
    body = page.body
    # Sphinx markup never leaks into the text.
    assert not re.search(r"^\.\. |:class:|:doc:|:ref:|currentmodule|toctree|:orphan:|_async_await", body, re.M)
    assert '```python\n@app.route("/")\nasync def index():\n    return "ok"\n```' in body
    assert "> **New in version 2.0**" in body
    assert "> **Note:** Async views need an event loop per request." in body
    assert "> **Warning:** Do not block the loop." in body
    assert "> **API reference:** `flask.url_for`" in body
    assert "`Flask`" in body and "## Performance" in body
    # :doc: and :ref: become links to the target's source, which the link stage repoints to the
    # article compiled from it (either is right here); an unknown label stays text.
    assert re.search(r"\[Quickstart\]\((quickstart\.rst|[^)]*quickstart\.md)\)", body), body
    assert re.search(r"\[the tutorial\]\((tutorial/index\.rst#tutorial-label|[^)]*tutorial\.md[^)]*)\)", body), body
    assert "or no such label." in body and "no-such-label" not in body
    # include: inside raw/ inlined; outside raw/ dropped with a note, never read.
    assert "Included text from a snippet file in raw." in body
    assert "passwd" not in body and "root:" not in body
    record = manifest(root)["sources"]["raw/docs/async-await.rst"]
    assert any("../../etc/passwd is outside raw/" in note for note in record.get("notes", [])), record
    assert not report.skipped or all(s["path"] != "raw/docs/async-await.rst" for s in report.skipped)
    for line in _catalog_lines(root):
        assert not MARKUP.search(_catalog_text(line)), line


def test_rst_with_unknown_directives_and_roles_neither_crashes_nor_leaks(tmp_path):
    page = """
        Widgets API
        ===========

        .. py:function:: make_widget(name, *, size=1)

           Make a widget called *name*. Raises :py:exc:`ValueError` for an empty name.

        .. confval:: widget_size
           :type: int
           :default: 1

           The default size of a widget, see :confval:`other` and :issue:`42`.

        .. mermaid::

           graph TD; A-->B

        .. tabs::

           .. tab:: Linux

              Run ``make`` on Linux.

           .. tab:: Windows

              Run ``nmake`` on Windows.

        .. deprecated:: 3.2
            Use :func:`new_widget` instead of this function.

        .. some-extension-directive:: argument here
           :option: value

           Content of an unknown directive stays readable.

        :abbr:`LIFO (last-in, first-out)` and :menuselection:`File --> Save` and :kbd:`Ctrl+C`.
    """
    root = _kb(tmp_path, {"api.rst": page})
    compile_offline(root)
    article = _articles(root)["raw/api.rst"]
    assert article.title == "Widgets API"
    body = article.body
    assert "`make_widget(name, *, size=1)`" in body and "Raises `ValueError` for an empty name." in body
    assert "`widget_size`" in body and "The default size of a widget" in body and ":confval:" not in body
    assert "```mermaid\ngraph TD; A-->B\n```" in body
    assert "**Linux**" in body and "Run `make` on Linux." in body and "**Windows**" in body
    assert "> **Deprecated since version 3.2:** Use `new_widget` instead of this function." in body
    assert "Content of an unknown directive stays readable." in body
    assert "LIFO and File → Save and `Ctrl+C`." in body
    assert not re.search(r"^\s*\.\. |:\w+:`|:option:", body, re.M), body


def test_rst_that_docutils_cannot_parse_is_still_compiled(tmp_path):
    # A section title under a body element's indentation and an unterminated inline literal:
    # docutils reports errors (silenced) but must not stop the file.
    root = _kb(tmp_path, {"odd.rst": "Odd page\n========\n\nText with ``unclosed literal and *emphasis.\n\n"
                                     "  Title in a quote\n  ===\n\nMore text follows here for the reader.\n"})
    report = compile_offline(root)
    assert not report.skipped
    article = _articles(root)["raw/odd.rst"]
    assert article.title == "Odd page"
    assert "More text follows here for the reader." in article.body


MKDOCS_PAGE = """
    <style>
      .md-typeset h1 { display: none; }
    </style>

    [![Build](https://ci.example/badge.svg)](https://ci.example) [![PyPI version shields](https://pypi.example/v.svg)](https://pypi.example)

    Intro text before the title is not a title, and the setext heading below is.

    Deployment Guide
    ================

    !!! note "Before you start"
        You need a server with at least two cores, see the [requirements][req].

    Server deployment is a complex area, and this page covers the common cases.

    === "pip"

        ```bash
        pip install uvicorn
        ```

    === "uv"

        ```bash
        uv add uvicorn
        ```

    ??? abstract "Details"
        Collapsed details.

    ???+ tip
        Open tip.

    ::: uvicorn.main.run
        options:
          show_source: false

    > [!WARNING]
    > Never run the debugger in production.

    ## Proxies

    Read about [proxies][] and the [settings][req] page.

    [req]: ../requirements.md "Requirements"
    [proxies]: https://example.com/proxies
"""


def test_mkdocs_dialect_becomes_plain_markdown(tmp_path):
    root = _kb(tmp_path, {"guide/deployment.md": MKDOCS_PAGE})
    compile_offline(root)
    article = _articles(root)["raw/guide/deployment.md"]
    assert article.title == "Deployment Guide"
    assert article.summary == "Intro text before the title is not a title, and the setext heading below is."
    body = article.body
    assert "display: none" not in body and "<style>" not in body
    # (a link to a file that is not a source may be left as its text by the link stage)
    assert re.search(r"> \*\*Before you start:\*\* You need a server with at least two cores, see the "
                     r"(\[requirements\]\(\.\./requirements\.md\)|requirements)\.", body), body
    assert "**pip**\n\n```bash\npip install uvicorn\n```" in body and "=== " not in body
    assert "> **Details:** Collapsed details." in body and "> **Tip:** Open tip." in body
    assert "> **API reference:** `uvicorn.main.run`" in body and "show_source" not in body
    assert "> **Warning:** Never run the debugger in production." in body and "[!WARNING]" not in body
    assert re.search(r"Read about \[proxies\]\(https://example\.com/proxies\) and the "
                     r"(\[settings\]\(\.\./requirements\.md\)|settings) page\.", body), body
    assert "[req]:" not in body and "!!!" not in body and "???" not in body
    for line in _catalog_lines(root):
        assert not MARKUP.search(_catalog_text(line)), line


def test_readme_with_badges_and_html_title(tmp_path):
    readme = """
        <h1 align="center">
          <img src="logo.png" alt=""> Widgetry
        </h1>

        <p align="center"><em>Widgets for everyone.</em></p>

        [![CI](https://ci.example/b.svg)](https://ci.example) [![Coverage Status Badge Here](https://cov.example/c.svg)](https://cov.example) [![Licence MIT badge](https://l.example/l.svg)](https://l.example)

        **Documentation**: [https://widgetry.example](https://widgetry.example)
        **Source Code**: [https://github.example/widgetry](https://github.example/widgetry)

        Widgetry makes widgets from <kbd>YAML</kbd> files, a.k.a. widget specs. It is fast.

        ## Install

        Run the installer.
    """
    root = _kb(tmp_path, {"widgetry/README.md": readme})
    compile_offline(root)
    article = _articles(root)["raw/widgetry/README.md"]
    assert article.title == "Widgetry"
    assert article.summary == "Widgetry makes widgets from YAML files, a.k.a. widget specs."


def test_pdf_furniture_removed_and_paragraphs_rejoined(tmp_path):
    text = ("The quarterly report describes how the service performed during the third quarter, including "
            "availability, latency and the incidents that affected customers in Europe and Asia. Every figure "
            "was measured by the monitoring system and checked by two engineers before it was written down in "
            "this report for the board.")
    lines = textwrap.wrap(text, 60)
    lines[1] = lines[1] + " avail-"  # a word hyphenated across a line break
    lines[2] = "ability " + lines[2] if not lines[2].startswith("availability") else lines[2]
    header, footer = "ACME Corp - Quarterly Service Report", "Page {n} of 3"
    page1 = [(9, header), (22, "Service Report Q3"), (11, "")] + [(11, l) for l in lines[:3]] + [(9, footer.format(n=1))]
    page2 = [(9, header)] + [(11, l) for l in lines[3:]] + [(9, footer.format(n=2))]
    page3 = [(9, header), (11, "Incidents were few.\x00 The second\x07 paragraph ends here."), (9, footer.format(n=3))]
    root = _kb(tmp_path, {"reports/q3.pdf": pdf_pages_bytes([page1, page2, page3])})
    compile_offline(root)
    article = _articles(root)["raw/reports/q3.pdf"]
    assert article.title == "Service Report Q3"
    assert article.summary.startswith("The quarterly report describes how the service performed")
    body = article.body
    assert "Quarterly Service Report" not in body and "Page 2 of 3" not in body and "of 3" not in body
    assert "\x00" not in body and "\x07" not in body
    # One paragraph across the line and page breaks, hyphenation undone.
    paragraph = next(p for p in body.split("\n\n") if p.startswith("The quarterly report"))
    assert "the board." in paragraph and "avail- " not in paragraph and "\n" not in paragraph
    assert "Incidents were few. The second paragraph ends here." in body
    catalog = (root / "wiki" / "master-index.md").read_text(encoding="utf-8")
    assert "\x00" not in catalog


def test_pdf_placeholder_metadata_title_is_not_used(tmp_path):
    page = [(20, "Onboarding Checklist"), (11, "")] + [(11, "Every new hire gets a laptop, an account and a buddy on day one.")]
    root = _kb(tmp_path, {"team/onboarding.pdf": pdf_pages_bytes([page], title="Microsoft Word - onboarding_v3.docx")})
    compile_offline(root)
    assert _articles(root)["raw/team/onboarding.pdf"].title == "Onboarding Checklist"


def test_docx_tables_and_title_style(tmp_path):
    import docx

    document = docx.Document()
    document.add_heading("Travel Policy", level=0)
    document.add_paragraph("This policy explains how employees book and claim business travel.")
    document.add_heading("Allowances", level=1)
    table = document.add_table(rows=3, cols=2)
    for row, (city, amount) in enumerate([("City", "Daily allowance"), ("London", "GBP 80"), ("Paris | FR", "EUR 90")]):
        table.cell(row, 0).text, table.cell(row, 1).text = city, amount
    document.add_paragraph("Claims are paid monthly.")
    buffer = io.BytesIO()
    document.save(buffer)
    root = _kb(tmp_path, {"hr/travel.docx": buffer.getvalue()})
    compile_offline(root)
    article = _articles(root)["raw/hr/travel.docx"]
    assert article.title == "Travel Policy"
    assert article.summary == "This policy explains how employees book and claim business travel."
    body = article.body
    assert body.count("Travel Policy") == 1  # the title once, not again as a heading
    assert "| City | Daily allowance |\n|---|---|\n| London | GBP 80 |\n| Paris \\| FR | EUR 90 |" in body
    # The table is where it was in the document: after its heading, before the next paragraph.
    assert body.index("## Allowances") < body.index("| City") < body.index("Claims are paid monthly.")


def test_titles_fall_back_to_a_readable_file_name_never_a_subsection(tmp_path):
    root = _kb(tmp_path, {
        "testclient.md": "The test client lets you make requests against your app.\n\n## Usage\n\nCall it.\n",
        "http_proxy-config.rst": "Some text about the proxy configuration, no title of its own.\n\n"
                                 "Section\n-------\n\nMore text under a subsection heading.\n",
        "deployment/index.md": "Server deployment is a complex area.\n\n## Running behind Nginx\n\nUse a proxy.\n",
        "notes.txt": "This document describes the way we deploy the\nservice to production on each Friday.\n",
    })
    compile_offline(root)
    articles = _articles(root)
    assert articles["raw/testclient.md"].title == "Test client"
    assert articles["raw/http_proxy-config.rst"].title == "Http proxy config"
    assert articles["raw/deployment/index.md"].title == "Deployment"
    assert articles["raw/notes.txt"].title == "Notes"


def test_title_from_filename_rules():
    assert title_from_filename("raw/testclient.md", "the test client is a client for tests") == "Test client"
    assert title_from_filename("raw/testclient.md") == "Testclient"  # no words to split it by
    assert title_from_filename("raw/http_proxy-config.rst") == "Http proxy config"
    assert title_from_filename("raw/guide/README.md") == "Guide"


@pytest.mark.parametrize("text, expected", [
    ("Uvicorn, a.k.a. the ASGI server, is fast. It runs apps.", 2),
    ("Use a reverse proxy, e.g. Nginx or Apache. Then start it.", 2),
    ("Pick one, i.e. The default one. Then go.", 2),
    ("Upgrade to v1.2.3 before May. Older versions break.", 2),
    ("Dr. Smith wrote the module. Mr. Jones reviewed it.", 2),
    ("See Fig. 3 for details. The rest follows.", 2),
    ("The U.S. Army was founded in 1775. It is old.", 2),
    ("Version 2.0. Released in 2020. It was big.", 3),
    ("What is ASGI? It is a spec. Read it.", 3),
])
def test_sentence_splitting_keeps_abbreviations_and_versions(text, expected):
    assert len(split_sentences(text)) == expected, split_sentences(text)


@pytest.mark.slow
@pytest.mark.skipif(not REALDOCS.is_dir(), reason="realdocs-dev corpus not present")
def test_real_docs_have_their_own_titles_and_clean_catalog(tmp_path):
    raw = tmp_path / "raw"
    for project in ("flask", "uvicorn"):
        shutil.copytree(REALDOCS / project, raw / project,
                        ignore=shutil.ignore_patterns("LICENSE.txt", "LICENSE.md"))
    (tmp_path / "wiki").mkdir()
    compile_offline(tmp_path)
    articles = _articles(tmp_path)
    assert len(articles) >= 80
    for source, article in articles.items():
        assert not re.match(r"^(\.\.|:\w+:)", article.title), (source, article.title)
        assert not MARKUP.search(article.title), (source, article.title)
        assert not MARKUP.search(article.summary), (source, article.summary)
    titles = {a.title for a in articles.values()}
    assert {"Using async and await", "Command Line Interface", "Welcome to Flask", "Blueprints and Views"} <= titles
    for line in _catalog_lines(tmp_path):
        assert not MARKUP.search(_catalog_text(line)), line


def test_code_shared_by_several_pages_stays_whole_in_each(tmp_path):
    """Boilerplate removal works on blocks: a code block with blank lines inside is one block,
    and code is never boilerplate (the same example in three tutorial pages belongs to all)."""
    code = """
        .. code-block:: python

            def create_app(test_config=None):
                app = Flask(__name__, instance_relative_config=True)
                app.config.from_mapping(SECRET_KEY="dev", DATABASE="flaskr.sqlite")

                from . import db
                db.init_app(app)
                app.register_blueprint(db.blueprint_for_the_database_commands)

                return app
    """
    intros = {
        "database": "The application will use a SQLite database to store users and posts. Python comes with "
                    "built-in support for SQLite in the sqlite3 module. Connections are tied to the request.",
        "views": "A view function is the code you write to respond to requests to your application. Flask uses "
                 "patterns to match the incoming request URL to the view that should handle it.",
        "blog": "You will use the same techniques you learned about when writing the authentication blueprint "
                "to write the blog blueprint. The blog should list all posts and allow logged in users to edit.",
    }
    pages = {}
    for name, intro in intros.items():
        pages[f"tutorial/{name}.rst"] = (
            f"{name.capitalize()} step\n{'=' * (len(name) + 5)}\n\n{intro}\n\n" + textwrap.dedent(code)
            + f"\nThe {name} step is done; {intro.split('.')[1].strip().lower()}.\n"
        )
    root = _kb(tmp_path, pages)
    compile_offline(root)
    for source, article in _articles(root).items():
        body = article.body
        assert body.count("```") % 2 == 0, (source, body)
        assert "```python\ndef create_app(test_config=None):" in body, (source, body)
        assert "    from . import db\n    db.init_app(app)" in body, (source, body)


def test_more_sphinx_and_mkdocs_constructs_and_org_and_html(tmp_path):
    sphinx = """
        .. |project| replace:: Widgetry

        ##################
        Widgets reference
        ##################

        |project| ships widgets [#f1]_. See the glossary_.

        .. list-table:: Sizes
           :header-rows: 1

           * - Size
             - Pixels
           * - small
             - 16

        .. raw:: html

           <div class="secret">raw html</div>

        .. [#f1] Since version 1.0.

        .. _glossary: https://example.com/glossary
    """
    mkdocs = """
        ---
        title: "User guide"
        ---

        # Getting started { #start }

        Widgetry turns YAML into widgets, used by the HTML team.[^1] It is fast.

        --8<-- "includes/shared.md"

        -   :material-clock-fast: __Set up in 5 minutes__

        ``` { .python .annotate }
        print("hi")
        ```

        *[HTML]: Hyper Text Markup Language

        [^1]: A footnote.
    """
    root = _kb(tmp_path, {
        "sphinx/widgets.rst": sphinx,
        "mk/guide.md": mkdocs,
        "mk/includes/shared.md": "Shared paragraph from a snippet file, included where it is named.\n",
        "notes.org": "#+TITLE: Org notes\n#+AUTHOR: me\n\n* Plans\nSome org text about the plan for this week.\n",
        "page.html": "<html><head><title>Pricing | Acme</title></head><body><nav>Home About</nav><main>"
                     "<h1>Pricing</h1><p>The Solo plan costs $9 per month and includes every feature.</p>"
                     "<h2>Teams</h2><p>Team plans start at five seats.</p></main></body></html>",
    })
    compile_offline(root)
    articles = _articles(root)
    widgets = articles["raw/sphinx/widgets.rst"]
    assert widgets.title == "Widgets reference"
    assert widgets.summary == "Widgetry ships widgets."  # substitution resolved, footnote mark left out
    assert "See the [glossary](https://example.com/glossary)." in widgets.body
    assert "| Size | Pixels |\n|---|---|\n| small | 16 |" in widgets.body
    assert "secret" not in widgets.body and "[1] Since version 1.0." in widgets.body
    guide = articles["raw/mk/guide.md"]
    assert (guide.title, guide.summary) == ("User guide", "Widgetry turns YAML into widgets, used by the HTML team.")
    assert "## Getting started\n" in guide.body and "{ #start }" not in guide.body
    # (plain text: the compile may link the sentence to the article the snippet file became)
    assert "Shared paragraph from a snippet file, included where it is named." in plain_text(guide.body)
    assert "--8<--" not in guide.body
    assert "```python\nprint(\"hi\")\n```" in guide.body and ":material-" not in guide.body and "*[HTML]" not in guide.body
    org = articles["raw/notes.org"]
    assert (org.title, org.summary) == ("Org notes", "Some org text about the plan for this week.")
    assert "## Plans" in org.body and "#+" not in org.body
    assert articles["raw/page.html"].title == "Pricing"
    for line in _catalog_lines(root):
        assert not MARKUP.search(_catalog_text(line)), line


def test_rst_includes_stay_inside_raw_and_end(tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("TOP SECRET outside raw\n", encoding="utf-8")
    root = _kb(tmp_path, {
        "docs/page.rst": """
            Page
            ====

            Text of the page that includes other files for its readers.

            .. include:: page.rst

            .. include:: loop.rst

            .. include:: link.txt

            .. literalinclude:: big.txt
        """,
        "docs/loop.rst": "Loop text included once.\n\n.. include:: page.rst\n\n.. include:: loop.rst\n",
        "docs/big.txt": "x" * 300_000,
    })
    (root / "raw" / "docs" / "link.txt").symlink_to(outside)
    report = compile_offline(root)
    body = _articles(root)["raw/docs/page.rst"].body
    assert plain_text(body).count("Loop text included once.") == 1  # ("Loop" may link its article)
    assert "TOP SECRET" not in body and "xxxxxxxx" not in body
    notes = " ".join(manifest(root)["sources"]["raw/docs/page.rst"].get("notes", []))
    assert "link.txt: not a readable file of raw/" in notes and "big.txt: larger than 256,000 bytes" in notes
    assert any(s["path"] == "raw/docs/link.txt" for s in report.skipped)


def test_docusaurus_and_pandoc_containers_become_quoted_notes(tmp_path):
    page = """
        # Setup

        Intro paragraph for the setup page of the project.

        :::tip My tip
        Use the **fast** path.
        :::

        ::: warning
        Careful here.
        :::

        :::note[Heads up]
        Nested:

        :::danger
        Deep.
        :::

        :::

        ::: mypkg.module
            options:
              show_root_heading: true

        End of the page.
    """
    root = _kb(tmp_path, {"setup.md": page})
    compile_offline(root)
    body = _articles(root)["raw/setup.md"].body
    assert "> **My tip:** Use the **fast** path." in body and "> **Warning:** Careful here." in body
    assert "> **Heads up:** Nested:\n>\n> > **Danger:** Deep." in body
    assert "> **API reference:** `mypkg.module`" in body and "show_root_heading" not in body
    assert not re.search(r"^\s*:::", body, re.M), body


def test_sphinx_built_html_page_has_its_own_title(tmp_path):
    html = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<title>Quickstart — Flask Documentation (3.1.x)</title></head><body>
<div class="related"><ul><li><a href="index.html">Flask Documentation</a> »</li></ul></div>
<div class="body" role="main"><section id="quickstart">
<h1>Quickstart<a class="headerlink" href="#quickstart" title="Link to this heading">¶</a></h1>
<p>This page gives a good introduction to Flask and how to write a first application.</p>
<section id="minimal"><h2>A Minimal Application<a class="headerlink" href="#minimal">¶</a></h2>
<p>A minimal Flask application looks something like the example on this page.</p></section></section></div>
<div class="footer">© Copyright 2010 Pallets.</div></body></html>"""
    root = _kb(tmp_path, {"html/quickstart.html": html})
    compile_offline(root)
    article = _articles(root)["raw/html/quickstart.html"]
    assert article.title == "Quickstart"
    assert article.summary == "This page gives a good introduction to Flask and how to write a first application."
    assert "¶" not in article.body and "## A Minimal Application\n" in article.body


def test_markdown_snippets_are_bounded_like_includes(tmp_path):
    """A snippet that includes another file many times at every level (or itself) costs at most
    MAX_INCLUDES reads per document, each file once, like reST includes: not N ** depth."""
    many = "\n".join(['--8<-- "part.md"'] * 10)
    root = _kb(tmp_path, {
        "docs/page.md": f"# Page\n\nText of the page that pulls in shared parts for its readers.\n\n{many}\n\n--8<-- \"page.md\"\n",
        "docs/part.md": f"Shared part text.\n\n{many}\n",
    })
    calls = []
    from kb_ai.compile.formats.context import ReadContext
    real = ReadContext.include

    def counting(self, target):
        calls.append(target)
        return real(self, target)

    import pytest
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ReadContext, "include", counting)
        compile_offline(root)
    body = _articles(root)["raw/docs/page.md"].body
    assert body.count("Shared part text.") == 1
    assert len(calls) <= 200, len(calls)  # on main: 10 + 100 + 1,000 + 10,000 + ... reads


def test_an_autodoc_directive_keeps_the_text_written_under_it(tmp_path):
    """``.. autoclass:: TTLCache(maxsize, ttl)`` with a paragraph and an example under it (as
    cachetools' docs write them): the signature becomes the API reference note and the text under
    it is kept, not dropped with the directive."""
    page = ("Caches\n======\n\n.. autoclass:: TTLCache(maxsize, ttl, timer=time.monotonic)\n   :members: popitem\n\n"
            "   This class associates a time-to-live value with each item.\n\n   .. testcode::\n\n"
            "      cache = TTLCache(maxsize=10, ttl=60)\n\n.. autofunction:: cached\n")
    root = _kb(tmp_path, {"docs/caches.rst": page})
    compile_offline(root)
    body = _articles(root)["raw/docs/caches.rst"].body
    assert "> **API reference:** `TTLCache(maxsize, ttl, timer=time.monotonic)`" in body
    assert "This class associates a time-to-live value with each item." in body
    assert "cache = TTLCache(maxsize=10, ttl=60)" in body
    assert "> **API reference:** `cached`" in body and ":members:" not in body
