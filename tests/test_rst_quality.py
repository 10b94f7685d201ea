"""Compile quality on real reST and Markdown (issue 15, item 3 and the blind outside check): a
cited passage's quote is the page's words as a reader sees them (``__init__.py`` is not bold
"init", ``*args`` keeps its star), ``.. sectnum::`` does not number the title, authors
(``moduleauthor``, ``:author:``) are kept as readable text and never the page's summary, and a
``.txt`` file written in reST is read as reST while plain text stays as it is."""

from __future__ import annotations

import html
import io
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb_ai.cli import cli
from kb_ai.compile.readers import parse_document
from kb_ai.server.render import render_markdown
from kb_ai.store.articles import split_frontmatter
from kb_ai.store.markdown_text import plain_text

from test_compile_formats import _articles, _catalog_lines, _kb
from compile_checks import compile_offline

GSUTIL = Path("/usr/lib/google-cloud-sdk/platform/gsutil/third_party")
GIT_NOTES = Path("/usr/share/doc/git/RelNotes/2.39.0.txt")
DEMO_RELEASE = Path(__file__).resolve().parents[1] / "examples/demo/raw/engineering/release-process.txt"


def _shown(markdown: str) -> str:
    """The text a reader sees of ``markdown`` in the rendered page (the wiki's own renderer)."""
    rendered = render_markdown(markdown, from_path="t/a.md").html
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", rendered)).split())


def _real(path: Path) -> bytes:
    if not path.is_file():
        pytest.skip(f"{path} is not on this machine")
    return path.read_bytes()


# -- 1. a quote is what a reader sees --------------------------------------------------------------

HOSTILE_MARKDOWN = [
    "See the [pyparsing __init__.py](http://x) file.",  # the renderer shows bold "init": so does the quote
    "See the [pyparsing \\_\\_init\\_\\_.py](http://x) file.",
    "use *args and **kwargs here",
    "5 * 3 = 15 and 4 * 2",
    "snake_case_word and _private and file_name_*.txt",
    "Set UVICORN_* variables or *.md files",
    "mid*word*emph and mid_word_emph",
    "code `a*b*c` and `__x__` and ``a `b` c`` here",
    "escaped \\*not em\\* and \\_no\\_ and a\\\\b and \\`tick\\`",
    "**Note**: *In pyparsing, ``parseString()`` is renamed*",
    "***strong em*** and **bold with _under_ inside**",
    "*open but never closed and a ** b ** c",
    "**a* and *a** and _a_b_",
    "Link [a_b](c_d.md) and __x__ and [t*x*t](y.md)",
    "x &lt; y &amp; z and AT&T and &copy without its semicolon",
]


@pytest.mark.parametrize("markdown", HOSTILE_MARKDOWN)
def test_plain_text_is_what_the_rendered_page_shows(markdown):
    assert plain_text(markdown) == _shown(markdown)


@pytest.mark.parametrize("text", [
    "pyparsing __init__.py file", "2*3*4", "*args and **kwargs", "a\\*b and a\\b", "`x` and ``y``", "[a](b) and [a][b]",
    "_private_ name", "snake_case_word", "UVICORN_*", "# not a heading", "- not an item", "1. not a step",
    "> not a quote", "***a***", "x_*y*_z", "see [1] and [2]", "![img](x)", "_a_b_", "foo__bar__baz", "(*)",
    'the form "<salutation>, <addressee>!"', "a <b>tag</b> and <!-- no comment --> and c<d", "AT&T &amp; &nbsp; &#169;",
])
def test_text_written_as_markdown_reads_back_as_written(text):
    from kb_ai.store.inline_markup import escape_block_start, escape_text  # noqa: PLC0415 (new in issue 15)

    markdown = escape_block_start(escape_text(text))
    assert _shown(markdown) == text
    assert plain_text(markdown) == text
    if "_" in text and not re.search(r"(?<!\w)_|_(?!\w)", text):
        assert markdown == text  # an underscore inside a word needs no escape


PYPARSING_README = """\
PyParsing -- A Python Parsing Module
====================================

Introduction
============

The pyparsing module is an alternative approach to creating and executing simple grammars.

License
=======

MIT License. See header of the `pyparsing __init__.py
<https://github.com/pyparsing/pyparsing/blob/master/pyparsing/__init__.py#L1-L23>`__ file.

Star arguments such as *args and 2*3 keep their stars; ``__init__`` in code too.

A greeting of the form "<salutation>, <addressee>!" is parsed, &nbsp; is not a space.
"""


