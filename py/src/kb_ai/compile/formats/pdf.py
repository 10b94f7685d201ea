"""The PDF reader: a PDF's text (pypdf, imported on first use), cleaned by ``pdf_text``, its title
from the document information, else the first heading-sized line. Called by
``compile.readers.parse_document``.

Every stream pypdf decodes (page contents, forms, font maps; images are not decoded for text)
is under the caps of ``compile/bounded.py``: pypdf's own output limits for each filter are set
to the member cap, and each decoded stream is charged to the source's budget
(``_bounded_pypdf``). A PDF past a cap is refused whole (``InflationLimit``), even when pypdf
swallowed the error on its way up."""

from __future__ import annotations

import io
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator

from kb_ai.compile.bounded import MAX_MEMBER_BYTES, MAX_TOTAL_BYTES, InflationLimit, current_budget, source_budget
from kb_ai.compile.readers import (_CONTROL_CHARS, _PLACEHOLDER_TITLE, MAX_PDF_PAGES, Parsed, UnreadableError,
                                   _one_line, date_from_text, normalize_date)


def read_pdf(data: bytes) -> Parsed:
    """A PDF's text (``formats/pdf_text.py``: running headers and footers removed, paragraphs
    re-joined); its title from the document information, else the first heading-sized line."""
    with source_budget(), _bounded_pypdf() as refused:
        parsed = _read_pdf(data, refused)
        if refused:
            raise refused[0]
    return parsed


def _read_pdf(data: bytes, refused: list[InflationLimit]) -> Parsed:
    from kb_ai.compile.formats.pdf_text import clean_pages, heading_title  # noqa: PLC0415

    reader, pages, count = _pdf_reader(data)
    notes: list[str] = []
    texts: list[str] = []
    chunks: list[tuple[str, float]] = []
    for number in range(min(count, MAX_PDF_PAGES)):
        if refused:
            break
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


# pypdf's limits on what one stream decodes to, all set to the member cap (fields this pypdf
# lacks are left out).
_PYPDF_LIMITS = {name: MAX_MEMBER_BYTES for name in (
    "zlib_maximum_output_length", "lzw_maximum_output_length", "run_length_maximum_output_length",
    "brotli_maximum_output_length", "jbig2_maximum_output_length", "array_based_stream_maximum_output_length",
    "image_maximum_buffer_size", "xmp_maximum_input_length")}
_PYPDF_LIMITS["stream_decoding_work_maximum_length"] = MAX_TOTAL_BYTES
_REFUSED: ContextVar[list[InflationLimit] | None] = ContextVar("kaas_pdf_refused", default=None)
_hook_lock = threading.Lock()


@contextmanager
def _bounded_pypdf() -> Iterator[list[InflationLimit]]:
    """pypdf's stream limits set to the caps, and every stream it decodes charged to the
    source's budget, for the ``with`` block (in this thread only: both are context variables).
    Yields the refusals (empty while none): once one is recorded, every later decode is refused
    at once, so a PDF whose errors pypdf swallows still stops decoding."""
    import pypdf  # noqa: PLC0415
    from pypdf import filters  # noqa: PLC0415

    with _hook_lock:
        if not getattr(filters.decode_stream_data, "_kaas_bounded", False):
            filters.decode_stream_data = _charged(filters.decode_stream_data)
    fields = pypdf.Configuration.__dataclass_fields__
    refused: list[InflationLimit] = []
    token = _REFUSED.set(refused)
    try:
        with pypdf.apply_configuration(**{k: v for k, v in _PYPDF_LIMITS.items() if k in fields}):
            yield refused
    finally:
        _REFUSED.reset(token)


def _charged(decode):
    """``pypdf.filters.decode_stream_data`` charging each stream's decoded bytes to the source's
    budget while ``_bounded_pypdf`` is open (outside it: pypdf's own function, unchanged)."""
    from pypdf.errors import LimitReachedError  # noqa: PLC0415

    def decode_stream_data(stream):
        refused, budget = _REFUSED.get(), current_budget()
        if refused is None or budget is None:
            return decode(stream)
        if refused:
            raise refused[0]
        try:
            data = decode(stream)
            budget.charge(len(data), "a PDF stream")
        except LimitReachedError as exc:
            refused.append(InflationLimit(f"a PDF stream inflates past {MAX_MEMBER_BYTES:,} bytes "
                                          f"(possible compression bomb: {_one_line(exc)})"))
            raise refused[0] from None
        except InflationLimit as exc:
            refused.append(exc)
            raise
        return data

    decode_stream_data._kaas_bounded = True
    return decode_stream_data


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
