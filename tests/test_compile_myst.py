"""MyST Markdown (Sphinx's Markdown) is read as what it is: directives become Markdown by the
reST path's rules, roles their text or a link, ``(label)=`` lines labels known to ``{ref}``
across raw/, the title once; mdBook's ``{{#include}}`` goes through ``ReadContext.include``."""

from __future__ import annotations

import re
from pathlib import Path

from kb_ai.store.articles import load_article

from compile_checks import compile_offline

OPTIONS = """(options-page)=

# Options

## Options

The {class}`~click.Command` class wraps a function, and {exc}`EOFError` is raised at the end of input.
Use {func}`click.option` for options; see {ref}`the parameter guide <params-page>` and {doc}`params`.

```{note}
Options are optional, as the name says.
```

:::{warning}
Never put secrets in defaults.
:::

```{deprecated} 8.0
Use a callback instead.
```

```{contents}
:local:
```

```{code-block} python
:caption: an example

@click.option("--count")
def hello(count): ...
```

```{eval-rst}
.. note:: Written in reST inside MyST.
```

```python
# {func}`kept` in code: as written
```

Inline code stays: `{func}` is a role's syntax.
"""

PARAMS = """(params-page)=
# Parameters

Parameters are options and arguments.
"""

BOOK = """# Book

{{#include chapter.md}}

{{#include ../../../etc/passwd}}
"""

LEFTOVER = re.compile(r"\{[\w:.+-]+\}`|^\([^()\s]+\)=\s*$|^(?:```|:::)\{", re.M)


def _compiled(root: Path, files: dict[str, str]):
    for name, text in files.items():
        (root / "raw" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "raw" / name).write_text(text)
    return compile_offline(root)


def _body(root: Path, source: str) -> str:
    wiki = root / "wiki"
    for path in wiki.rglob("*.md"):
        rel = path.relative_to(wiki).as_posix()
        if path.name in ("index.md", "master-index.md", "log.md"):
            continue
        article = load_article(wiki, rel)
        if f"raw/{source}" in article.sources:
            return article.body
    raise AssertionError(source)


def test_myst_directives_roles_and_labels_become_markdown(tmp_path):
    _compiled(tmp_path, {"docs/options.md": OPTIONS, "docs/params.md": PARAMS})
    body = _body(tmp_path, "docs/options.md")
    prose = body.split("```python\n# {func}")[0]
    assert not LEFTOVER.search(prose), prose
    assert body.count("Options") >= 1 and "## Options" not in body  # the title once
    assert "The `Command` class wraps" in body and "`EOFError` is raised" in body and "`click.option`" in body
    assert "> **Note:** Options are optional" in body and "> **Warning:** Never put secrets" in body
    assert "> **Deprecated since version 8.0:** Use a callback instead." in body
    assert "```python\n@click.option(\"--count\")" in body and ":caption:" not in body and ":local:" not in body
    assert "Written in reST inside MyST." in body and ".. note::" not in body
    assert "# {func}`kept` in code: as written" in body and "`{func}` is a role's syntax" in body
    # {ref} and {doc} link to the article the target source became (the link stage repoints them).
    params = [p for p in (tmp_path / "wiki").rglob("*.md") if "parameters" in p.name][0]
    target = params.relative_to(tmp_path / "wiki" / "docs").as_posix()
    assert f"[the parameter guide]({target}" in body, body
    assert f"[Parameters]({target}" in body, body


def test_mdbook_includes_go_through_the_read_context(tmp_path):
    report = _compiled(tmp_path, {"book/src/book.md": BOOK, "book/src/chapter.md": "The chapter's own text.\n"})
    body = _body(tmp_path, "book/src/book.md")
    assert "The chapter's own text." in body and "{{#include" not in body and "passwd" not in body.replace(
        "etc/passwd", "")
    reasons = " ".join(p["reason"] for p in report.partial if p["path"] == "raw/book/src/book.md")
    assert "outside raw/" in reasons, report.partial


def test_plain_markdown_is_not_taken_for_myst():
    from kb_ai.compile.formats.myst import is_myst

    assert not is_myst("# Title\n\nA set {like this} and a dict {'a': 1}.\n\n```python\nx = {1: 2}\n```\n")
    assert is_myst("(label)=\n# Title\n") and is_myst("See {func}`f`.\n") and is_myst(":::{note}\nx\n:::\n")
