"""Readers: the bytes of one file (Markdown, text, HTML, PDF, office formats, archives) turned into text.

``parse_document`` dispatches on the file name; every reader returns a ``Parsed`` (text, title,
date, notes on anything left out) or raises ``UnreadableError`` with the skip reason. Heavy
readers (trafilatura, pypdf, python-docx) are imported only when a file of their kind turns up.
``ingest.read_source`` wraps this for a file of ``raw/``. Formats with a module of their own are
in ``compile/formats/`` (reST, Markdown dialects, PDF, DOCX, slides, spreadsheets, ODT, EPUB,
RTF, CSV); what stays here is the dispatch,
decoding, dates and titles, and the small readers (Markdown, text, Org, HTML) that share them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from kb_ai.compile.formats.context import ReadContext
from kb_ai.compile.formats.registry import (
    ARCHIVE_EXT,
    BINARY_EXT,
    BINARY_READERS,
    content_reason,
    fence_language,
    reader_for,
)
from kb_ai.errors import ArticleFormatError
from kb_ai.store.articles import split_frontmatter
from kb_ai.store.markdown_text import plain_text, title_heading
from kb_ai.untrusted_text import terminal_safe

MAX_PDF_PAGES = 1_000
# docutils' inline parser is quadratic in a paragraph's unclosed markup ("*[*[*[..."): above
# this estimate (``formats.rst.inline_cost``; ~0.5 s of parsing) a reST file is read as text.
MAX_RST_INLINE_COST = 15_000_000


_ISO_DATE = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)")
# "Date: 2026-03-01", "**Last updated:** 2026-03-01". One possessive run of non-word characters
# around the keyword (it covers ":", "*" and spaces), so a long run is read once.
_DATE_LINE = re.compile(r"\W*+(?:date|updated|last updated|revised|as of)\W*+(\d{4}-\d{2}-\d{2})", re.I)
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")


class UnreadableError(Exception):
    """A file that cannot be turned into text; the message is the skip reason."""


class NotADocumentError(UnreadableError):
    """A file that is not a document by its content (``registry.content_reason``): left out,
    reported by reason; the message is the reason."""


@dataclass
class Parsed:
    kind: str
    text: str
    title: str | None = None
    date: str | None = None
    notes: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)


def parse_document(path: str, data: bytes, *, depth: int = 0, context: ReadContext | None = None,
                   asked: bool = False) -> Parsed:
    """Dispatch on the file name (``formats.registry.reader_for``); ``depth`` > 0 for archive
    members (no nested archives). ``context``: the other sources of raw/, for includes and
    cross-references (none: nothing outside this file is read). ``asked``: a user's rule asked
    for this file, so its content is not judged (``NotADocumentError`` otherwise, for text that
    is not prose). Whatever the reader, the text and title carry no NUL, other control
    character or terminal escape sequence (``untrusted_text.terminal_safe``; an article with a
    NUL is not valid: the document would be left out)."""
    parsed = _parse(path, data, depth=depth, context=context, asked=asked)
    if _CONTROL_CHARS.search(parsed.text):  # whole terminal escape sequences go, not only their ESC
        parsed.text = terminal_safe(parsed.text)
    if parsed.title and _CONTROL_CHARS.search(parsed.title):
        parsed.title = terminal_safe(parsed.title).strip() or None
    return parsed


def _parse(path: str, data: bytes, *, depth: int, context: ReadContext | None, asked: bool) -> Parsed:
    name = PurePosixPath(path).name.lower()
    suffix = PurePosixPath(name).suffix
    reader = reader_for(name)
    if reader == "archive":
        if depth > 0:
            raise UnreadableError("nested archive")
        from kb_ai.compile.archives import read_archive

        return read_archive(path, data)
    if reader == "docx":
        from kb_ai.compile.formats.docx import read_docx  # noqa: PLC0415 (python-docx only for a DOCX)

        return read_docx(data)
    if reader in ("pptx", "xlsx", "odt", "epub"):
        from kb_ai.compile.formats import office  # noqa: PLC0415 (each library only for its format)

        return getattr(office, f"read_{reader}")(data)
    if suffix in BINARY_EXT:
        raise UnreadableError(f"binary file ({suffix})")
    if reader == "pdf" or data[:5] == b"%PDF-":
        from kb_ai.compile.formats.pdf import read_pdf  # noqa: PLC0415 (pypdf only for a PDF)

        return read_pdf(data)
    text, notes = decode_text(data)
    if reader == "text" and _looks_like_html(text):
        reader = "html"
    reason = None if asked else content_reason(reader or "text", text)
    if reason:
        raise NotADocumentError(reason)
    if reader == "code":
        parsed = _read_code(name, text)
    elif reader == "html":
        parsed = _read_html(text)
    elif reader == "markdown":
        parsed = _read_markdown(path, text, context)
    elif reader == "rst":
        parsed = _read_rst(path, text, context)
    elif reader == "org":
        parsed = _read_org(text)
    elif reader in ("rtf", "csv"):
        from kb_ai.compile.formats import office  # noqa: PLC0415

        parsed = office.read_rtf(text) if reader == "rtf" else office.read_csv(text, "\t" if suffix == ".tsv" else ",")
    elif reader == "rst-or-text" and _rst_cues(text):
        parsed = _read_rst(path, text, context, only_if_clean=True)
    else:
        parsed = _read_plain(text)
    parsed.notes[:0] = notes
    return parsed


def sniff_document(name: str, data: bytes) -> str | None:
    """Why the file ``name`` holding ``data`` is not a document by its content (the check
    compile makes, on the first 64 KB), or None; a file that does not decode is not judged here
    (compile reports it)."""
    reader = reader_for(name)
    if reader in (None, "code", "html") or reader in BINARY_READERS or data[:5] == b"%PDF-":
        return None
    try:
        text = decode_text(data[:65_536])[0]
    except UnreadableError:
        return None
    return content_reason(reader, text)


def _read_code(name: str, text: str) -> Parsed:
    """Source code, a stylesheet or a build file a user asked for: the text as one code block."""
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return Parsed("code", f"{fence}{fence_language(name)}\n{text.rstrip()}\n{fence}", None, None)


def decode_text(data: bytes) -> tuple[str, list[str]]:
    """The text of a file, and notes on anything changed to get it. UTF-8 (with or without BOM);
    UTF-16 (with a BOM, or without when every other byte is NUL, as in English text); UTF-8 with
    a few bytes that are not UTF-8 (replaced by U+FFFD, noted); else Windows-1252 when that
    gives clean text (noted); else unreadable. NUL characters in text are removed (noted): they
    cannot be part of an article. A file with NUL bytes in its first 8 KB that is not UTF-16 is
    binary."""
    notes: list[str] = []
    utf16 = _utf16_text(data)
    if utf16 is not None:
        text = utf16
    elif b"\x00" in data[:8192]:
        raise UnreadableError("binary file (contains NUL bytes)")
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            text, note = _not_quite_utf8(data, exc)
            notes.append(note)
    nul = text.count("\x00")
    if nul:
        text = text.replace("\x00", "")
        notes.append(f"{nul:,} NUL character{'s' if nul != 1 else ''} removed")
    return _newlines(text), notes


def _utf16_text(data: bytes) -> str | None:
    """The text when ``data`` is UTF-16 text: with a BOM, or without one when its sample has
    NUL high bytes in (nearly) every character, as UTF-16 English text has. Decoded strictly,
    and text only (almost no control characters), so 16-bit binary data is not taken for text."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        codec = "utf-16"
    elif len(data) >= 4 and len(data) % 2 == 0:
        sample = data[:8192]
        half = len(sample) // 2
        odd, even = sample[1::2].count(0), sample[0::2].count(0)
        if odd >= 0.9 * half and even <= 0.01 * half:
            codec = "utf-16-le"
        elif even >= 0.9 * half and odd <= 0.01 * half:
            codec = "utf-16-be"
        else:
            return None
    else:
        return None
    try:
        head = data[:8192].decode(codec, errors="strict")
    except UnicodeDecodeError:
        if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
            raise UnreadableError("not text (a UTF-16 mark, then bytes that are not UTF-16)") from None
        return None
    if len(_CONTROL_CHARS.findall(head)) > max(2, len(head) // 100):
        return None
    try:
        return data.decode(codec)
    except UnicodeDecodeError as exc:
        raise UnreadableError(f"not text (UTF-16 with bytes that are not UTF-16 at byte {exc.start:,})") from None


def _not_quite_utf8(data: bytes, error: UnicodeDecodeError) -> tuple[str, str]:
    """Text that is not valid UTF-8: UTF-8 with a few stray bytes when it has more valid
    non-ASCII characters than bad bytes, else Windows-1252 when that gives clean text."""
    text = data.decode("utf-8-sig", errors="replace")
    bad = text.count("\ufffd") - data.count("\ufffd".encode("utf-8"))
    non_ascii = len(text) - len(text.encode("ascii", "ignore"))
    valid = non_ascii - text.count("\ufffd")
    if bad <= max(2, len(text) // 200) and valid >= bad:
        return text, (f"{bad:,} byte sequence{'s' if bad != 1 else ''} that {'are' if bad != 1 else 'is'} not UTF-8 "
                      f"replaced by U+FFFD (the first at byte {error.start:,})")
    text = data.decode("cp1252", errors="replace")
    unreadable = text.count("\ufffd") + len(_CONTROL_CHARS.findall(text)) - text.count("\x00")
    if unreadable > max(2, len(text) // 200):
        raise UnreadableError("not text (undecodable bytes)")
    return text, "not UTF-8: read as Windows-1252"


def _newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _has_words(text: str) -> bool:
    return re.search(r"\w", text[:20_000]) is not None  # one word is a source (a note, a name)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]


# ---------------------------------------------------------------------------------------------
# dates and titles

# A document title that is a placeholder of the tool that made the file (PDF, DOCX), not the
# document's own title.
_PLACEHOLDER_TITLE = re.compile(r"^(?:microsoft \w+ - |untitled\b|document\d*$)|\.(?:docx?|pdf|odt|rtf|tex|txt)$", re.I)


def normalize_date(value: object) -> str | None:
    """An ISO ``YYYY-MM-DD`` from a date, a datetime or a string that starts with one."""
    if isinstance(value, dt.datetime):
        return value.date().isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, str):
        match = _ISO_DATE.search(value.strip()[:40])
        if match:
            return _valid_date(*match.groups())
    return None


def _valid_date(year: str, month: str, day: str) -> str | None:
    try:
        return dt.date(int(year), int(month), int(day)).isoformat()
    except ValueError:
        return None


def date_from_filename(path: str) -> str | None:
    match = _ISO_DATE.search(PurePosixPath(path).name)
    return _valid_date(*match.groups()) if match else None


def date_from_text(text: str) -> str | None:
    """A ``Date: 2026-03-01`` style line near the top of a document."""
    for line in text.splitlines()[:15]:
        match = _DATE_LINE.match(line.strip()[:200])
        if match:
            return normalize_date(match.group(1))
    return None


_INDEX_NAMES = {"index", "readme", "_index", "default", "home"}


def title_from_filename(path: str, text: str = "") -> str:
    """The file name made readable: ``http_proxy-config.rst`` -> "Http proxy config",
    ``testclient.md`` -> "Test client" when the document's own words are "test" and "client";
    an ``index.md`` / ``README.md`` is named after its folder (``deployment/index.md`` ->
    "Deployment")."""
    pure = PurePosixPath(path)
    stem = pure.name
    for ext in ARCHIVE_EXT:
        if stem.lower().endswith(ext):
            stem = stem[: -len(ext)]
            break
    else:
        stem = PurePosixPath(stem).stem
    if stem.lower() in _INDEX_NAMES and len(pure.parts) > 2:
        stem = pure.parts[-2]
    stem = _ISO_DATE.sub(" ", stem)
    stem = re.sub(r"(?<=[a-z])(?=[A-Z][a-z])", " ", stem)  # camelCase
    vocabulary = set(re.findall(r"[a-z]{3,}", text[:200_000].lower())) if text else set()
    words = [_segment(word, vocabulary) for word in re.sub(r"[-_.]+", " ", stem).split()]
    title = " ".join(words)
    return (title[:1].upper() + title[1:]) if title else "Untitled"


def _segment(word: str, vocabulary: set[str]) -> str:
    """``testclient`` -> "test client" when the document uses both words and not ``testclient``."""
    lowered = word.lower()
    if len(word) < 7 or not word.isalpha() or not word.islower() or lowered in vocabulary or not vocabulary:
        return word
    best = None
    for cut in range(3, len(word) - 2):
        head, tail = lowered[:cut], lowered[cut:]
        if head in vocabulary and tail in vocabulary:
            score = min(len(head), len(tail))
            if best is None or score > best[0]:
                best = (score, f"{head} {tail}")
    return best[1] if best else word


# ---------------------------------------------------------------------------------------------
# readers


def _read_markdown(path: str, text: str, context: ReadContext | None = None) -> Parsed:
    try:
        meta, body = split_frontmatter(text, path)
    except ArticleFormatError:
        meta, body = {}, text
    title = meta.get("title") if isinstance(meta.get("title"), str) else None
    date = None
    for key in ("date", "updated", "modified", "created"):
        date = normalize_date(meta.get(key))
        if date:
            break
    tags = meta.get("tags")
    tags = [str(t) for t in tags if isinstance(t, (str, int))] if isinstance(tags, list) else []
    from kb_ai.compile.formats.markdown_dialects import plain_markdown  # noqa: PLC0415

    notes: list[str] = []
    context = context or ReadContext(path)
    if meta.get("source_url") and not context.outside:  # a web page as `kaas add URL` stores it
        context = dataclasses.replace(context, outside="a web page (source_url)")
    kind = "markdown"
    if "{" in body or ")=" in body:
        from kb_ai.compile.formats.myst import has_mdbook_includes, is_myst, myst_markdown  # noqa: PLC0415

        if is_myst(body) or has_mdbook_includes(body):
            kind = "myst" if is_myst(body) else kind
            body = myst_markdown(body, context, notes)
    body = plain_markdown(body, context, notes)
    title = plain_text(title) if title and title.strip() else None
    return Parsed(kind, body, title or title_heading(body), date or date_from_text(body), notes, tags[:10])


def _rst_cues(text: str) -> bool:
    from kb_ai.compile.formats.rst import has_rst_cues  # noqa: PLC0415 (docutils: only for reST files)

    return has_rst_cues(text)


def _read_rst(path: str, text: str, context: ReadContext | None, *, only_if_clean: bool = False) -> Parsed:
    """reStructuredText through docutils (``formats/rst.py``); text that docutils cannot take
    is read as plain text, noted. ``only_if_clean`` (a ``.txt`` file with reST cues): plain
    text, without a note, unless docutils reads it without an error."""
    from kb_ai.compile.formats.rst import inline_cost, read_rst  # noqa: PLC0415 (docutils: only for reST files)

    if inline_cost(text) > MAX_RST_INLINE_COST:
        parsed = _read_plain(text)
        if not only_if_clean:
            parsed.notes.append("reStructuredText too costly to parse (paragraphs full of unclosed inline markup): "
                                "read as plain text")
        return parsed
    try:
        read = read_rst(text, context or ReadContext(path), only_if_clean=only_if_clean)
    except Exception as exc:  # noqa: BLE001 - a parser failure on one file: keep its text
        parsed = _read_plain(text)
        if not only_if_clean:
            parsed.notes.append(f"reStructuredText not parsed ({type(exc).__name__}): read as plain text")
        return parsed
    if read is None:
        return _read_plain(text)
    body, title, date, notes = read
    return Parsed("rst", body, title, date or date_from_text(text), notes)


def _read_plain(text: str) -> Parsed:
    lines = [line.strip() for line in text.splitlines()]
    title = None
    for index, line in enumerate(lines):
        if not line:
            continue
        next_line = lines[index + 1] if index + 1 < len(lines) else ""
        underlined = bool(re.fullmatch(r"[=\-~#*]{3,}", next_line))
        # A title stands alone (or is underlined): the first line of a wrapped paragraph is not one.
        alone = not next_line and not line.endswith((".", ",", ";", ":"))
        if len(line) <= 90 and (underlined or alone or line.startswith("# ")):
            title = line.strip("#*= ") or None
        break
    body = _plain_to_markdown(text)
    return Parsed("text", body, title or None, date_from_text(text))


_ORG_KEYWORD = re.compile(r"^#\+(\w+):[ \t]*(.*)$")
_ORG_HEADING = re.compile(r"^(\*{1,6})[ \t]+(.+)$")


def _read_org(text: str) -> Parsed:
    """Org mode: ``#+TITLE:`` is the title, ``#+DATE:`` the date, other ``#+KEYWORD:`` lines
    dropped, ``* Heading`` lines as Markdown headings, ``#+BEGIN_SRC`` blocks fenced."""
    title = date = None
    out: list[str] = []
    for line in text.split("\n"):
        keyword = _ORG_KEYWORD.match(line)
        if keyword:
            name, value = keyword.group(1).lower(), keyword.group(2).strip()
            if name == "title" and value and title is None:
                title = value
            elif name == "date":
                date = date or normalize_date(value.strip("<>[] "))
            elif name == "begin_src":
                out.append("```" + (value.split()[0] if value else ""))
            elif name in ("end_src", "begin_example", "end_example"):
                out.append("```")
            continue
        heading = _ORG_HEADING.match(line)
        out.append("#" * min(6, len(heading.group(1)) + 1) + " " + heading.group(2).strip() if heading else line)
    body = "\n".join(out)
    return Parsed("text", body, title, date or date_from_text(body))


def _plain_to_markdown(text: str) -> str:
    """Plain text: setext underlines become headings, everything else stays as written."""
    out: list[str] = []
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    skip = False
    for index, line in enumerate(lines):
        if skip:
            skip = False
            continue
        following = lines[index + 1].strip() if index + 1 < len(lines) else ""
        if line.strip() and re.fullmatch(r"={3,}", following):
            out.append("# " + line.strip())
            skip = True
        elif line.strip() and re.fullmatch(r"-{3,}", following):
            out.append("## " + line.strip())
            skip = True
        else:
            out.append(line.rstrip())
    return "\n".join(out)


def _looks_like_html(text: str) -> bool:
    head = text[:2000].lstrip().lower()
    return head.startswith(("<!doctype html", "<html")) or ("<body" in head and "</" in head)


# Permalink anchors after headings (Sphinx's and MkDocs' "¶", Node's `<a class="mark"
# href="#id">#</a>`): an anchor to the page itself whose text is a mark. Not part of the heading.
_HEADERLINK = re.compile(r"<a\b[^<>]{0,300}?\bheaderlink\b[^<>]{0,300}+>[^<]{0,20}+</a>"
                         r"|<a\b[^<>]{0,300}?\bhref=[\"']#[^<>]{0,300}+>[ \t]*+(?:#|¶|§|🔗|&para;|&sect;|&#182;)[ \t]*+</a>", re.I)
_PERMALINK_MARK = re.compile(r"(?<![ \t])[ \t]*+[¶🔗][ \t]*+$", re.M)


# A line of code spans glued together ("`import x from 'x';``const x = require('x');`"): how the
# extractor writes a <pre> holding several one-line <code> elements (one per language flavour).
_GLUED_CODE_LINE = re.compile(r"^(?:`[^`\n]++`){2,}+[ \t]*+$", re.M)
_CODE_SPAN = re.compile(r"`([^`\n]++)`")


def _fenced_code_lines(match: re.Match) -> str:
    return "\n".join(f"\n```\n{code}\n```\n" for code in _CODE_SPAN.findall(match.group(0)))


def _read_html(text: str) -> Parsed:
    """HTML: its main content (trafilatura) as Markdown, permalink marks removed; the title from
    ``<title>`` (cut to the page's H1 when it contains it: "Pricing | Acme" -> "Pricing")."""
    parsed = _read_html_content(_HEADERLINK.sub("", text) if "headerlink" in text or "href=" in text else text)
    parsed.text = _PERMALINK_MARK.sub("", parsed.text)
    if "``" in parsed.text:
        parsed.text = _GLUED_CODE_LINE.sub(_fenced_code_lines, parsed.text)
    if parsed.title:
        parsed.title = _PERMALINK_MARK.sub("", parsed.title).strip() or None
    return parsed


def _read_html_content(text: str) -> Parsed:
    try:
        import trafilatura  # noqa: PLC0415 (heavy; only when an HTML file turns up)
    except ImportError:
        trafilatura = None
    body = title = date = sitename = None
    notes: list[str] = []
    if trafilatura is not None:
        try:
            body = trafilatura.extract(text, output_format="markdown", include_tables=True,
                                       include_comments=False, include_links=False, include_images=False)
            meta = trafilatura.extract_metadata(text)
            if meta is not None:
                title, date, sitename = meta.title, normalize_date(meta.date), meta.sitename
        except Exception as exc:  # noqa: BLE001 - fall back to the plain extractor below
            notes.append(f"main-content extraction failed ({type(exc).__name__}); used all text")
    else:
        notes.append("trafilatura unavailable; used all text")
    if not body or not body.strip():
        body, fallback_title = _html_text(text)
        title = title or fallback_title
    site = _site_name(text, sitename)
    if site and body:  # the site's banner <h1> opening the content is not the page's heading
        body = _SITE_H1.sub(lambda m: "" if _same(m.group(1), site) else m.group(0), body, count=1)
    if site and (not title or _same(title, site)):
        title = _page_title(text, site) or title  # "File system | Node.js Docs" -> "File system"
    if title and body:
        heading = title_heading(body)
        if heading and heading.casefold() in title.casefold():
            title = heading  # "Pricing | Acme" -> "Pricing"
    return Parsed("html", body or "", title or title_heading(body or ""), date, notes)


_TITLE_ELEMENT = re.compile(r"<title\b[^<>]*+>([^<]{1,500}+)</title", re.I)
_TITLE_SEPARATOR = re.compile(r"\s[|\u2013\u2014\u00b7-]\s|\s::\s")
_SITE_H1 = re.compile(r"\A\s*#[ \t]+([^\n]*)\n*")


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def _site_name(html: str, sitename: str | None) -> str | None:
    """The site's name as trafilatura reads it (``og:site_name``, the page's banner, ...)."""
    if sitename and sitename.strip():
        return sitename.strip()
    return None


def _page_title(html: str, site: str) -> str | None:
    """The ``<title>`` without its site-name part: "File system | Node.js v20 Documentation"
    -> "File system" when the site is "Node.js v20 Documentation"."""
    import html as html_lib  # noqa: PLC0415

    match = _TITLE_ELEMENT.search(html[:200_000])
    if match is None:
        return None
    full = " ".join(html_lib.unescape(match.group(1)).split())
    parts = [part.strip() for part in _TITLE_SEPARATOR.split(full)]
    kept = [part for part in parts if part and not _same(part, site)]
    if not kept or len(kept) == len(parts):
        return None
    return " - ".join(kept)


_SKIP_TAGS = {"script", "style", "nav", "header", "footer", "noscript", "template", "svg"}
_BLOCK_TAGS = {"p", "div", "li", "tr", "br", "section", "article", "table", "ul", "ol", "pre", "blockquote"}
_HEADING_TAGS = {f"h{n}": n for n in range(1, 7)}
_SPACES = re.compile(r"\s++")
_BLANK_RUNS = re.compile(r"\n{3,}+")


def _html_text(html: str) -> tuple[str, str]:
    """Fallback for HTML trafilatura finds nothing in: (visible text with headings kept,
    title), scripts, styles and navigation dropped. lxml's parser (C, linear on any input; the
    standard library's HTMLParser rescans unclosed tags, quadratic on "<a <a <a ..."), walked
    with a stack, not recursion."""
    import lxml.html  # noqa: PLC0415 (a dependency of trafilatura)
    from lxml import etree  # noqa: PLC0415

    try:
        root = lxml.html.document_fromstring(_CONTROL_CHARS.sub("", html))
    except (etree.ParserError, etree.XMLSyntaxError, ValueError):
        return "", ""
    parts: list[str] = []
    title = ""
    stack: list[tuple[object, bool]] = [(root, False)]
    while stack:
        element, closing = stack.pop()
        tag = element.tag.lower() if isinstance(element.tag, str) else ""
        if closing:
            if tag in _HEADING_TAGS:
                parts.append("\n\n")
        elif tag == "title":
            title = title or element.text_content()
        elif tag and tag not in _SKIP_TAGS:
            if tag in _HEADING_TAGS:
                parts.append("\n\n" + "#" * _HEADING_TAGS[tag] + " ")
            elif tag in _BLOCK_TAGS:
                parts.append("\n\n" if tag != "li" else "\n- ")
            if element.text:
                parts.append(_SPACES.sub(" ", element.text))
            stack.append((element, True))
            stack.extend((child, False) for child in reversed(element))
            continue
        if element.tail and (closing or not tag or tag in _SKIP_TAGS or tag == "title"):
            parts.append(_SPACES.sub(" ", element.tail))
    return _BLANK_RUNS.sub("\n\n", "".join(parts)).strip(), " ".join(title.split())
