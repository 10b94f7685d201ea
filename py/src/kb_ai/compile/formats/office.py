"""Slides, spreadsheets, e-books and office text: ``.pptx`` (python-pptx), ``.xlsx`` (openpyxl),
``.odt`` and ``.epub`` (their XML read with lxml), ``.rtf`` (striprtf), ``.csv``/``.tsv``
(stdlib ``csv``). Called by ``compile.readers.parse_document``; each library is imported on
first use.

The rules of every reader here: the title is the document's own (a slide deck's first slide
title, a workbook's or e-book's title property, an ODT's title), tables are Markdown tables
(a spreadsheet's sheets each a ``##`` section with its table; a CSV one table), and at most
``MAX_ROWS`` rows of one table and ``MAX_COLUMNS`` columns are kept (the rest noted, never
silently cut). A zip-based format is a zip: no library is handed the file, only a package
rebuilt from ``compile/bounded.py`` reads (``docx.bounded_package``), so a part past a cap
refuses the document (``InflationLimit``) before any library inflates it."""

from __future__ import annotations

import csv
import io
import re
import zipfile
from posixpath import dirname, join, normpath

from kb_ai.compile.bounded import MAX_MEMBERS, BoundedZip, source_budget
from kb_ai.compile.formats.docx import bounded_package
from kb_ai.compile.readers import _PLACEHOLDER_TITLE, Parsed, UnreadableError, date_from_text
from kb_ai.store.inline_markup import escape_block_start, escape_heading, escape_text

MAX_ROWS = 2_000
MAX_COLUMNS = 50


def markdown_table(rows: list[list[str]], notes: list[str], what: str) -> str:
    """``rows`` (the first the header) as a Markdown table, cells escaped; empty trailing
    columns dropped; past ``MAX_ROWS``/``MAX_COLUMNS`` cut, with a note naming ``what``."""
    rows = [[" ".join(str(c).split()) if c is not None else "" for c in row] for row in rows]
    rows = [row for row in rows if any(row)]
    if not rows:
        return ""
    if len(rows) > MAX_ROWS + 1:
        notes.append(f"{what}: {len(rows) - 1 - MAX_ROWS:,} rows after the first {MAX_ROWS:,} left out")
        rows = rows[:MAX_ROWS + 1]
    width = max(max((i + 1 for i, c in enumerate(row) if c), default=0) for row in rows)
    if width > MAX_COLUMNS:
        notes.append(f"{what}: {width - MAX_COLUMNS:,} columns after the first {MAX_COLUMNS} left out")
        width = MAX_COLUMNS
    cells = [[escape_text(c).replace("|", "\\|") for c in (row + [""] * width)[:width]] for row in rows]
    lines = ["| " + " | ".join(cells[0]) + " |", "|" + "|".join(["---"] * width) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in cells[1:]]
    return "\n".join(lines)


def _own_title(value: str | None) -> str | None:
    value = " ".join((value or "").split())
    return None if not value or _PLACEHOLDER_TITLE.search(value) else value


# ---------------------------------------------------------------------------------------------
# slides


def read_pptx(data: bytes) -> Parsed:
    """Each slide a ``##`` section named by its title (``Slide N`` without one), its text as
    paragraphs (indented levels as list items), its tables as Markdown tables; the first
    slide's title is the deck's title (not repeated), unless the deck has a title property."""
    try:
        import pptx  # noqa: PLC0415
    except ImportError:  # pragma: no cover - declared dependency
        raise UnreadableError("PPTX support unavailable (python-pptx not installed)") from None
    package = bounded_package(data, "PPTX")
    try:
        deck = pptx.Presentation(io.BytesIO(package))
        slides = list(deck.slides)
    except Exception as exc:  # noqa: BLE001 - python-pptx raises many kinds for a broken file
        raise UnreadableError(f"not a readable PPTX ({type(exc).__name__})") from None
    notes: list[str] = []
    title = _own_title(deck.core_properties.title)
    sections: list[str] = []
    for number, slide in enumerate(slides, 1):
        heading_shape = slide.shapes.title
        heading = " ".join(heading_shape.text_frame.text.split()) if heading_shape is not None \
            and heading_shape.has_text_frame else ""
        lines = _slide_lines(slide, heading_shape, notes, number)
        if number == 1 and title is None and heading:
            title = heading
            sections.append("\n\n".join(lines))
            continue
        sections.append("\n\n".join([f"## {escape_heading(escape_text(heading or f'Slide {number}'))}", *lines]))
    body = "\n\n".join(s for s in sections if s.strip())
    return Parsed("pptx", body, title, date_from_text(body), notes)


