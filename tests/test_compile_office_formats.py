"""Slides, spreadsheets, CSV, ODT, EPUB and RTF are read (they used to be skipped as "binary
file"): each compiled offline into an article with the document's title and its tables as
Markdown tables; `kaas add` accepts them; a zip-based one is bounded like any zip."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb_ai.cli import cli
from kb_ai.store.articles import load_article

from compile_checks import compile_offline

PLANS = [["Plan", "Price"], ["Solo", "$12"], ["Team", "$35"]]
TABLE = "| Plan | Price |\n|---|---|\n| Solo | $12 |\n| Team | $35 |"


def pptx_bytes() -> bytes:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    first = deck.slides.add_slide(deck.slide_layouts[1])
    first.shapes.title.text = "Quarterly Pricing Review"
    first.placeholders[1].text = "Prices change on the first of May for every new account."
    second = deck.slides.add_slide(deck.slide_layouts[5])
    second.shapes.title.text = "Plans"
    shape = second.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(4), Inches(2))
    for r, row in enumerate(PLANS):
        for c, value in enumerate(row):
            shape.table.cell(r, c).text = value
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def xlsx_bytes() -> bytes:
    from openpyxl import Workbook

    book = Workbook()
    sheet = book.active
    sheet.title = "Plans"
    for row in PLANS:
        sheet.append(row)
    book.create_sheet("Regions").append(["Region", "Currency"])
    book["Regions"].append(["Europe", "EUR"])
    book.properties.title = "Price List 2026"
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def _zip(members: dict[str, str], first: tuple[str, str] | None = None) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        if first:
            archive.writestr(zipfile.ZipInfo(first[0]), first[1])  # stored, first: the format's mimetype
        for name, text in members.items():
            archive.writestr(name, text)
    return out.getvalue()


ODF = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
       'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
       'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"')


def odt_bytes() -> bytes:
    rows = "".join("<table:table-row>" + "".join(f"<table:table-cell><text:p>{v}</text:p></table:table-cell>"
                                                   for v in row) + "</table:table-row>" for row in PLANS)
    content = (f'<?xml version="1.0"?><office:document-content {ODF}><office:body><office:text>'
               '<text:h text:outline-level="1">Support hours</text:h>'
               "<text:p>The support desk answers from nine to five on weekdays.</text:p>"
               f'<table:table table:name="Plans">{rows}</table:table>'
               "</office:text></office:body></office:document-content>")
    meta = ('<?xml version="1.0"?><office:document-meta xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
            'xmlns:dc="http://purl.org/dc/elements/1.1/"><office:meta><dc:title>Support Handbook</dc:title>'
            "</office:meta></office:document-meta>")
    return _zip({"content.xml": content, "meta.xml": meta}, ("mimetype", "application/vnd.oasis.opendocument.text"))


def epub_bytes(chapter_padding: int = 0) -> bytes:
    container = ('<?xml version="1.0"?><container xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
                 'version="1.0"><rootfiles><rootfile full-path="OEBPS/content.opf" '
                 'media-type="application/oebps-package+xml"/></rootfiles></container>')
    opf = ('<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
           '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>The Ledgerly Field Guide</dc:title></metadata>'
           '<manifest><item id="c1" href="one.xhtml" media-type="application/xhtml+xml"/>'
           '<item id="c2" href="two.xhtml" media-type="application/xhtml+xml"/></manifest>'
           '<spine><itemref idref="c1"/><itemref idref="c2"/></spine></package>')
    table = "".join("<tr>" + "".join(f"<td>{v}</td>" for v in row) + "</tr>" for row in PLANS)
    one = ('<html xmlns="http://www.w3.org/1999/xhtml"><body><h1>Getting started</h1>'
           "<p>Create an account and connect your bank in the settings page.</p></body></html>")
    two = ('<html xmlns="http://www.w3.org/1999/xhtml"><body><h1>Prices</h1>'
           f"<table>{table}</table></body></html>") + " " * chapter_padding
    return _zip({"META-INF/container.xml": container, "OEBPS/content.opf": opf, "OEBPS/one.xhtml": one,
                 "OEBPS/two.xhtml": two}, ("mimetype", "application/epub+zip"))


RTF = (r"{\rtf1\ansi{\info{\title Refund Policy}}"
       r"Refunds are paid within fourteen days of a written request.\par"
       r"{\trowd\cellx2000\cellx4000 Plan\cell Price\cell\row Solo\cell $12\cell\row Team\cell $35\cell\row}"
       r"Questions go to the billing team.\par}")
CSV = "Plan,Price\nSolo,$12\nTeam,$35\n"

FILES = {
    "deck/pricing-review.pptx": (pptx_bytes, "Quarterly Pricing Review"),
    "sheets/prices.xlsx": (xlsx_bytes, "Price List 2026"),
    "docs/handbook.odt": (odt_bytes, "Support Handbook"),
    "books/guide.epub": (epub_bytes, "The Ledgerly Field Guide"),
    "docs/refunds.rtf": (lambda: RTF.encode(), "Refund Policy"),
    "sheets/plans.csv": (lambda: CSV.encode(), "Plans"),
}


def _article(root: Path, source: str):
    wiki = root / "wiki"
    for path in wiki.rglob("*.md"):
        if path.name in ("index.md", "master-index.md", "log.md"):
            continue
        rel = path.relative_to(wiki).as_posix()
        article = load_article(wiki, rel)
        if f"raw/{source}" in article.sources:
            return article
    raise AssertionError(f"no article for raw/{source}")


def test_office_formats_compile_with_their_titles_and_tables(tmp_path):
    for name, (build, _) in FILES.items():
        (tmp_path / "raw" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "raw" / name).write_bytes(build())
    report = compile_offline(tmp_path)
    assert report.skipped == [], report.skipped
    for name, (_, title) in FILES.items():
        article = _article(tmp_path, name)
        assert article.title == title, (name, article.title)
        assert TABLE in article.body, (name, article.body)
    deck = _article(tmp_path, "deck/pricing-review.pptx").body
    assert "## Plans" in deck and "Prices change on the first of May" in deck
    assert deck.count("Quarterly Pricing Review") == 1  # the first slide's title is the title, once
    sheet = _article(tmp_path, "sheets/prices.xlsx").body
    assert "## Plans" in sheet and "## Regions" in sheet and "| Europe | EUR |" in sheet
    assert "## Getting started" in _article(tmp_path, "books/guide.epub").body
    assert "Support hours" in _article(tmp_path, "docs/handbook.odt").body
    assert "within fourteen days" in _article(tmp_path, "docs/refunds.rtf").body


@pytest.mark.parametrize("name", ["slides.pptx", "book.xlsx", "notes.odt", "guide.epub", "memo.rtf"])
def test_kaas_add_accepts_the_formats(tmp_path, name):
    runner = CliRunner()
    assert runner.invoke(cli, ["init", str(tmp_path)]).exit_code == 0
    build = {".pptx": pptx_bytes, ".xlsx": xlsx_bytes, ".odt": odt_bytes, ".epub": epub_bytes,
             ".rtf": lambda: RTF.encode()}[Path(name).suffix]
    outside = tmp_path.parent / f"{tmp_path.name}-{name}"
    outside.write_bytes(build())
    result = runner.invoke(cli, ["--kb", str(tmp_path), "add", str(outside)])
    assert result.exit_code == 0, result.output
    assert any(p.name == name or p.name == outside.name for p in (tmp_path / "raw").rglob("*"))


def test_a_bomb_in_an_epub_chapter_is_refused_by_the_caps(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "bomb.epub").write_bytes(epub_bytes(chapter_padding=6_000_000))
    report = compile_offline(tmp_path)
    [skipped] = report.skipped
    assert skipped["path"] == "raw/bomb.epub"
    assert "OEBPS/two.xhtml inflates past 5,000,000 bytes" in skipped["reason"], skipped
