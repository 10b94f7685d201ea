"""``kaas add PATH|URL``: files copied into raw/ by one set of rules (names, formats, collisions),
web pages fetched from a local site on 127.0.0.1 into raw/web/ with their title and URL, a
re-fetch as a revision, and the guards of a fetch (schemes, size, type, redirects, addresses)."""

from __future__ import annotations

import json
import os

import frontmatter
import pytest
from click.testing import CliRunner

from kb_ai.cli import cli
from kb_ai.compile.add import AddError, clean_name, store_source
from kb_ai.compile.fetch import FetchError, FetchPolicy, add_url, normalize_url

from web_fakes import FakeSite, article


@pytest.fixture
def kb(tmp_path):
    CliRunner().invoke(cli, ["init", str(tmp_path / "kb")])
    return tmp_path / "kb"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


def _kaas(kb, *args):
    return CliRunner().invoke(cli, ["--kb", str(kb), *args])


def test_add_copies_files_and_compile_uses_them(kb, tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text("# Kettle\n\nThe kettle is in the kitchen.\n")
    result = _kaas(kb, "add", str(notes))
    assert result.exit_code == 0, result.output
    assert "added raw/notes.md" in result.stdout and "kaas compile" in result.stderr
    assert (kb / "raw" / "notes.md").read_bytes() == notes.read_bytes()
    again = _kaas(kb, "add", str(notes))  # the same bytes: nothing to do
    assert "unchanged raw/notes.md" in again.stdout
    notes.write_text("# Kettle\n\nThe kettle moved to the office.\n")
    taken = _kaas(kb, "add", str(notes))  # a different file of the same name: never overwritten
    assert "added raw/notes-2.md" in taken.stdout and "taken" in taken.stdout
    assert "kitchen" in (kb / "raw" / "notes.md").read_text()
    replaced = _kaas(kb, "add", "--replace", str(notes))
    assert "updated raw/notes.md" in replaced.stdout and "office" in (kb / "raw" / "notes.md").read_text()
    into = _kaas(kb, "add", "--to", "hr/policies", str(notes))
    assert "added raw/hr/policies/notes.md" in into.stdout
    compiled = json.loads(_kaas(kb, "compile", "--json").stdout)
    assert compiled["sources"]["total"] == 3 and compiled["exit_code"] == 0


@pytest.mark.parametrize("name, expected", [
    ("../../etc/passwd.md", "passwd.md"),
    ("..\\..\\win.ini.txt", "win.ini.txt"),
    ("a\x1b]0;pwned\x07b.md", "a]0;pwnedb.md"),
    ("  spaced   name .md ", "spaced name .md"),
    ("x" * 300 + ".md", "x" * 157 + ".md"),
])
def test_hostile_names_become_one_safe_component(name, expected):
    assert clean_name(name) == expected


@pytest.mark.parametrize("name", ["", "..", "...", ".hidden.md", "dir/", "\x00\x01"])
def test_unusable_names_are_refused(name):
    with pytest.raises(AddError):
        clean_name(name)


def test_refusals_are_one_line_and_write_nothing(kb, tmp_path):
    image = tmp_path / "photo.png"
    image.write_bytes(b"\x89PNG....")
    folder = tmp_path / "docs"
    folder.mkdir()
    result = _kaas(kb, "add", str(image), str(folder), str(tmp_path / "missing.md"))
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("kaas: error:")]
    assert len(errors) == 3, result.stderr
    assert "not a document (image)" in errors[0] and "nothing in it is a document" in errors[1]
    assert "no such file" in errors[2]
    assert "next: kaas compile" not in result.stderr  # nothing was added
    assert sorted(os.listdir(kb / "raw")) == []
    (tmp_path / "x.md").write_text("x")
    escaped = _kaas(kb, "add", "--to", "../outside", str(tmp_path / "x.md"))
    assert escaped.exit_code == 1 and "inside raw/" in escaped.stderr and not (kb / "outside").exists()


