"""A project's docs folder in raw/ (issue 28, items 1 and 4): what is not a document (images,
stylesheets, build files, source code, hidden and build-output folders, an SVG or code whatever
its name) is left out and reported once per reason, ``raw/.kaasignore`` (gitignore syntax) lets
a user leave out more or bring a file back, a source left out later leaves its article as a
deleted one does, and ``kaas add`` (a file or a folder) and the server's upload accept exactly
what compile reads, by the same rules."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from starlette.testclient import TestClient

from kb_ai.cli import cli
from kb_ai.config import Settings
from kb_ai.server import create_app
from kb_ai.store.kb import init_kb

from fixtures.compile.make import PNG_1PX

SVG = '<?xml version="1.0" encoding="UTF-8"?>\n<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10">\n' \
      '  <title>kraken logo</title><path d="M0 0h10v10z"/>\n</svg>\n'
CONF_PY = ('# SPDX-License-Identifier: MIT\n\nimport os\nfrom importlib import metadata\n\n'
           '# -- General configuration ---------------------------------------\n\n'
           'extensions = [\n    "myst_parser",\n    "sphinx.ext.autodoc",\n    "sphinx.ext.intersphinx",\n]\n'
           'project = "kraken"\nauthor = "The kraken contributors"\nrelease = metadata.version("kraken")\n'
           'html_theme = "furo"\nhtml_static_path = ["_static"]\n')
MAKEFILE = ("SPHINXOPTS    ?=\nSPHINXBUILD   ?= sphinx-build\nSOURCEDIR     = .\nBUILDDIR      = _build\n\n"
            "help:\n\t@$(SPHINXBUILD) -M help \"$(SOURCEDIR)\" \"$(BUILDDIR)\" $(SPHINXOPTS)\n\n"
            ".PHONY: help Makefile\n\n%: Makefile\n\t@$(SPHINXBUILD) -M $@ \"$(SOURCEDIR)\" \"$(BUILDDIR)\"\n")
CSS = ".sidebar-logo {\n  max-width: 60%;\n}\n\nbody {\n  font-family: sans-serif;\n  color: #222;\n}\n"
EXAMPLE_PY = ('"""Release a kraken from its cage."""\n\nimport kraken\n\n\ndef main():\n'
              '    beast = kraken.Kraken(tentacles=8)\n    beast.release()\n    return beast\n\n\n'
              'if __name__ == "__main__":\n    main()\n')
INDEX_RST = ("Kraken\n======\n\nKraken releases sea monsters from their cages on a schedule you define.\n\n"
             ".. toctree::\n   :maxdepth: 2\n\n   guide\n\nInstallation\n------------\n\n"
             "Install it with pip and import it; the release schedule is read from the harbour file.\n\n"
             ".. literalinclude:: examples/release.py\n")
GUIDE_MD = ("---\nmyst:\n  heading_anchors: 2\n---\n# User guide\n\n```{note}\nThe harbour file must exist.\n```\n\n"
            "Every kraken has eight tentacles and a cage number. A release opens the cage at dawn.\n")


def _kaas(*args: str):
    return CliRunner().invoke(cli, list(args))


def _put(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))


def docs_folder(root: Path) -> None:
    """A Sphinx project's docs/ as a user copies it: documents, and everything else it holds."""
    _put(root, {
        "index.rst": INDEX_RST, "guide.md": GUIDE_MD, "conf.py": CONF_PY, "Makefile": MAKEFILE,
        "make.bat": "@ECHO OFF\npushd %~dp0\nif \"%SPHINXBUILD%\" == \"\" (\n\tset SPHINXBUILD=sphinx-build\n)\n",
        "requirements.txt": "sphinx>=7\nfuro\nmyst-parser\n", "_static/logo.svg": SVG,
        "_static/custom.css": CSS, "_static/diagram.png": PNG_1PX, "examples/release.py": EXAMPLE_PY,
        "_build/html/index.html": "<html><body><h1>Kraken</h1><p>Built page of the kraken docs.</p></body></html>",
        ".git/config": "[core]\n\trepositoryformatversion = 0\n",
        "notes/kraken.txt": SVG,  # an image whatever its name says
        "notes/snippet.txt": CSS + "a:hover {\n  color: red;\n}\n",  # a stylesheet named .txt
        "notes/HARBOUR": "The harbour file lists one cage per line, with the hour its kraken may leave.\n",
    })