def _slide_lines(slide, heading_shape, notes: list[str], number: int) -> list[str]:
    lines: list[str] = []
    for shape in slide.shapes:
        if heading_shape is not None and shape.shape_id == heading_shape.shape_id:
            continue
        if getattr(shape, "has_table", False) and shape.has_table:
            rows = [[cell.text for cell in row.cells] for row in shape.table.rows]
            table = markdown_table(rows, notes, f"slide {number} table")
            if table:
                lines.append(table)
        elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            for paragraph in shape.text_frame.paragraphs:
                text = " ".join(paragraph.text.split())
                if text:
                    escaped = escape_text(text)
                    lines.append(f"{'  ' * (paragraph.level - 1)}- {escaped}" if paragraph.level
                                 else escape_block_start(escaped))
    return lines


# ---------------------------------------------------------------------------------------------
# spreadsheets


def read_xlsx(data: bytes) -> Parsed:
    """Each sheet a ``##`` section named after it, holding its cells (values, not formulas)
    as a Markdown table; the title from the workbook's title property."""
    try:
        import openpyxl  # noqa: PLC0415
    except ImportError:  # pragma: no cover - declared dependency
        raise UnreadableError("XLSX support unavailable (openpyxl not installed)") from None
    package = bounded_package(data, "XLSX")
    try:
        book = openpyxl.load_workbook(io.BytesIO(package), read_only=True, data_only=True)
    except Exception as exc:  # noqa: BLE001 - openpyxl raises many kinds for a broken file
        raise UnreadableError(f"not a readable XLSX ({type(exc).__name__})") from None
    notes: list[str] = []
    sections: list[str] = []
    try:
        for sheet in book.worksheets:
            rows: list[list[str]] = []
            for row in sheet.iter_rows(values_only=True):
                rows.append(["" if v is None else str(v) for v in row[:MAX_COLUMNS + 1]])
                if len(rows) > MAX_ROWS + 1:
                    notes.append(f"sheet {sheet.title}: rows after the first {MAX_ROWS:,} left out")
                    break
            table = markdown_table(rows[:MAX_ROWS + 1], notes, f"sheet {sheet.title}")
            if table:
                sections.append(f"## {escape_heading(escape_text(sheet.title))}\n\n{table}")
        title = _own_title(book.properties.title)
    except Exception as exc:  # noqa: BLE001
        raise UnreadableError(f"not a readable XLSX ({type(exc).__name__})") from None
    finally:
        book.close()
    body = "\n\n".join(sections)
    return Parsed("xlsx", body, title, None, notes)


def read_csv(text: str, delimiter: str) -> Parsed:
    """A CSV or TSV file as one Markdown table (its first row the header)."""
    notes: list[str] = []
    rows: list[list[str]] = []
    try:
        for row in csv.reader(io.StringIO(text), delimiter=delimiter):
            rows.append(row[:MAX_COLUMNS + 1])
            if len(rows) > MAX_ROWS + 1:
                notes.append(f"rows after the first {MAX_ROWS:,} left out")
                break
    except csv.Error as exc:
        raise UnreadableError(f"not a readable CSV ({exc})") from None
    return Parsed("csv", markdown_table(rows[:MAX_ROWS + 1], notes, "table"), None, None, notes)


# ---------------------------------------------------------------------------------------------
# ODT and EPUB: zipped XML, read with lxml (no entities, no network)

_ODF_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
_ODF_TABLE = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
_ODF_OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
_DC = "http://purl.org/dc/elements/1.1/"
MAX_EPUB_CHAPTERS = 500


def _xml(data: bytes, what: str):
    from lxml import etree  # noqa: PLC0415

    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False,
                             recover=False)
    try:
        return etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        raise UnreadableError(f"not a readable {what} ({exc.msg})") from None


