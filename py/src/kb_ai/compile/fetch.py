"""``kaas add URL``: fetch a web page into ``raw/web/`` as Markdown with its title and URL.

The page's readable content (trafilatura, through ``readers.parse_document``) is stored as
``raw/web/<host-and-path>-<hash of the URL>.md`` with frontmatter ``title``, ``source_url`` and
``fetched_at``. The name depends only on the URL (fragment dropped, host lower-cased), so
fetching the same URL again rewrites the same file: the next compile sees a changed source, a
revision, and updates its articles. A page whose text and title did not change is left alone.

Guards, for every fetch: ``http``/``https`` only (no ``file:``, ``ftp:``, ``data:``...), no user
name or password in the URL, at most ``max_redirects`` redirects (each hop checked like the
first), one deadline for the whole fetch (``timeout``: the name lookups, connects, redirects,
headers and every read, each socket operation given only the time left, ``public_web``), at
most ``max_bytes`` of body, counted on the wire and after each step of its decoding
(``content_coding``: gzip and deflate, each inflated a piece at a time, so a compression bomb is
cut at the limit), and a content type of HTML, plain text or Markdown. ``allow_private=False``
(the server's policy, ``FetchPolicy.for_server``) also refuses any host that resolves to a
loopback, private, link-local, multicast or otherwise non-global address (an IPv6 address
carrying an IPv4 one, NAT64 or 6to4 say, by that IPv4 address), and connects to the very
address it checked (``public_web.PublicOnlyTransport``: the name is looked up once per
connection, so a DNS answer that changes after the check cannot redirect the request); proxies
from the environment are not used then (a proxy would connect by name). The command line
allows every http(s) URL: it runs on the user's own machine, as the user.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit, urlunsplit

from kb_ai.compile.add import WEB, Added, AddError, _existing, store_source
from kb_ai.compile.content_coding import ACCEPT_ENCODING, BodyTooLarge, ContentCodingError, decoded
from kb_ai.compile.readers import UnreadableError, parse_document
from kb_ai.store.frontmatter import render_article, split_frontmatter
from kb_ai.store.markdown_text import first_heading
from kb_ai.store.paths import slugify

WEB_FOLDER = "web"
CONTENT_TYPES = {"text/html": "page.html", "application/xhtml+xml": "page.html",
                 "text/plain": "page.txt", "text/markdown": "page.md", "text/x-markdown": "page.md"}
USER_AGENT = "kaas-add/1 (+https://github.com/kaas)"
MAX_URL_LENGTH = 2048
_MD_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")  # a backslash escape of ASCII punctuation


class FetchError(AddError):
    """A URL that cannot be fetched or is refused (scheme, address, size, type, timeout)."""

    code = "fetch_refused"


@dataclass(frozen=True)
class FetchPolicy:
    allow_private: bool = True
    max_bytes: int = 5_000_000
    timeout: float = 20.0  # seconds for the whole fetch: lookups, connects, redirects, every read
    max_redirects: int = 5

    @classmethod
    def for_server(cls, allow_private: bool = False) -> "FetchPolicy":
        return cls(allow_private=allow_private)


def normalize_url(url: str) -> str:
    """The URL as it is stored and named: scheme and host lower-case, no fragment; or ``FetchError``."""
    url = (url or "").strip()
    if len(url) > MAX_URL_LENGTH:
        raise FetchError(f"URL longer than {MAX_URL_LENGTH} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise FetchError(f"not a URL: {url[:100]!r}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise FetchError(f"only http and https URLs can be added, not {parts.scheme or 'a bare name'!r}: {url[:100]}")
    if not parts.hostname:
        raise FetchError(f"no host in {url[:100]!r}")
    if parts.username is not None or parts.password is not None:
        raise FetchError("URLs with a user name or password are refused (they would be stored in raw/)")
    if any(ord(c) < 33 for c in url):
        raise FetchError(f"not a URL (space or control character): {url[:100]!r}")
    host = parts.hostname.lower()
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != {"http": 80, "https": 443}[parts.scheme.lower()]:
        netloc += f":{port}"
    return urlunsplit((parts.scheme.lower(), netloc, parts.path or "/", parts.query, ""))


def raw_name_for(url: str) -> str:
    """``<host-and-path slug>-<8 hex of the URL's hash>.md``: stable per URL, safe as a file name."""
    parts = urlsplit(url)
    slug = slugify(f"{parts.hostname} {parts.path} {parts.query}", fallback="page")[:60].rstrip("-")
    return f"{slug}-{hashlib.sha256(url.encode('utf-8')).hexdigest()[:8]}.md"


