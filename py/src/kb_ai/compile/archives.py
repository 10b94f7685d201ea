"""ZIP and TAR sources: each text member becomes a section named by its path in the archive.

Archives are read in memory, never extracted to disk. Members with absolute paths or ``..`` are
refused, binaries and nested archives skipped, and what is not a document (the default rules of
``formats/registry.py``: images, code, build files, ...) left out, each with a reason; sizes are capped per member,
per archive and by compression ratio, so a zip bomb costs at most the caps, not the machine.
"""

from __future__ import annotations

import io
import re
import tarfile
import zipfile
from pathlib import PurePosixPath

from kb_ai.compile.formats.registry import default_reason
from kb_ai.compile.readers import ARCHIVE_EXT, NotADocumentError, Parsed, UnreadableError, parse_document
from kb_ai.store.markdown_text import demote_headings

MAX_MEMBERS = 2_000
MAX_MEMBER_BYTES = 5_000_000
MAX_TOTAL_BYTES = 50_000_000
MAX_RATIO = 200  # uncompressed / compressed; text rarely passes 20
MAX_NOTES = 50


def read_archive(path: str, data: bytes) -> Parsed:
    name = PurePosixPath(path).name.lower()
    if name.endswith(".zip") or data[:4] == b"PK\x03\x04":
        members, notes = _zip_members(data)
        kind = "zip"
    else:
        members, notes = _tar_members(data)
        kind = "tar"
    sections: list[str] = []
    for member_path, member_data in members:
        try:
            parsed = parse_document(member_path, member_data, depth=1)
        except NotADocumentError as exc:
            notes.append(f"{member_path}: left out ({exc})")
            continue
        except UnreadableError as exc:
            notes.append(f"{member_path}: skipped ({exc})")
            continue
        except Exception as exc:  # noqa: BLE001 - one bad member does not spoil the archive
            notes.append(f"{member_path}: skipped ({type(exc).__name__})")
            continue
        body = demote_headings(parsed.text.strip(), 2)  # below the member's own ## heading
        if not body:
            notes.append(f"{member_path}: skipped (no text)")
            continue
        sections.append(f"## {member_path}\n\n{body}")
    if len(notes) > MAX_NOTES:
        notes = notes[:MAX_NOTES] + [f"... and {len(notes) - MAX_NOTES} more notes"]
    return Parsed(kind, "\n\n".join(sections), None, None, notes)


def _member_problem(name: str) -> str | None:
    """Why a member path is refused, or None when it is a safe relative path."""
    if not name or "\x00" in name:
        return "empty or invalid name"
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "absolute path refused"
    parts = re.split(r"[\\/]+", name)
    if ".." in parts:
        return "'..' in path refused"
    return None


def _clean_name(name: str) -> str:
    return "/".join(p for p in re.split(r"[\\/]+", name) if p and p != ".")


def _skipped_by_name(clean: str) -> str | None:
    """Why a member is not compiled, judged by its (already safe) name alone."""
    if any(part.startswith(".") for part in clean.split("/")) or clean.startswith("__MACOSX/"):
        return f"{clean}: skipped (hidden)"
    if clean.lower().endswith(ARCHIVE_EXT):
        return f"{clean}: skipped (nested archive)"
    reason = default_reason(clean)  # what is not a document in raw/ is not one in an archive either
    return f"{clean}: left out ({reason})" if reason else None


def _zip_members(data: bytes) -> tuple[list[tuple[str, bytes]], list[str]]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise UnreadableError(f"not a readable ZIP archive ({exc})") from None
    notes: list[str] = []
    members: list[tuple[str, bytes]] = []
    total = 0
    for index, info in enumerate(sorted(infos, key=lambda i: i.filename)):
        name = info.filename
        if index >= MAX_MEMBERS:
            notes.append(f"stopped after {MAX_MEMBERS} members")
            break
        if info.is_dir():
            continue
        problem = _member_problem(name)
        if problem:
            notes.append(f"{name!r}: {problem}")
            continue
        clean = _clean_name(name)
        skipped = _skipped_by_name(clean)
        if skipped:
            notes.append(skipped)
            continue
        if info.flag_bits & 0x1:
            notes.append(f"{clean}: skipped (encrypted)")
            continue
        if info.file_size > MAX_MEMBER_BYTES:
            notes.append(f"{clean}: skipped (larger than {MAX_MEMBER_BYTES:,} bytes)")
            continue
        if info.compress_size and info.file_size / info.compress_size > MAX_RATIO and info.file_size > 100_000:
            notes.append(f"{clean}: skipped (compression ratio over {MAX_RATIO}: possible zip bomb)")
            continue
        if total + info.file_size > MAX_TOTAL_BYTES:
            notes.append(f"stopped at {clean}: archive text over {MAX_TOTAL_BYTES:,} bytes")
            break
        try:
            with archive.open(info) as handle:
                # The header's size can lie: read at most the cap plus one byte.
                content = handle.read(MAX_MEMBER_BYTES + 1)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, RuntimeError) as exc:
            notes.append(f"{clean}: skipped (unreadable: {exc})")
            continue
        if len(content) > MAX_MEMBER_BYTES:
            notes.append(f"{clean}: skipped (larger than {MAX_MEMBER_BYTES:,} bytes)")
            continue
        total += len(content)
        members.append((clean, content))
    return members, notes


def _tar_members(data: bytes) -> tuple[list[tuple[str, bytes]], list[str]]:
    notes: list[str] = []
    members: list[tuple[str, bytes]] = []
    try:
        archive = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")
    except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
        raise UnreadableError(f"not a readable archive ({exc})") from None
    declared = 0
    found: list[tuple[str, bytes]] = []
    try:
        for index, info in enumerate(archive):
            if index >= MAX_MEMBERS:
                notes.append(f"stopped after {MAX_MEMBERS} members")
                break
            name = info.name
            if info.isdir():
                continue
            problem = _member_problem(name)
            if problem:
                notes.append(f"{name!r}: {problem}")
                continue
            clean = _clean_name(name)
            if not info.isfile():
                notes.append(f"{clean}: skipped (link or special file)")
                continue
            declared += info.size
            if declared > MAX_TOTAL_BYTES:
                # Moving past a member means decompressing it: stop rather than chew through a bomb.
                notes.append(f"stopped at {clean}: archive contents over {MAX_TOTAL_BYTES:,} bytes")
                break
            skipped = _skipped_by_name(clean)
            if skipped:
                notes.append(skipped)
                continue
            if info.size > MAX_MEMBER_BYTES:
                notes.append(f"{clean}: skipped (larger than {MAX_MEMBER_BYTES:,} bytes)")
                continue
            handle = archive.extractfile(info)
            if handle is None:
                notes.append(f"{clean}: skipped (unreadable)")
                continue
            found.append((clean, handle.read(MAX_MEMBER_BYTES + 1)))
    except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
        notes.append(f"archive damaged after {len(found)} members ({exc})")
        if not found:
            raise UnreadableError(f"not a readable archive ({exc})") from None
    finally:
        archive.close()
    for clean, content in sorted(found, key=lambda m: m[0]):
        members.append((clean, content))
    return members, notes
