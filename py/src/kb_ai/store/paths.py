"""Safe paths inside ``wiki/``: every path that comes from a person, a catalog line, a source
or a model goes through here before kaas reads or writes a file."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path, PurePosixPath
from urllib.parse import unquote

from kb_ai.errors import UnsafePathError

_SLUG_STRIP = re.compile(r"[^a-z0-9]+")
# Already-normal catalog paths (the common case, 100,000 of them in a large catalog) skip the
# general checks: segments of safe characters that do not start with a dot, ending in .md.
_CLEAN_PATH = re.compile(r"(?:[A-Za-z0-9_][A-Za-z0-9_\-.]*/)*[A-Za-z0-9_][A-Za-z0-9_\-.]*\.md")
MAX_SLUG_LENGTH = 80
MAX_NAME_BYTES = 255  # NAME_MAX of Linux, macOS and Windows file systems
MAX_PATH_BYTES = 1024  # well under PATH_MAX (4096) once the wiki folder's own path is in front


def slugify(text: str, fallback: str = "untitled") -> str:
    """ASCII, lower-case, hyphen-separated slug; never empty, never a dot-name."""
    normalized = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    slug = _SLUG_STRIP.sub("-", normalized.lower()).strip("-")
    slug = slug[:MAX_SLUG_LENGTH].rstrip("-")
    return slug or fallback


# A first folder named "wiki" cannot be addressed: "wiki/<path>" is how models and people name
# a page of the wiki, and the prefix is dropped. Topics that would get that folder get this one.
UNADDRESSABLE_TOPIC = "wiki"
TOPIC_INSTEAD = "wiki-pages"


def topic_folder(slug: str) -> str:
    """The folder for a topic slug (``wiki`` cannot be one, see above)."""
    return TOPIC_INSTEAD if slug == UNADDRESSABLE_TOPIC else slug


def normalize_wiki_path(raw: str) -> str:
    """Turn a path as people and models write it into the catalog's form, or raise.

    Accepts ``topic/slug.md``, ``./topic/slug.md``, ``wiki/topic/slug.md``, ``/wiki/topic/slug.md``
    and percent-encoded forms; strips ``#anchors``. Refuses ``..``, absolute file-system paths,
    backslashes, control characters and anything that is not a ``.md`` file.

    One function on purpose (its cyclomatic complexity is over 20): it is the security check every
    page path passes, a linear list of refusals in the order they must apply (decode, then strip,
    then refuse); kept in one place so that it can be read, top to bottom, as the rule.
    """
    if not isinstance(raw, str):
        raise UnsafePathError("a page path must be a string")
    if _CLEAN_PATH.fullmatch(raw) and ".." not in raw and not raw.startswith("wiki/"):
        if len(raw) > MAX_NAME_BYTES:  # ASCII here: characters are bytes
            _check_length(raw, raw)
        return raw
    text = unquote(raw.strip())
    text = text.split("#", 1)[0].split("?", 1)[0]
    # Control characters, and lone surrogates (from JSON escapes such as "\\ud800"), which no
    # file system can encode.
    if not text or any(ord(ch) < 32 or 0xD800 <= ord(ch) <= 0xDFFF for ch in text) or "\\" in text:
        raise UnsafePathError(f"not a valid page path: {raw!r}")
    if text.startswith("/wiki/"):
        text = text[len("/wiki/"):]
    elif text.startswith("wiki/"):
        text = text[len("wiki/"):]
    while text.startswith("./"):
        text = text[2:]
    if text.startswith("/") or re.match(r"^[A-Za-z]:", text):
        raise UnsafePathError(f"absolute paths are not allowed: {raw!r}")
    parts = PurePosixPath(text).parts
    if not parts or any(part in ("..", ".", "") for part in parts):
        raise UnsafePathError(f"path leaves the wiki: {raw!r}")
    if any(part.startswith(".") for part in parts):
        raise UnsafePathError(f"hidden files are not pages: {raw!r}")
    if not text.endswith(".md"):
        raise UnsafePathError(f"pages are .md files: {raw!r}")
    _check_length(text, raw)
    return PurePosixPath(*parts).as_posix()


def _check_length(text: str, raw: str) -> None:
    """File systems refuse names past 255 bytes and paths past 4096 (ENAMETOOLONG): a path that
    long is not a page, said before any file is touched."""
    if len(text.encode("utf-8")) > MAX_PATH_BYTES:
        raise UnsafePathError(f"path longer than {MAX_PATH_BYTES} bytes: {raw[:60]!r}...")
    for part in text.split("/"):
        if len(part.encode("utf-8")) > MAX_NAME_BYTES:
            raise UnsafePathError(f"file or folder name longer than {MAX_NAME_BYTES} bytes: {part[:60]!r}...")


def resolve_in(root: Path, rel: str) -> Path:
    """Join ``rel`` (already normalized) onto ``root`` and prove, after following symlinks,
    that the result is still inside ``root``."""
    root_real = root.resolve()
    try:
        candidate = (root / rel).resolve()
    except (RuntimeError, OSError):  # a symlink loop (RuntimeError before Python 3.13, then ELOOP)
        raise UnsafePathError(f"a symlink loop, not a page: {rel!r}") from None
    if candidate != root_real and root_real not in candidate.parents:
        raise UnsafePathError(f"path leaves the wiki: {rel!r}")
    return candidate


def safe_wiki_file(wiki_dir: Path, raw: str) -> tuple[str, Path]:
    """Normalize ``raw`` and resolve it inside ``wiki_dir``: returns (catalog path, file path)."""
    rel = normalize_wiki_path(raw)
    return rel, resolve_in(wiki_dir, rel)