def _compile(kb: Path) -> dict:
    result = _kaas("--kb", str(kb), "compile", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _wiki_text(kb: Path) -> str:
    return "".join(p.read_text() for p in (kb / "wiki").rglob("*.md"))


def test_a_docs_folder_compiles_its_documents_and_reports_the_rest_by_reason(tmp_path):
    _kaas("init", str(tmp_path))
    docs_folder(tmp_path / "raw")
    report = _compile(tmp_path)
    sources = sorted(s for a in report["created"] for s in _sources(tmp_path, a))
    assert sources == ["raw/guide.md", "raw/index.rst", "raw/notes/HARBOUR"], report["created"]
    assert not report["skipped"], report["skipped"]  # nothing failed to read: the rest is not documents
    groups = {g["reason"]: (g["count"], g["examples"]) for g in report["left_out"]}
    assert groups == {
        "build or configuration file": (4, ["raw/Makefile", "raw/conf.py", "raw/make.bat"]),
        "image": (2, ["raw/_static/diagram.png", "raw/_static/logo.svg"]),
        "stylesheet": (1, ["raw/_static/custom.css"]),
        "source code": (1, ["raw/examples/release.py"]),
        "build output or tool folder": (1, ["raw/_build/"]),
        "hidden folder": (1, ["raw/.git/"]),
        "image (SVG content)": (1, ["raw/notes/kraken.txt"]),
        "code or configuration, not prose (by content)": (1, ["raw/notes/snippet.txt"]),
    }
    assert report["sources"]["left_out"] == 12 and report["sources"]["skipped"] == 0
    text = _wiki_text(tmp_path)
    assert "<svg" not in text and "SPDX" not in text and "SPHINXBUILD" not in text and "font-family" not in text
    assert "beast = kraken.Kraken(tentacles=8)" in text  # an example left out as a source is still included
    again = _kaas("--kb", str(tmp_path), "compile").stdout  # the no-op run reports the same, by reason
    assert "12 left out (not documents)" in again
    assert "4 left out: build or configuration file (raw/Makefile, raw/conf.py, raw/make.bat, ... and 1 more)" in again
    assert "raw/.kaasignore" in again and "raw/_static/logo.svg:" not in again


def test_five_hundred_images_are_one_line_of_the_report(tmp_path):
    _kaas("init", str(tmp_path))
    _put(tmp_path / "raw", {"guide.md": GUIDE_MD, **{f"img/shot-{n:03}.png": PNG_1PX for n in range(500)}})
    report = _compile(tmp_path)
    assert report["left_out"] == [{"reason": "image", "count": 500,
                                   "examples": ["raw/img/shot-000.png", "raw/img/shot-001.png", "raw/img/shot-002.png"]}]
    text = _kaas("--kb", str(tmp_path), "compile").stdout
    assert text.count("shot-") == 3 and "... and 497 more" in text


def _sources(kb: Path, article: str) -> list[str]:
    import frontmatter

    return list(frontmatter.load(kb / "wiki" / article).get("sources") or [])


def test_kaasignore_leaves_out_more_and_brings_code_back(tmp_path):
    _kaas("init", str(tmp_path))
    docs_folder(tmp_path / "raw")
    _put(tmp_path / "raw", {
        "drafts/plan.md": "# Plan\n\nA draft nobody should read yet.\n",
        ".kaasignore": "# gitignore syntax\ndrafts/\n!examples/*.py\n/notes/HARBOUR\n",
    })
    report = _compile(tmp_path)
    sources = sorted(s for a in report["created"] for s in _sources(tmp_path, a))
    assert sources == ["raw/examples/release.py", "raw/guide.md", "raw/index.rst"]
    groups = {g["reason"]: g["examples"] for g in report["left_out"]}
    assert groups["ignored by raw/.kaasignore"] == ["raw/drafts/", "raw/notes/HARBOUR"]
    listed = [e for g in report["left_out"] for e in g["examples"]] + [s["path"] for s in report["skipped"]]
    assert "raw/.kaasignore" not in listed  # the rules are not a source, nor reported as one
    [article] = [a for a in report["created"] if _sources(tmp_path, a) == ["raw/examples/release.py"]]
    body = (tmp_path / "wiki" / article).read_text()
    assert "```python\n\"\"\"Release a kraken from its cage.\"\"\"" in body  # read as code, not as Markdown
    assert "A draft nobody" not in _wiki_text(tmp_path)


def test_a_bad_kaasignore_stops_the_compile_with_its_reason(tmp_path):
    _kaas("init", str(tmp_path))
    _put(tmp_path / "raw", {"guide.md": GUIDE_MD, ".kaasignore": "drafts/\n!\n"})
    result = _kaas("--kb", str(tmp_path), "compile")
    assert result.exit_code == 2 and "raw/.kaasignore" in result.stderr, result.output
    assert not list((tmp_path / "wiki").rglob("guide*.md"))


def test_a_source_left_out_later_leaves_its_article_flagged_and_gets_it_back(tmp_path):
    _kaas("init", str(tmp_path))
    _put(tmp_path / "raw", {"guide.md": GUIDE_MD, "tools/deploy.sh": "#!/bin/sh\nset -e\nrsync -a site/ host:/srv\n",
                            ".kaasignore": "!tools/\n"})
    first = _compile(tmp_path)
    [article] = [a for a in first["created"] if _sources(tmp_path, a) == ["raw/tools/deploy.sh"]]
    (tmp_path / "raw" / ".kaasignore").unlink()
    second = _compile(tmp_path)
    assert (tmp_path / "wiki" / article).is_file()  # kept,
    assert article in second["orphaned"] and _sources(tmp_path, article) == []  # flagged, as for a deleted source
    assert any("raw/tools/deploy.sh is left out now (source code)" in n for n in second["notes"])
    (tmp_path / "raw" / ".kaasignore").write_text("!tools/\n")
    third = _compile(tmp_path)
    assert _sources(tmp_path, article) == ["raw/tools/deploy.sh"] and not third["created"]  # the same article


def test_kaas_add_takes_what_compile_reads_and_folders(tmp_path):
    kb = tmp_path / "kb"
    _kaas("init", str(kb))
    docs = tmp_path / "docs"
    docs_folder(docs)
    single = _kaas("--kb", str(kb), "add", str(docs / "index.rst"), "--to", "single")
    assert single.exit_code == 0 and "added raw/single/index.rst" in single.stdout, single.output
    (kb / "raw" / ".kaasignore").write_text("docs/notes/\n")
    result = _kaas("--kb", str(kb), "add", str(docs))
    assert result.exit_code == 0, result.output
    stored = sorted(p.relative_to(kb / "raw").as_posix() for p in (kb / "raw").rglob("*") if p.is_file())
    assert stored == [".kaasignore", "docs/guide.md", "docs/index.rst", "single/index.rst"]
    assert "next: kaas compile" in result.stderr
    assert "4 left out: build or configuration file" in result.stderr
    assert "1 left out: ignored by raw/.kaasignore" in result.stderr and "notes/" in result.stderr
    as_json = [json.loads(line) for line in _kaas("--kb", str(kb), "add", "--json", str(docs)).stdout.splitlines()]
    assert {j.get("status") for j in as_json if "path" in j} == {"unchanged"}
    [groups] = [j["left_out"] for j in as_json if "left_out" in j]
    assert {"reason": "image", "count": 2, "examples": [str(docs / "_static/diagram.png"),
                                                         str(docs / "_static/logo.svg")]} in groups


def test_kaas_add_refuses_what_is_not_a_document_and_says_no_next_step(tmp_path):
    kb = tmp_path / "kb"
    _kaas("init", str(kb))
    _put(tmp_path, {"pics/a.png": PNG_1PX, "pics/b.svg": SVG, "logo.txt": SVG, "conf.py": CONF_PY})
    folder = _kaas("--kb", str(kb), "add", str(tmp_path / "pics"))
    assert folder.exit_code == 1 and "nothing in it is a document" in folder.stderr
    assert "next: kaas compile" not in folder.stderr
    files = _kaas("--kb", str(kb), "add", str(tmp_path / "logo.txt"), str(tmp_path / "conf.py"))
    assert files.exit_code == 1 and "next: kaas compile" not in files.stderr
    assert "logo.txt: not a document (image (SVG content))" in files.stderr
    assert "conf.py: not a document (build or configuration file)" in files.stderr and "!conf.py" in files.stderr
    assert sorted(p.name for p in (kb / "raw").iterdir()) == []
    (kb / "raw" / ".kaasignore").write_text("!conf.py\n")  # asked for: added, and compiled as code
    asked = _kaas("--kb", str(kb), "add", str(tmp_path / "conf.py"))
    assert asked.exit_code == 0 and "added raw/conf.py" in asked.stdout and "next: kaas compile" in asked.stderr


def test_the_upload_accepts_what_compile_reads_by_the_same_rules(tmp_path):
    init_kb(tmp_path)
    octet = {"Content-Type": "application/octet-stream"}
    with TestClient(create_app(Settings(kb=tmp_path), mcp=False)) as client:
        rst = client.post("/api/sources/upload?name=api.rst", content=INDEX_RST.encode(), headers=octet)
        assert rst.status_code == 201, rst.text
        for name, data, reason in (("logo.svg", SVG, "image"), ("logo.txt", SVG, "image (SVG content)"),
                                   ("custom.css", CSS, "stylesheet"), ("sheet.xls", "x", "cannot read this format")):
            refused = client.post("/api/sources/upload", params={"name": name}, content=data.encode(), headers=octet)
            assert refused.status_code == 400 and reason in refused.json()["error"]["message"], refused.text
        (tmp_path / "raw" / ".kaasignore").write_text("!*.css\n")
        asked = client.post("/api/sources/upload?name=custom.css", content=CSS.encode(), headers=octet)
        assert asked.status_code == 201, asked.text
    assert sorted(p.name for p in (tmp_path / "raw").iterdir()) == [".kaas-added.json", ".kaasignore", "api.rst", "custom.css"]  # uploads are recorded


PROSE_WITH_CODE = ("Deploying\n=========\n\nCopy the built site to the server and restart the service; the\n"
                   "old release stays in place until the new one answers its health check.\n\n"
                   "    rsync -a site/ host:/srv/site\n    systemctl restart site;\n\n"
                   "If the check fails, the switch is undone and the old release keeps serving.\n")


def test_text_is_judged_by_its_content_not_its_name(tmp_path):
    from kb_ai.compile.ingest import SkippedSource, Source, read_source, walk_raw

    _put(tmp_path / "raw", {
        "deploy.txt": PROSE_WITH_CODE,  # prose with some code in it: a document
        "page": "<!doctype html><html><head><title>Cages</title></head><body><p>Every cage has a number and "
                "a door that opens at dawn.</p></body></html>",  # HTML without an extension: read as HTML
        "icons.txt": SVG, "setup.txt": CONF_PY,
        "feed.txt": "<feed>\n" + "".join(f"<entry><id>{n}</id><v>{n}</v></entry>\n" for n in range(20)) + "</feed>\n",
    })
    read = {r.path: read_source(r) for r in walk_raw(tmp_path)}
    assert isinstance(read["raw/deploy.txt"], Source) and "health check" in read["raw/deploy.txt"].text
    assert isinstance(read["raw/page"], Source) and read["raw/page"].kind == "html"
    reasons = {p: r.reason for p, r in read.items() if isinstance(r, SkippedSource)}
    assert reasons == {"raw/icons.txt": "image (SVG content)", "raw/feed.txt": "markup, not prose (by content)",
                       "raw/setup.txt": "code or configuration, not prose (by content)"}