def test_a_cited_quote_of_an_rst_page_keeps_the_underscores_of_its_link_text(tmp_path):
    root = _kb(tmp_path, {"pyparsing/README.rst": PYPARSING_README})
    compile_offline(root)
    article = _articles(root)["raw/pyparsing/README.rst"]
    shown = _shown(article.body)
    assert "See header of the pyparsing __init__.py file." in shown
    assert "Star arguments such as *args and 2*3 keep their stars; __init__ in code too." in shown
    assert 'A greeting of the form "<salutation>, <addressee>!" is parsed, &nbsp; is not a space.' in shown
    result = CliRunner().invoke(cli, ["--kb", str(root), "ask", "--json", "--offline",
                                      "Which license does pyparsing use?"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    path = next(c["path"] for c in data["citations"] if "pyparsing" in c["path"])
    body = split_frontmatter((root / "wiki" / path).read_text(encoding="utf-8"), path)[1]
    quotes = [p for c in data["citations"] for p in c.get("passages", ())]
    license_quote = next(p for p in quotes if "MIT License" in p["quote"])
    assert "pyparsing __init__.py file" in license_quote["quote"]
    assert license_quote["quote"] in _shown(body)
    assert plain_text(body[license_quote["start"]:license_quote["end"]]).startswith(license_quote["quote"])


def test_real_pyparsing_readme_license_line_reads_as_written(tmp_path):
    data = _real(GSUTIL / "pyparsing/README.rst")
    parsed = parse_document("raw/pyparsing/README.rst", data)
    assert "MIT License. See header of the pyparsing __init__.py file." in _shown(parsed.text)
    assert "MIT License. See header of the pyparsing __init__.py file." in plain_text(parsed.text)


def test_docx_text_with_markdown_characters_reads_as_written(tmp_path):
    import docx

    document = docx.Document()
    document.add_heading("Packaging notes", level=0)
    document.add_paragraph("Every package has an __init__.py file; 2*3*4 is 24 and *args stays.")
    document.add_paragraph("# not a heading but a hash sign")
    document.add_heading("Notes for C#", level=1)
    document.add_paragraph("The same layout holds for C# projects.")
    buffer = io.BytesIO()
    document.save(buffer)
    parsed = parse_document("raw/notes.docx", buffer.getvalue())
    assert parsed.title == "Packaging notes"
    shown = _shown(parsed.text)
    assert "Every package has an __init__.py file; 2*3*4 is 24 and *args stays." in shown
    rendered = render_markdown(parsed.text, from_path="a.md").html
    assert "# not a heading but a hash sign" in shown
    assert re.findall(r"<h\d[^>]*>([^<]*)</h\d>", rendered) == ["Notes for C#"]


# -- 2. .. sectnum:: does not number the title -----------------------------------------------------

NUMBERED = """\
==========================
Using the parsing module
==========================

:author: Ada Lovelace

.. sectnum::    :depth: 4

.. contents::   :depth: 4

The parsing module builds parsers from small pieces.

Steps to follow in C#
=====================

Define the grammar first.

Classes
-------

Each class is a piece of a grammar.
"""


def test_sectnum_numbers_neither_the_title_nor_the_headings(tmp_path):
    root = _kb(tmp_path, {"docs/howto.rst": NUMBERED})
    compile_offline(root)
    article = _articles(root)["raw/docs/howto.rst"]
    assert article.title == "Using the parsing module"
    assert "# Using the parsing module" in article.body
    assert "## Steps to follow" in article.body and "### Classes" in article.body
    assert "Steps to follow in C#" in _shown(article.body)  # a closing "#" is not a closing hash run
    assert not re.search(r"^#+ [\d.]+\s", article.body, re.M), article.body
    assert any(line.startswith("- [Using the parsing module](") for line in _catalog_lines(root))


@pytest.mark.parametrize(("name", "title"), [("HowToUsePyparsing.rst", "Using the pyparsing module"),
                                             ("whats_new_in_3_0_0.rst", "What's New in Pyparsing 3.0.0")])
def test_real_sectnum_pages_have_their_own_titles(name, title):
    parsed = parse_document(f"raw/pyparsing/{name}", _real(GSUTIL / "pyparsing/docs" / name))
    assert parsed.title == title
    assert parsed.text.startswith(f"# {title}\n")
    assert not re.search(r"^#+ \d", parsed.text, re.M)


# -- 3. authors kept, never the summary ------------------------------------------------------------

AUTHORED = """\

:mod:`crcmod.predefined` -- CRC calculation using predefined algorithms
=======================================================================

.. module:: crcmod.predefined
   :synopsis: CRC calculation using predefined algorithms
.. moduleauthor:: Craig McQueen
.. sectionauthor:: Craig McQueen

This module provides a function factory and a class for calculating CRCs of byte strings.

Algorithms
----------

.. codeauthor:: Jane Doe <jane@example.org>

The module offers predefined algorithms.
"""

DOCINFO = """\
=====================
Using the tool
=====================

:author: Paul McGuire
:address: someone@example.org

:revision: 3.1.3
:date: August, 2024

:copyright: Copyright 2003-2023 Paul McGuire.

:abstract: This document provides how-to instructions for the tool,
    an easy-to-use module for text parsers.

Note: while this content is still valid, there are more detailed descriptions elsewhere.
"""

FIELDS_FIRST = """\
:author: Grace Hopper
:orphan:
:tocdepth: 2
:copyright: Copyright 2024 Grace Hopper.

Compilers
=========

A compiler turns source code into machine code in several passes.
"""


def test_author_directives_are_kept_as_readable_text_and_not_the_summary(tmp_path):
    root = _kb(tmp_path, {"crcmod/predefined.rst": AUTHORED, "tool/howto.rst": DOCINFO,
                          "cc/compilers.rst": FIELDS_FIRST})
    compile_offline(root)
    articles = _articles(root)
    crc = articles["raw/crcmod/predefined.rst"]
    shown = _shown(crc.body)
    assert "Module author: Craig McQueen" in shown and "Section author: Craig McQueen" in shown
    assert "Code author: Jane Doe <jane@example.org>" in shown or "Code author: Jane Doe jane@example.org" in shown
    assert crc.summary == "This module provides a function factory and a class for calculating CRCs of byte strings."
    howto = articles["raw/tool/howto.rst"]
    shown = _shown(howto.body)
    for field in ("Author: Paul McGuire", "Revision: 3.1.3", "Copyright: Copyright 2003-2023 Paul McGuire."):
        assert field in shown
    assert howto.summary == ("This document provides how-to instructions for the tool, an easy-to-use module for "
                             "text parsers.")
    assert "abstract" not in howto.body.lower()
    compilers = articles["raw/cc/compilers.rst"]
    assert compilers.title == "Compilers"
    assert compilers.body.index("# Compilers") < compilers.body.index("**Author:** Grace Hopper")
    assert "**Copyright:** Copyright 2024 Grace Hopper." in compilers.body
    assert "orphan" not in compilers.body and "tocdepth" not in compilers.body
    assert compilers.summary == "A compiler turns source code into machine code in several passes."
    for line in _catalog_lines(root):
        assert "author" not in line.lower() and "copyright" not in line.lower(), line


def test_real_crcmod_predefined_names_its_author(tmp_path):
    data = _real(GSUTIL / "crcmod/docs/source/crcmod.predefined.rst")
    root = _kb(tmp_path, {"crcmod/crcmod.predefined.rst": data})
    compile_offline(root)
    article = _articles(root)["raw/crcmod/crcmod.predefined.rst"]
    assert "Module author: Craig McQueen" in _shown(article.body)
    assert article.summary.startswith("This module provides a function factory")


# -- 4. a .txt written in reST is read as reST; plain text stays -----------------------------------

RST_TXT = """\
====================================
 Widget - Widgets for Testing
====================================

:Version: |release|
:Date: |today|
:Homepage: `Widget Homepage`_
:License: `BSD License`_

.. _Widget Homepage: https://example.org/widget
.. _BSD License: https://example.org/widget/LICENSE.txt

.. module:: widget
   :synopsis: Widget object and testing library.

.. index:: introduction

TOC
+++

.. toctree::
   :maxdepth: 2

   changelog

Introduction
++++++++++++

widget is a library for testing in Python. Use ``widget.make()`` to build one.

The current version is |release|.
"""

PLAIN_TXT = """\
Widget v2.0 Release Notes
=========================

UI, Workflows & Features
------------------------

 * "widget grep" learned to expand lazily and on
   demand in a sparse checkout.

 * By default, use of monitors is disabled. Add knobs to
   make it workable on *BSD and __main__ scripts.

Fixes since v1.9
----------------

 * A crash at exit has been fixed.
"""

NOT_RST_TXT = """\
Notes on the build
==================

bpo-43008: Make the shell invoke :func:`sys.excepthook` in normal
cases and not in odd ones.  Their different behavior could be confusing.
   The affected events are '<<force-open-completions>>',
'<<expand-word>>' and '<<run-module>>'.
"""


def test_a_txt_file_in_rst_is_read_as_rst_and_plain_text_stays(tmp_path):
    root = _kb(tmp_path, {"widget/index.txt": RST_TXT, "widget/relnotes.txt": PLAIN_TXT, "widget/notes.txt": NOT_RST_TXT})
    compile_offline(root)
    articles = _articles(root)
    rst = articles["raw/widget/index.txt"]
    assert rst.title == "Widget - Widgets for Testing"
    assert not re.search(r"^\.\. |Version|Date|\+\+\+\+|:synopsis:|toctree", rst.body, re.M), rst.body
    assert "The current version is |release|." in rst.body  # Sphinx's placeholder in running text: as written
    assert "## Introduction" in rst.body and "`widget.make()`" in rst.body
    assert "**Homepage:** [Widget Homepage](https://example.org/widget)" in rst.body
    assert rst.summary == "widget is a library for testing in Python."
    plain = articles["raw/widget/relnotes.txt"]
    assert plain.title == "Widget v2.0 Release Notes"
    assert ' * "widget grep" learned to expand lazily and on\n   demand in a sparse checkout.' in plain.body
    assert "*BSD and __main__ scripts." in plain.body
    kept = articles["raw/widget/notes.txt"]
    assert ":func:`sys.excepthook`" in kept.body  # docutils would report errors: not reST, kept as written


def test_real_txt_files_rst_or_plain():
    mock = parse_document("raw/mock/docs/index.txt", _real(GSUTIL / "mock/docs/index.txt"))
    assert mock.kind == "rst" and mock.title == "Mock - Mocking and Testing Library"
    assert not re.search(r"^\.\. |:Version:|Version: \|release\||^\+\+\+", mock.text, re.M)
    assert "mock is a library for testing in Python." in mock.text
    for path in (GIT_NOTES, DEMO_RELEASE):
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        parsed = parse_document(f"raw/{path.name}", text.encode("utf-8"))
        assert parsed.kind == "text", path
        body_lines = [line for line in text.splitlines() if line.strip() and not set(line.strip()) <= set("=-")]
        assert all(line.rstrip() in parsed.text for line in body_lines), path  # every line as written


def test_a_page_with_escaped_underscores_is_found_by_the_word_as_written(tmp_path):
    from helpers import build_kb

    kb = build_kb(tmp_path, ("pkg/layout.md", "Package layout", "How the files of a package are laid out.",
                             "# Package layout\n\nThe \\_\\_version\\_\\_ string lives in the package's "
                             "\\_\\_init\\_\\_.py file, next to the license header.\n"))
    result = CliRunner().invoke(cli, ["--kb", str(kb.root), "ask", "--json", "--offline",
                                      "Where does __version__ live?"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [c["path"] for c in data["citations"]][:1] == ["pkg/layout.md"], data
    assert "The __version__ string lives in the package's __init__.py file" in data["citations"][0]["quote"]


def test_nested_links_are_quoted_as_commonmark_reads_them():
    # The inner link is the link (kaas's one link finder, CommonMark): each text once, the inner
    # target never; markup inside link texts as anywhere else. Python-Markdown shows the outer
    # brackets' text instead ("outer [inner](a.md) text"): the one known difference between a
    # quote and the rendered page.
    assert plain_text("[outer [inner](a.md) text](b.md) tail") == "[outer inner text](b.md) tail"
    assert plain_text("[a [b [c](x.md) d](y.md) e](z.md)") == "[a [b c d](y.md) e](z.md)"
    assert plain_text("![alt [in](a.md)](i.png) and [*em* `co*de` \\_x\\_](l.md)") == "alt in and em co*de _x_"


def test_a_txt_read_as_rst_includes_nothing_from_outside_raw(tmp_path):
    root = _kb(tmp_path, {"docs/index.txt": ".. module:: widget\n\nWidget\n======\n\nThe widget library builds widgets.\n\n"
                                             ".. include:: ../../../etc/passwd\n\n.. literalinclude:: /etc/hostname\n"})
    compile_offline(root)
    article = _articles(root)["raw/docs/index.txt"]
    assert article.title == "Widget" and "The widget library builds widgets." in article.body
    assert "root:" not in article.body and ".. include" not in article.body and "passwd" not in article.body


def test_rst_lines_that_look_like_markdown_blocks_stay_text():
    text = ("Title\n=====\n\n| first line\n| # not a heading\n| - not an item\n\n"
            "Paragraph about C# and <T> generics.\n")
    parsed = parse_document("raw/a.rst", text.encode("utf-8"))
    rendered = render_markdown(parsed.text, from_path="a.md").html
    assert re.findall(r"<h\d[^>]*>", rendered) == ['<h1 id="h-title">']
    assert "<li>" not in rendered
    assert "first line # not a heading - not an item Paragraph about C# and <T> generics." in _shown(parsed.text)