def _parts(data: bytes, what: str) -> tuple[BoundedZip, dict[str, zipfile.ZipInfo]]:
    archive = BoundedZip(data, what)
    parts = {info.filename: info for info in archive.infos if not info.is_dir()}
    if len(parts) > MAX_MEMBERS:
        raise UnreadableError(f"not a readable {what} (more than {MAX_MEMBERS:,} parts)")
    return archive, parts


def _part(archive: BoundedZip, parts: dict[str, zipfile.ZipInfo], name: str, what: str) -> bytes:
    if name not in parts:
        raise UnreadableError(f"not a readable {what} (no {name})")
    return archive.read(parts[name])


def read_odt(data: bytes) -> Parsed:
    """An OpenDocument text: headings (by outline level), paragraphs, list items and tables in
    order; the title from ``meta.xml``."""
    with source_budget():
        archive, parts = _parts(data, "ODT")
        content = _xml(_part(archive, parts, "content.xml", "ODT"), "ODT")
        meta = _xml(archive.read(parts["meta.xml"]), "ODT") if "meta.xml" in parts else None
    title = _own_title(meta.findtext(f".//{{{_DC}}}title")) if meta is not None else None
    notes: list[str] = []
    lines: list[str] = []
    body = content.find(f".//{{{_ODF_OFFICE}}}text")
    for element in (body if body is not None else []):
        _odt_block(element, lines, notes, 0)
    text = "\n\n".join(lines)
    return Parsed("odt", text, title, date_from_text(text), notes)


def _odt_text(element) -> str:
    return " ".join("".join(element.itertext()).split())


def _odt_block(element, lines: list[str], notes: list[str], depth: int) -> None:
    tag = element.tag.rsplit("}", 1)[-1] if isinstance(element.tag, str) else ""
    if tag == "h":
        level = int(element.get(f"{{{_ODF_TEXT}}}outline-level") or "1")
        text = _odt_text(element)
        if text:
            lines.append("#" * min(6, level + 1) + " " + escape_heading(escape_text(text)))
    elif tag == "p":
        text = _odt_text(element)
        if text:
            lines.append(escape_block_start(escape_text(text)))
    elif tag == "list" and depth < 20:
        for item in element.iter(f"{{{_ODF_TEXT}}}list-item"):
            text = _odt_text(item)
            if text:
                lines.append(f"- {escape_text(text)}")
    elif tag == "table":
        rows = [[_odt_text(cell) for cell in row.iter(f"{{{_ODF_TABLE}}}table-cell")]
                for row in element.iter(f"{{{_ODF_TABLE}}}table-row")]
        table = markdown_table(rows, notes, f"table {element.get(f'{{{_ODF_TABLE}}}name') or ''}".strip())
        if table:
            lines.append(table)
    elif tag == "section" and depth < 20:
        for child in element:
            _odt_block(child, lines, notes, depth + 1)


def read_epub(data: bytes) -> Parsed:
    """An e-book: its chapters (the spine of its package document, in order) as Markdown, each
    through the HTML reader's rules for XHTML (headings, paragraphs, lists, tables, code); the
    title from the package's ``dc:title``."""
    with source_budget():
        archive, parts = _parts(data, "EPUB")
        container = _xml(_part(archive, parts, "META-INF/container.xml", "EPUB"), "EPUB")
        rootfile = next((e.get("full-path") for e in container.iter() if str(e.tag).endswith("rootfile")), None)
        if not rootfile:
            raise UnreadableError("not a readable EPUB (no package document)")
        opf = _xml(_part(archive, parts, rootfile, "EPUB"), "EPUB")
        base = dirname(rootfile)
        items = {e.get("id"): e.get("href") for e in opf.iter() if str(e.tag).endswith("}item")}
        spine = [e.get("idref") for e in opf.iter() if str(e.tag).endswith("}itemref")]
        chapters = []
        for idref in spine[:MAX_EPUB_CHAPTERS]:
            href = items.get(idref)
            name = normpath(join(base, href.split("#")[0])) if href else None
            if name and name in parts:
                chapters.append(archive.read(parts[name]))
    title = _own_title(opf.findtext(f".//{{{_DC}}}title"))
    notes = [f"chapters after the first {MAX_EPUB_CHAPTERS} left out"] if len(spine) > MAX_EPUB_CHAPTERS else []
    body = "\n\n".join(text for text in (xhtml_markdown(c, notes) for c in chapters) if text)
    return Parsed("epub", body, title, date_from_text(body), notes)


