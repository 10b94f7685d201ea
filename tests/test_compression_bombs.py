"""Compression bombs in every format compile inflates: a DOCX part, a ZIP member, a PDF stream,
with an honest header or one that claims a small size (a ZIP's sizes are the attacker's to
write: what is judged is the bytes actually inflated). Each is refused with the cap's reason
while its reader holds at most about the cap (``compile/bounded.py``), through the reader, an
archive, ``kaas compile`` and the Sources tab's compile; the other sources still compile."""

from __future__ import annotations

import io
import json
import os
import tracemalloc
import zipfile

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from kb_ai.cli import cli
from kb_ai.compile.ingest import SkippedSource, Source, read_source, walk_raw
from kb_ai.config import Settings
from kb_ai.server import create_app
from kb_ai.store.kb import init_kb

from fixtures.compile.make import docx_bytes, lie_about_size, pdf_bomb_bytes, rezip, tar_pax_bomb, zip_bytes

INFLATED = 30_000_000  # six times the member cap: enough to show the cap holds, quick to build
CAP = 5_000_000  # compile.bounded.MAX_MEMBER_BYTES (spelled out: these tests also run on code without it)
HELD = 3 * CAP  # what a reader may hold at its peak: the cap, a copy, the parser's own
GOOD = "# Kettle\n\nThe kettle is in the kitchen, next to the sink, and boils in two minutes.\n"


def _docx() -> bytes:
    return docx_bytes("Bomb", [("", "A body paragraph of the bomb.")])


def _real_size(data: bytes, name: str) -> int:
    return zipfile.ZipFile(io.BytesIO(data)).getinfo(name).file_size


def docx_bomb() -> bytes:
    return rezip(_docx(), {"word/document.xml": INFLATED})


def docx_liar(method: int = zipfile.ZIP_DEFLATED) -> bytes:
    """A DOCX bomb whose headers claim document.xml is its small original size."""
    base = _docx()
    return lie_about_size(rezip(base, {"word/document.xml": INFLATED}, method), "word/document.xml",
                          _real_size(base, "word/document.xml"))


def zip_liar() -> bytes:
    """A ZIP whose bzip2 member claims 20 bytes and inflates to INFLATED, beside a good member."""
    base = zip_bytes({"notes.md": GOOD, "bomb.txt": "twenty bytes of text"})
    return lie_about_size(rezip(base, {"bomb.txt": INFLATED}, zipfile.ZIP_BZIP2), "bomb.txt", 20)


def xlsx_bomb() -> bytes:
    from openpyxl import Workbook

    book = Workbook()
    book.active.append(["Plan", "Price"])
    out = io.BytesIO()
    book.save(out)
    return rezip(out.getvalue(), {"xl/worksheets/sheet1.xml": INFLATED})


BOMBS = {
    "bomb.docx": (docx_bomb, "word/document.xml inflates past 5,000,000 bytes"),
    "bomb.xlsx": (xlsx_bomb, "xl/worksheets/sheet1.xml inflates past 5,000,000 bytes"),  # a zip-based format is a zip
    "liar.docx": (docx_liar, "word/document.xml inflates past 5,000,000 bytes"),  # the header is not trusted
    "liar-bzip2.docx": (lambda: docx_liar(zipfile.ZIP_BZIP2), "word/document.xml: compression ratio over 200"),
    "bomb.pdf": (lambda: pdf_bomb_bytes(INFLATED), "a PDF stream inflates past 5,000,000 bytes"),
}


def _read_measured(root, name):
    """(what ``read_source`` made of raw/``name``, the peak of memory it allocated)."""
    import docx  # noqa: F401 - the libraries' own import is not the reader's peak
    import openpyxl  # noqa: F401
    import pypdf  # noqa: F401

    [raw] = [r for r in walk_raw(root) if r.path == f"raw/{name}"]
    read_source(raw)  # warm: pypdf's and python-docx's first-use caches are not the reader's peak
    tracemalloc.start()
    try:
        result = read_source(raw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, peak


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_bomb_is_refused_by_its_reader_holding_at_most_the_cap(tmp_path, name):
    build, reason = BOMBS[name]
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / name).write_bytes(build())
    result, peak = _read_measured(tmp_path, name)
    assert isinstance(result, SkippedSource), "the bomb was read"
    assert reason in result.reason and "bomb" in result.reason, result.reason
    assert peak < HELD, f"{name}: the reader held {peak:,} bytes"


def test_an_archive_skips_its_bomb_members_and_keeps_the_rest(tmp_path):
    """A ZIP member whose header lies, and a DOCX bomb inside a ZIP (an archive within an
    archive), are skipped with their reasons; the good member is compiled."""
    outer = io.BytesIO(zip_liar())
    with zipfile.ZipFile(outer, "a") as archive:
        archive.writestr("inner.docx", docx_bomb())
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "bundle.zip").write_bytes(outer.getvalue())
    result, peak = _read_measured(tmp_path, "bundle.zip")
    assert isinstance(result, Source) and "The kettle is in the kitchen" in result.text
    notes = "\n".join(result.notes)
    assert "bomb.txt: skipped (compression ratio over 200" in notes, notes
    assert "inner.docx: skipped (word/document.xml inflates past 5,000,000 bytes" in notes, notes
    assert peak < HELD