def test_a_symlink_below_raw_is_never_written_through(kb, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (kb / "raw" / "linked").symlink_to(outside)
    with pytest.raises(AddError, match="symbolic link"):
        store_source(kb / "raw", "a.md", b"# A\n\ntext", folder="linked")
    assert list(outside.iterdir()) == []
    secret = tmp_path / "secret.md"
    secret.write_text("# Secret\n\nhunter2")
    (kb / "raw" / "same.md").symlink_to(secret)  # no oracle: a link is never read to compare
    with pytest.raises(AddError, match="symbolic link"):
        store_source(kb / "raw", "same.md", secret.read_bytes())
    assert secret.read_text() == "# Secret\n\nhunter2"


@pytest.mark.slow  # fetches, then compiles
def test_a_web_page_is_fetched_with_title_url_and_date_and_refetched_as_a_revision(kb):
    with FakeSite() as site:
        url = site.page("/guide/warranty?lang=en", article("Terms &lt;script&gt;alert(1)&lt;/script&gt;", "Version one of the terms."))
        first = _kaas(kb, "add", url + "#section")
        assert first.exit_code == 0, first.output
        files = list((kb / "raw" / "web").iterdir())
        assert len(files) == 1 and files[0].suffix == ".md"
        page = frontmatter.loads(files[0].read_text())
        assert page["source_url"] == url  # the fragment is not part of the page
        assert page["title"] == "Terms <script>alert(1)</script>"  # text, as the page says it (escaped where shown)
        assert "fetched_at" in page.metadata and "Version one" in page.content
        assert "Home | Blog" not in page.content and "Copyright" not in page.content  # readable content only
        assert "unchanged" in _kaas(kb, "add", url).stdout  # nothing changed: the file is left alone
        site.page("/guide/warranty?lang=en", article("Warranty terms", "Version two of the terms."))
        second = _kaas(kb, "add", url)
        assert "updated raw/web/" + files[0].name in second.stdout
        assert list((kb / "raw" / "web").iterdir()) == files  # the same file: a revision
        assert "Version two" in files[0].read_text()
        report = json.loads(_kaas(kb, "compile", "--json").stdout)
        assert report["exit_code"] == 0 and len(report["created"]) == 1


def test_fetch_guards(kb):
    raw = kb / "raw"
    with FakeSite() as site:
        for bad in ("file:///etc/passwd", "ftp://example.com/x", "javascript:alert(1)", "http://user:pw@127.0.0.1/",
                    "http://", "data:text/html,hi"):
            with pytest.raises(FetchError):
                add_url(raw, bad)
        site.routes["/big"] = (200, {"Content-Type": "text/html"}, b"<p>" + b"a" * 2_000_000 + b"</p>")
        with pytest.raises(FetchError, match="larger than"):
            add_url(raw, site.url + "/big", FetchPolicy(max_bytes=1_000_000))
        site.routes["/lying"] = (200, {"Content-Type": "text/html", "Content-Length": "10"}, b"<p>short</p>")
        site.routes["/zip"] = (200, {"Content-Type": "application/zip"}, b"PK\x03\x04")
        with pytest.raises(FetchError, match="not a web page"):
            add_url(raw, site.url + "/zip")
        site.redirect("/loop", "/loop")
        with pytest.raises(FetchError, match="redirects"):
            add_url(raw, site.url + "/loop")
        site.redirect("/to-file", "file:///etc/passwd")
        with pytest.raises(FetchError, match="only http and https"):
            add_url(raw, site.url + "/to-file")
        with pytest.raises(FetchError, match="answered 404"):
            add_url(raw, site.url + "/missing")
        # The server's policy: a local address is refused before anything is sent.
        site.page("/admin", "<p>secret admin page with enough words</p>")
        before = len(site.requests)
        with pytest.raises(FetchError, match="local or private address"):
            add_url(raw, site.url + "/admin", FetchPolicy.for_server())
        assert len(site.requests) == before
    assert not (raw / "web").exists()


def test_normalize_url_keeps_one_name_per_page():
    assert normalize_url("HTTP://Example.COM:80/a?b=1#frag") == "http://example.com/a?b=1"
    assert normalize_url("https://example.com") == "https://example.com/"
    with pytest.raises(FetchError):
        normalize_url("http://exa mple.com/")


def test_a_fetched_page_is_named_by_its_own_heading_not_the_sites_title(kb):
    with FakeSite() as site:
        url = site.page("/leave", article("Acme Intranet", "Everyone gets thirty days of paid leave every year.",
                                          heading="Leave policy"))
        added = add_url(kb / "raw", url)
    assert added.title == "Leave policy"
    assert frontmatter.loads((kb / added.path).read_text())["title"] == "Leave policy"


def test_add_json_prints_one_object_per_source(kb, tmp_path):
    note = tmp_path / "note.txt"
    note.write_text("Bluebird is the codename.")
    result = _kaas(kb, "add", "--json", str(note), str(tmp_path / "gone.md"))
    assert result.exit_code == 1
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines[0] == {"source": str(note), "path": "raw/note.txt", "status": "added", "size": 25}
    assert lines[1]["source"].endswith("gone.md") and "no such file" in lines[1]["error"]


def test_add_needs_a_knowledge_base(tmp_path):
    note = tmp_path / "note.txt"
    note.write_text("x")
    result = _kaas(tmp_path / "nowhere", "add", str(note))
    assert result.exit_code != 0 and "kaas init" in result.stderr