def fetch_page(url: str, policy: FetchPolicy = FetchPolicy()) -> tuple[str, bytes, str]:
    """GET ``url`` under ``policy``: (final URL, body bytes, content type)."""
    import httpx  # noqa: PLC0415 (only `kaas add URL` needs it)

    from kb_ai.compile.public_web import FetchTransport, NotPublicError, proxy_mounts  # noqa: PLC0415 (imports httpx)

    current = normalize_url(url)
    deadline = time.monotonic() + policy.timeout
    # Every connection (each redirect hop's) under the deadline; the server's: to an address checked public.
    transport = FetchTransport(public_only=not policy.allow_private, deadline=deadline, trust_env=policy.allow_private)
    mounts = proxy_mounts(deadline) if policy.allow_private else None
    headers = {"User-Agent": USER_AGENT, "Accept": "text/html, text/plain;q=0.8, */*;q=0.1",
               "Accept-Encoding": ACCEPT_ENCODING}
    with httpx.Client(follow_redirects=False, trust_env=False, transport=transport, mounts=mounts,
                      timeout=httpx.Timeout(policy.timeout), headers=headers) as client:
        for _hop in range(policy.max_redirects + 1):
            try:
                with client.stream("GET", current) as response:
                    if response.is_redirect:
                        location = response.headers.get("location")
                        if not location:
                            raise FetchError(f"{current}: a redirect without a Location")
                        current = normalize_url(urljoin(current, location))
                        continue
                    if response.status_code != 200:
                        raise FetchError(f"{current}: the server answered {response.status_code}")
                    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
                    if kind not in CONTENT_TYPES:
                        raise FetchError(f"{current}: not a web page ({kind or 'no content type'}); "
                                         "download the file and add it by its path")
                    return current, _read_body(response, policy, deadline, current), kind
            except NotPublicError as exc:
                raise FetchError(exc.message) from None
            except httpx.TimeoutException:
                raise FetchError(f"{current}: not fetched within {policy.timeout:g} s") from None
            except httpx.HTTPError as exc:
                raise FetchError(f"{current}: {type(exc).__name__}: {exc}") from None
        raise FetchError(f"{url}: more than {policy.max_redirects} redirects")


def _read_body(response, policy: FetchPolicy, deadline: float, url: str) -> bytes:
    """The body as sent (``iter_raw``: httpx inflates nothing), decoded by ``content_coding``."""
    declared = response.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > policy.max_bytes:
        raise FetchError(f"{url}: larger than {policy.max_bytes:,} bytes")
    chunks: list[bytes] = []
    try:
        for piece in decoded(response.iter_raw(), response.headers.get("content-encoding"), policy.max_bytes):
            if time.monotonic() > deadline:  # a fast sender; a slow one meets the deadline in its read
                raise FetchError(f"{url}: not fetched within {policy.timeout:g} s")
            chunks.append(piece)
    except (BodyTooLarge, ContentCodingError) as exc:
        raise FetchError(f"{url}: {exc}") from None
    return b"".join(chunks)


def add_url(raw_dir: Path, url: str, policy: FetchPolicy = FetchPolicy(), *, now: dt.datetime | None = None) -> Added:
    """Fetch ``url`` into ``raw/web/`` (a revision of the earlier fetch of the same URL)."""
    wanted = normalize_url(url)
    final, body, kind = fetch_page(wanted, policy)
    try:
        parsed = parse_document(CONTENT_TYPES[kind], body)
    except UnreadableError as exc:
        raise FetchError(f"{final}: {exc}") from None
    text = parsed.text.strip()
    if not text:
        raise FetchError(f"{final}: no readable text on the page")
    # The page's own first heading names it best; a site's <title> often carries the site's name,
    # and the extractor's guess may be a heading of a menu or a dialog.
    heading = _MD_ESCAPE.sub(r"\1", first_heading(text) or "")  # Markdown's \< is the page's <
    title = " ".join((heading or parsed.title or "").split())[:200] or final
    meta = {"title": title, "source_url": wanted}
    if final != wanted:
        meta["fetched_from"] = final
    name = raw_name_for(wanted)
    rel = f"{WEB_FOLDER}/{name}"
    if _same_page(_existing(raw_dir, rel), meta, text):
        return Added(f"raw/{rel}", "unchanged", len(body), title=title, url=wanted)
    stamp = (now or dt.datetime.now(dt.timezone.utc)).replace(microsecond=0)
    meta["fetched_at"] = stamp.isoformat().replace("+00:00", "Z")
    document = render_article(meta, text + "\n").encode("utf-8")
    added = store_source(raw_dir, name, document, folder=WEB_FOLDER, replace=True, via=WEB)
    added.title, added.url = title, wanted
    return added


def _same_page(existing: bytes | None, meta: dict, text: str) -> bool:
    """The stored fetch says the same (title, URL, text): only its fetch time would change."""
    if existing is None:
        return False
    try:
        old_meta, old_body = split_frontmatter(existing.decode("utf-8"), "page")
    except Exception:  # noqa: BLE001 (a damaged or hand-edited file is simply replaced)
        return False
    old_meta = {k: v for k, v in old_meta.items() if k != "fetched_at"}
    return old_meta == meta and old_body.strip() == text