_BLOCK_TAGS = {"h1", "h2", "h3", "h4", "h5", "h6", "p", "li", "pre", "table", "blockquote", "dt", "dd"}


def xhtml_markdown(data: bytes, notes: list[str]) -> str:
    """One XHTML document's body as Markdown: headings one level down (the book's title is the
    article's), paragraphs, list items, blockquotes, preformatted code, tables."""
    from lxml import html  # noqa: PLC0415

    try:
        root = html.fromstring(data)
    except Exception:  # noqa: BLE001 - an empty or broken chapter: nothing from it
        return ""
    lines: list[str] = []
    for element in root.iter():
        tag = element.tag.rsplit("}", 1)[-1].lower() if isinstance(element.tag, str) else ""
        if tag not in _BLOCK_TAGS or any(
                isinstance(a.tag, str) and a.tag.rsplit("}", 1)[-1].lower() in _BLOCK_TAGS for a in element.iterancestors()):
            continue
        if tag == "table":
            rows = [[" ".join(c.text_content().split()) for c in tr if isinstance(c.tag, str)]
                    for tr in element.iter() if isinstance(tr.tag, str) and tr.tag.rsplit("}", 1)[-1].lower() == "tr"]
            table = markdown_table(rows, notes, "table")
            if table:
                lines.append(table)
            continue
        if tag == "pre":
            code = element.text_content().strip("\n")
            if code.strip():
                fence = "`" * max(3, max((len(r) for r in re.findall(r"`{3,}", code)), default=0) + 1)
                lines.append(f"{fence}\n{code}\n{fence}")
            continue
        text = " ".join(element.text_content().split())
        if not text:
            continue
        escaped = escape_text(text)
        if tag[0] == "h":
            lines.append("#" * min(6, int(tag[1]) + 1) + " " + escape_heading(escaped))
        elif tag == "li":
            lines.append(f"- {escaped}")
        elif tag == "blockquote":
            lines.append(f"> {escaped}")
        else:
            lines.append(escape_block_start(escaped))
    return "\n\n".join(lines)


# ---------------------------------------------------------------------------------------------
# RTF

_RTF_TITLE = re.compile(r"\{\\title\s+([^{}]{1,300})\}")


def read_rtf(text: str) -> Parsed:
    """Rich Text: its text (striprtf), a table's cells separated as a Markdown table's; the
    title from its ``\\info`` group."""
    try:
        from striprtf.striprtf import rtf_to_text  # noqa: PLC0415
    except ImportError:  # pragma: no cover - declared dependency
        raise UnreadableError("RTF support unavailable (striprtf not installed)") from None
    if not text.lstrip().startswith("{\\rtf"):
        raise UnreadableError("not a readable RTF (no {\\rtf header)")
    found = _RTF_TITLE.search(text[:20_000])
    try:
        plain = rtf_to_text(text, errors="replace")
    except Exception as exc:  # noqa: BLE001 - a broken group structure
        raise UnreadableError(f"not a readable RTF ({type(exc).__name__})") from None
    notes: list[str] = []
    blocks: list[str] = []
    table: list[list[str]] = []
    for line in plain.splitlines():
        if line.count("|") >= 1 and line.rstrip().endswith("|"):  # a table row: cells end in "|"
            table.append([c.strip() for c in line.rstrip().rstrip("|").split("|")])
            continue
        if table:
            blocks.append(markdown_table(table, notes, "table"))
            table = []
        if line.strip():
            blocks.append(escape_block_start(escape_text(" ".join(line.split()))))
    if table:
        blocks.append(markdown_table(table, notes, "table"))
    body = "\n\n".join(b for b in blocks if b)
    return Parsed("rtf", body, _own_title(found.group(1)) if found else None, date_from_text(body), notes)
