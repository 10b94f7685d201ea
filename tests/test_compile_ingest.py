"""Ingest: every file of raw/ becomes a Source or a SkippedSource with a reason, never a crash."""

from __future__ import annotations

import os
import zipfile
import io

import pytest

from kb_ai.compile import bounded, ingest
from kb_ai.compile.ingest import Source, SkippedSource, read_source, walk_raw

from fixtures.compile.make import PNG_1PX, docx_bytes, pdf_bytes, tar_bytes, zip_bytes


def put(kb, rel: str, data: bytes | str):
    file = kb / "raw" / rel
    file.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        file.write_text(data, encoding="utf-8")
    else:
        file.write_bytes(data)
    return file


def read(kb, rel: str):
    [raw] = [r for r in walk_raw(kb) if r.path == f"raw/{rel}"]
    return read_source(raw)


def test_walk_is_sorted_and_lists_hidden_and_outside_symlinks(tmp_path):
    put(tmp_path, "b/z.md", "# Z\n\nzzz zzz zzz")
    put(tmp_path, "a.md", "# A\n\naaa aaa aaa")
    put(tmp_path, "b/a.txt", "a a a words here")
    put(tmp_path, ".hidden/x.md", "x")
    put(tmp_path, "b/.DS_Store", b"\x00\x01")
    outside = tmp_path / "secret.txt"
    outside.write_text("secret words outside raw")
    os.symlink(outside, tmp_path / "raw" / "link.txt")
    found = walk_raw(tmp_path)
    paths = [r.path for r in found]
    assert paths == sorted(paths)
    reasons = {r.path: r.skip_reason for r in found}
    assert reasons["raw/.hidden/"] == "hidden folder"
    assert reasons["raw/b/.DS_Store"] == "hidden file"
    assert reasons["raw/link.txt"] == "symlink pointing outside raw/"
    assert reasons["raw/a.md"] is None and reasons["raw/b/z.md"] is None


def test_markdown_frontmatter_title_date_and_tags(tmp_path):
    put(tmp_path, "notes/2026-02-01-meeting.md",
        "---\ntitle: Weekly sync\ndate: 2026-03-05\ntags: [sync, team]\n---\n# Heading\n\nWe met and decided things.")
    source = read(tmp_path, "notes/2026-02-01-meeting.md")
    assert isinstance(source, Source)
    assert (source.title, source.date, source.tags, source.topic_hint) == ("Weekly sync", "2026-03-05", ["sync", "team"], "notes")
    assert source.text.startswith("# Heading")
    assert len(source.checksum) == 64


def test_dates_from_filename_and_date_line(tmp_path):
    put(tmp_path, "2026-02-01-meeting.md", "# Meeting\n\nWe met and decided things.")
    put(tmp_path, "memo.txt", "Memo about things\n\nDate: 2026-04-09\n\nThe memo says several things.")
    assert read(tmp_path, "2026-02-01-meeting.md").date == "2026-02-01"
    memo = read(tmp_path, "memo.txt")
    assert (memo.title, memo.date, memo.topic_hint) == ("Memo about things", "2026-04-09", "general")


def test_html_keeps_main_content_not_navigation(tmp_path):
    put(tmp_path, "page.html",
        "<html><head><title>Deploys | Wiki</title></head><body><nav><a href='/'>Home</a> <a href='/x'>Other</a></nav>"
        "<article><h1>Deploys</h1><p>We deploy with a blue-green switch after the smoke test passes on staging.</p>"
        "<h2>Rollback</h2><p>Rollback flips the switch back within one minute of an alert.</p></article>"
        "<footer>Copyright footer</footer></body></html>")
    source = read(tmp_path, "page.html")
    assert source.title == "Deploys"
    assert "blue-green switch" in source.text and "## Rollback" in source.text
    assert "Home" not in source.text and "Copyright" not in source.text


def test_pdf_text_and_metadata_title(tmp_path):
    put(tmp_path, "doc.pdf", pdf_bytes(["First line of the document", "The second line (with parentheses)."],
                                       title="My PDF"))
    source = read(tmp_path, "doc.pdf")
    assert source.kind == "pdf" and source.title == "My PDF"
    assert "The second line (with parentheses)." in source.text


def test_docx_headings_and_lists(tmp_path):
    put(tmp_path, "h.docx", docx_bytes("Handbook", [("Heading 1", "Hours"), ("", "Core hours are 14 to 17."),
                                                     ("List Bullet", "Holidays are extra.")]))
    source = read(tmp_path, "h.docx")
    assert source.title == "Handbook"
    assert "## Hours" in source.text and "- Holidays are extra." in source.text
    assert source.date is None  # the template's creation date is not the document's


