"""The DOCX reader (python-docx, imported on first use): paragraphs and tables in document order,
headings as Markdown headings, tables as Markdown tables, the Title style as the title (not
repeated as a heading). Called by ``compile.readers.parse_document``.

python-docx is never handed the file itself (it would inflate every part whole, whatever its
size): it reads a package rebuilt by ``bounded_package`` from bounded reads."""

from __future__ import annotations

import io
import zipfile

from kb_ai.compile.bounded import MAX_MEMBERS, BoundedZip, source_budget
from kb_ai.compile.readers import _PLACEHOLDER_TITLE, Parsed, UnreadableError, date_from_text
from kb_ai.store.inline_markup import escape_block_start, escape_heading, escape_text


def read_docx(data: bytes) -> Parsed:
    try:
        import docx  # noqa: PLC0415
    except ImportError:  # pragma: no cover - declared dependency
        raise UnreadableError("DOCX support unavailable (python-docx not installed)") from None
    package = bounded_package(data)
    try:
        document = docx.Document(io.BytesIO(package))
    except Exception as exc:  # noqa: BLE001 - python-docx raises many kinds for a broken file
        raise UnreadableError(f"not a readable DOCX ({type(exc).__name__})") from None
    lines: list[str] = []
    title = None
    first = True
    for block in _docx_blocks(document):
        if not hasattr(block, "style") or not hasattr(block, "text"):  # a table
            table = _docx_table(block)
            if table:
                lines.append(table)
                first = False
            continue
        plain = " ".join(block.text.split())
        if not plain:
            continue
        text = escape_text(plain)  # Word's text is text: "__init__.py" is not bold "init"
        style = (block.style.name if block.style is not None else "") or ""
        if style == "Title" and title is None:
            title = plain  # the article's title: not repeated as a heading
        elif style == "Title":
            lines.append(f"## {escape_heading(text)}")
        elif style.startswith("Heading"):
            level = int(style.split()[-1]) if style.split()[-1].isdigit() else 1
            if first and level == 1 and title is None and not _docx_has_title(document):
                title = plain  # a document that opens with a Heading 1 and has no Title: that is its title
            else:
                lines.append("#" * min(6, level + 1) + " " + escape_heading(text))
        elif style.startswith("List"):
            lines.append(f"- {text}")
        else:
            lines.append(escape_block_start(text))
        first = False
    core_title = document.core_properties.title or None
    if core_title and _PLACEHOLDER_TITLE.search(core_title.strip()):
        core_title = None
    title = title or core_title
    # core_properties.created is not used: templates carry their own (python-docx's says 2013).
    body = "\n\n".join(lines)
    return Parsed("docx", body, title, date_from_text(body))


def bounded_package(data: bytes, what: str = "DOCX") -> bytes:
    """The DOCX (or another Office Open XML package, ``what``: PPTX, XLSX) rebuilt (stored, uncompressed) from ``compile/bounded.py`` reads, for
    python-docx: its XML parts (``.xml``, ``.rels``; the only parts text is read from) read
    under the caps of every ZIP member and charged to the source's budget; every other part
    (images, embedded files) present but empty, never inflated. Where a name appears twice the
    last entry is kept, as ``zipfile`` would read it. ``UnreadableError`` (``InflationLimit`` for
    a part past a cap) names the part: the DOCX is refused, never read in part."""
    archive = BoundedZip(data, what)
    parts = {info.filename: info for info in archive.infos if not info.is_dir()}
    if len(parts) > MAX_MEMBERS:
        raise UnreadableError(f"not a readable {what} (more than {MAX_MEMBERS:,} parts)")
    out = io.BytesIO()
    with source_budget(), zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as package:
        for name, info in parts.items():
            text_part = name.lower().endswith((".xml", ".rels"))
            package.writestr(name, archive.read(info) if text_part else b"")
    return out.getvalue()


def _docx_blocks(document) -> list:
    """Paragraphs and tables in document order."""
    if hasattr(document, "iter_inner_content"):
        return list(document.iter_inner_content())
    return list(document.paragraphs) + list(document.tables)  # pragma: no cover - python-docx < 1.0


def _docx_has_title(document) -> bool:
    return any((p.style is not None and p.style.name == "Title") and p.text.strip() for p in document.paragraphs)


def _docx_table(table) -> str:
    """A Word table as a Markdown table (its first row the header)."""
    rows: list[list[str]] = []
    for row in table.rows:
        cells: list[str] = []
        previous = None
        for cell in row.cells:
            if previous is not None and cell._tc is previous:  # a merged cell is listed once per column
                cells.append("")
                continue
            previous = cell._tc
            cells.append(escape_text(" ".join(cell.text.split())).replace("|", "\\|"))
        if any(cells):
            rows.append(cells)
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    rows = [r + [""] * (width - len(r)) for r in rows]
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join(["---"] * width) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(lines)
