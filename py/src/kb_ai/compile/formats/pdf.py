"""The PDF reader: a PDF's text (pypdf, imported on first use), cleaned by ``pdf_text``, its title
from the document information, else the first heading-sized line. Called by
``compile.readers.parse_document``."""

from __future__ import annotations

import io
from typing import Any

from kb_ai.compile.readers import (_CONTROL_CHARS, _PLACEHOLDER_TITLE, MAX_PDF_PAGES, Parsed, UnreadableError,
                                   _one_line, date_from_text, normalize_date)


def read_pdf(data: bytes) -> Parsed:
    """A PDF's text (``formats/pdf_text.py``: running headers and footers removed, paragraphs
    re-joined); its title from the document information, else the first heading-sized line."""
    from kb_ai.compile.formats.pdf_text import clean_pages, heading_title  # noqa: PLC0415

    reader, pages, count = _pdf_reader(data)
    notes: list[str] = []
    texts: list[str] = []
    chunks: list[tuple[str, float]] = []
    for number in range(min(count, MAX_PDF_PAGES)):
        try:
            if number == 0:
                page_text = pages[0].extract_text(visitor_text=_size_visitor(chunks)) or ""
            else:
                page_text = pages[number].extract_text() or ""
        except Exception as exc:  # noqa: BLE001 - one bad page does not spoil the rest
            notes.append(f"page {number + 1} unreadable ({type(exc).__name__})")
            continue
        texts.append(page_text)
    if count > MAX_PDF_PAGES:
        notes.append(f"only the first {MAX_PDF_PAGES} of {count} pages read")
    title, date = _pdf_metadata(reader)
    controls = sum(len(_CONTROL_CHARS.findall(t)) + t.count("\x0c") for t in texts)
    if controls:
        notes.append(f"{controls:,} control character{'s' if controls != 1 else ''} (NUL included) removed")
    body = clean_pages(texts)
    if not title:
        title = heading_title(chunks)
    if not title:
        first = body.split("\n\n", 1)[0].strip()
        title = first if 0 < len(first) <= 90 and not first.endswith((".", ",", ";", ":")) else None
    return Parsed("pdf", body, title, date_from_text(body) or date, notes)


def _size_visitor(chunks: list[tuple[str, float]]):
    """A pypdf ``visitor_text`` collecting (text, font size as drawn) of a page."""

    def visit(text, cm, tm, font_dict, font_size):
        try:
            scale = abs(float(tm[3])) * abs(float(cm[3])) or 1.0
            chunks.append((text, float(font_size) * scale))
        except (TypeError, ValueError, IndexError):
            pass

    return visit


def _pdf_reader(data: bytes) -> tuple[Any, Any, int]:
    """(an open and, without a password, decrypted ``pypdf.PdfReader``, its pages, how many),
    or ``UnreadableError``."""
    try:
        from pypdf import PdfReader  # noqa: PLC0415
        from pypdf.errors import PdfReadError  # noqa: PLC0415
    except ImportError:  # pragma: no cover - declared dependency
        raise UnreadableError("PDF support unavailable (pypdf not installed)") from None
    import logging  # noqa: PLC0415

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # broken files are reported as skipped, not logged
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            try:
                if not reader.decrypt(""):
                    raise UnreadableError("encrypted PDF (password required)")
            except UnreadableError:
                raise
            except Exception:  # noqa: BLE001
                raise UnreadableError("encrypted PDF (cannot decrypt)") from None
        pages = reader.pages
        count = len(pages)
    except UnreadableError:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, OSError, AttributeError) as exc:
        raise UnreadableError(f"not a readable PDF ({_one_line(exc)})") from None
    return reader, pages, count


def _pdf_metadata(reader) -> tuple[str | None, str | None]:
    """(title, date) from the PDF's document information, when it has them."""
    title = date = None
    try:
        info = reader.metadata
        if info is not None:
            title = info.title if isinstance(info.title, str) and info.title.strip() else None
            if title and _PLACEHOLDER_TITLE.search(title.strip()):
                title = None  # "Microsoft Word - draft3.docx", "untitled": not the document's title
            created = info.creation_date
            date = normalize_date(created) if created else None
    except Exception:  # noqa: BLE001 - metadata is optional
        pass
    return title, date