@pytest.mark.parametrize("name,data,reason", [
    ("logo.png", PNG_1PX, "image"),  # not a document: left out by type (tests/test_docs_folder.py)
    ("sheet.xls", b"\xd0\xcf\x11\xe0 a spreadsheet", "binary file (.xls)"),  # a format kaas cannot read
    ("broken.xlsx", b"PK\x03\x04 not really a workbook", "not a readable XLSX"),
    ("blob.dat", b"\x00\x01\x02binary", "binary file (contains NUL bytes)"),
    ("broken.pdf", b"%PDF-1.4\n1 0 obj << /Type /Catalog\ngarbage", "not a readable PDF"),
    ("broken.docx", b"PK\x03\x04 not really a docx", "not a readable DOCX"),
    ("broken.zip", b"PK\x03\x04 truncated", "not a readable ZIP archive"),
    ("empty.md", "   \n\n", "no text found"),
])
def test_unreadable_files_are_skipped_with_a_reason(tmp_path, name, data, reason):
    put(tmp_path, name, data)
    result = read(tmp_path, name)
    assert isinstance(result, SkippedSource)
    assert result.reason.startswith(reason)


def test_oversized_file_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(ingest, "MAX_SOURCE_BYTES", 100)
    put(tmp_path, "big.txt", "word " * 100)
    result = read(tmp_path, "big.txt")
    assert isinstance(result, SkippedSource) and result.reason.startswith("larger than")


def test_windows_1252_text_is_decoded(tmp_path):
    put(tmp_path, "old.txt", "Caf\xe9 menu\n\nThe caf\xe9 serves cr\xe8me br\xfbl\xe9e daily.".encode("cp1252"))
    assert "crème brûlée" in read(tmp_path, "old.txt").text


def test_zip_members_become_sections_and_hostile_members_are_refused(tmp_path):
    put(tmp_path, "bundle.zip", zip_bytes({
        "docs/a.md": "# Alpha\n\nAlpha text with enough words.",
        "b.txt": "Beta plain text with enough words.",
        "page.html": "<html><body><p>Gamma paragraph inside html member with words.</p></body></html>",
        "img.png": PNG_1PX,
        "inner.zip": zip_bytes({"x.txt": "nested"}),
        "../evil.md": "# Evil\n\nescape attempt text",
        "/abs.md": "# Abs\n\nabsolute path text",
    }))
    source = read(tmp_path, "bundle.zip")
    assert source.kind == "zip"
    assert "## docs/a.md" in source.text and "### Alpha" in source.text  # member headings demoted
    assert "## b.txt" in source.text and "Gamma paragraph" in source.text
    notes = " | ".join(source.notes)
    assert "img.png: left out (image)" in notes  # the default rules of raw/ apply to members too
    assert "inner.zip: skipped (nested archive)" in notes
    assert "'../evil.md': '..' in path refused" in notes
    assert "'/abs.md': absolute path refused" in notes
    assert "escape attempt" not in source.text and "absolute path text" not in source.text


def test_zip_bomb_members_are_not_inflated(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("bomb.txt", "0" * 20_000_000)
        archive.writestr("ok.txt", "a normal member with words")
    put(tmp_path, "bomb.zip", buffer.getvalue())
    source = read(tmp_path, "bomb.zip")
    assert any("bomb.txt: skipped" in n for n in source.notes)
    assert "a normal member" in source.text and len(source.text) < 1000


def test_tar_members_and_limits(tmp_path, monkeypatch):
    put(tmp_path, "t.tar.gz", tar_bytes({"one.md": "# One\n\nFirst member words.", "two/b.txt": "Second member words.",
                                         "../up.txt": "escape"}))
    source = read(tmp_path, "t.tar.gz")
    assert source.kind == "tar"
    assert "## one.md" in source.text and "## two/b.txt" in source.text
    assert any("'..' in path refused" in n for n in source.notes)
    monkeypatch.setattr(bounded, "MAX_TOTAL_BYTES", 10)  # one source's inflation budget
    put(tmp_path, "u.tar", tar_bytes({"big.txt": "x" * 100}, mode="w"))
    result = read(tmp_path, "u.tar")
    assert isinstance(result, SkippedSource) and "over 10 bytes" in result.reason