def test_a_tar_header_tarfile_would_read_whole_is_refused_before_it_is_read(tmp_path):
    """A pax extended header of 30 MB of spaces (100 KB gzipped): refused by its size, never read."""
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "bundle.tar.gz").write_bytes(tar_pax_bomb(INFLATED, "notes.md", GOOD))
    result, peak = _read_measured(tmp_path, "bundle.tar.gz")
    assert isinstance(result, SkippedSource)
    assert "an extended TAR header of 30,000,000 bytes, over 5,000,000" in result.reason, result.reason
    assert peak < HELD


def test_a_pdf_whose_streams_together_pass_the_budget_is_refused(tmp_path, monkeypatch):
    """Each stream under the member cap, all of them over the source's budget: every stream
    pypdf decodes is counted."""
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "pages.pdf").write_bytes(pdf_bomb_bytes(1_000_000, pages=4))
    [raw] = walk_raw(tmp_path)
    whole = read_source(raw)
    assert isinstance(whole, Source) and "page alfa" in whole.text and "page delta" in whole.text
    monkeypatch.setattr("kb_ai.compile.bounded.MAX_TOTAL_BYTES", 3_000_000)
    refused = read_source(raw)
    assert isinstance(refused, SkippedSource)
    assert "would inflate to over 3,000,000 bytes in all" in refused.reason, refused.reason


def test_a_docx_with_a_picture_larger_than_the_cap_still_reads(tmp_path):
    """Parts no text is read from (pictures) are never inflated, so their size is no bomb."""
    import docx

    document = docx.Document()
    document.add_heading("Site survey", level=0)
    document.add_paragraph("The roof needs new tiles on the north side.")
    document.add_picture(io.BytesIO(_png_with_noise(CAP + 1_000_000)))
    buffer = io.BytesIO()
    document.save(buffer)
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "survey.docx").write_bytes(buffer.getvalue())
    result, peak = _read_measured(tmp_path, "survey.docx")
    assert isinstance(result, Source) and "new tiles on the north side" in result.text
    assert result.title == "Site survey"
    assert peak < HELD  # the file itself (6 MB) and no copy of the picture


def _png_with_noise(size: int) -> bytes:
    """A 1-pixel PNG with a private chunk of ``size`` random bytes (it compresses to no less)."""
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")

    header = (1).to_bytes(4, "big") * 2 + bytes([8, 2, 0, 0, 0])  # 1 x 1, 8-bit RGB
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"prVt", os.urandom(size))
            + chunk(b"IDAT", zlib.compress(b"\x00\xff\xff\xff")) + chunk(b"IEND", b""))


def _bomb_corpus(raw) -> None:
    raw.mkdir(parents=True, exist_ok=True)
    (raw / "kettle.md").write_text(GOOD)
    (raw / "bomb.docx").write_bytes(docx_bomb())
    (raw / "liar.docx").write_bytes(docx_liar())
    (raw / "bomb.pdf").write_bytes(pdf_bomb_bytes(INFLATED))


def _check_skipped(skipped: dict[str, str]) -> None:
    assert "word/document.xml inflates past 5,000,000 bytes" in skipped["raw/bomb.docx"]
    assert "word/document.xml inflates past 5,000,000 bytes" in skipped["raw/liar.docx"]
    assert "a PDF stream inflates past 5,000,000 bytes" in skipped["raw/bomb.pdf"]


def test_kaas_compile_reports_bombs_as_skipped_and_compiles_the_rest(tmp_path):
    _bomb_corpus(tmp_path / "raw")
    result = CliRunner().invoke(cli, ["--kb", str(tmp_path), "compile", "--offline", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    _check_skipped({s["path"]: s["reason"] for s in data["skipped"]})
    assert len(data["created"]) == 1
    text = CliRunner().invoke(cli, ["--kb", str(tmp_path), "compile", "--offline"]).stdout  # recorded: no re-read
    assert "raw/bomb.docx: word/document.xml inflates past 5,000,000 bytes" in text


def test_the_sources_tab_compile_reports_bombs_as_skipped(tmp_path):
    """The DOCX uploaded through the Sources tab, then its Compile button (POST /api/compile)."""
    root = tmp_path / "kb"
    init_kb(root)
    _bomb_corpus(root / "raw")
    (root / "raw" / "bomb.docx").unlink()
    with TestClient(create_app(Settings(kb=root), mcp=False)) as client:
        uploaded = client.post("/api/sources/upload?name=bomb.docx", content=docx_bomb(),
                               headers={"Content-Type": "application/octet-stream"})
        assert uploaded.status_code == 201, uploaded.text
        stream = client.post("/api/compile").text
    report = None
    for block in stream.replace("\r\n", "\n").split("\n\n"):
        if "event: report" in block:
            report = json.loads(block.split("data:", 1)[1].strip())
    assert report is not None, stream
    _check_skipped(dict(line.split(": ", 1) for line in report["skipped"]))
    assert report["created"] == 1
