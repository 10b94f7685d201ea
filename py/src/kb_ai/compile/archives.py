"""ZIP and TAR sources: each text member becomes a section named by its path in the archive.

Archives are read in memory, never extracted to disk. Members with absolute paths or ``..`` are
refused, binaries and nested archives skipped, and what is not a document (the default rules of
``formats/registry.py``: images, code, build files, ...) left out, each with a reason; sizes are
capped per member, per source and by compression ratio (``compile/bounded.py``, the caps every
ZIP-based format and PDF stream shares: ZIP members are read by its ``BoundedZip``), so a zip bomb
costs at most the caps, not the machine.
"""

from __future__ import annotations

import lzma
import re
import tarfile
import zlib
from pathlib import PurePosixPath

from kb_ai.compile.bounded import (MAX_MEMBER_BYTES, MAX_MEMBERS, BoundedZip, Budget, InflatingFile, InflationLimit,
                                   source_budget)
from kb_ai.compile.formats.registry import default_reason
from kb_ai.compile.readers import ARCHIVE_EXT, NotADocumentError, Parsed, UnreadableError, parse_document
from kb_ai.store.markdown_text import demote_headings

MAX_NOTES = 50


def read_archive(path: str, data: bytes) -> Parsed:
    with source_budget() as budget:
        return _read_archive(path, data, budget)


def _read_archive(path: str, data: bytes, budget: Budget) -> Parsed:
    name = PurePosixPath(path).name.lower()
    if name.endswith(".zip") or data[:4] == b"PK\x03\x04":
        members, notes = _zip_members(data)
        kind = "zip"
    else:
        members, notes = _tar_members(data, budget)
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
    """The text-worthy members of a ZIP, each read by ``BoundedZip`` under the caps; the
    refused ones as notes. Stops when the source's inflation budget is spent."""
    archive = BoundedZip(data)
    notes: list[str] = []
    members: list[tuple[str, bytes]] = []
    for index, info in enumerate(sorted(archive.infos, key=lambda i: i.filename)):
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
        try:
            content = archive.read(info)
        except InflationLimit as exc:
            if exc.total:
                notes.append(f"stopped at {clean}: {_reason(exc, name)}")
                break
            notes.append(f"{clean}: skipped ({_reason(exc, name)})")
            continue
        except UnreadableError as exc:
            notes.append(f"{clean}: skipped ({_reason(exc, name)})")
            continue
        members.append((clean, content))
    return members, notes


def _reason(exc: Exception, name: str) -> str:
    """The error's message without the member name it starts with (the note names the member)."""
    text = str(exc)
    return text[len(name) + 2:] if text.startswith(f"{name}: ") else text


def _tar_members(data: bytes, budget: Budget) -> tuple[list[tuple[str, bytes]], list[str]]:
    """The text-worthy members of a TAR (compressed or not), read in one pass through an
    ``InflatingFile``: every byte inflated, members skipped and headers included, is charged to
    the source's budget, so the archive stops there."""
    notes: list[str] = []
    try:
        archive = tarfile.open(fileobj=InflatingFile(data, budget), mode="r|", tarinfo=_BoundedTarInfo)
    except InflationLimit as exc:
        raise UnreadableError(f"not a readable archive ({exc})") from None
    except (tarfile.TarError, OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as exc:
        raise UnreadableError(f"not a readable archive ({exc})") from None
    found: list[tuple[str, bytes]] = []
    try:
        for index, info in enumerate(archive):
            if index >= MAX_MEMBERS:
                notes.append(f"stopped after {MAX_MEMBERS} members")
                break
            note = _tar_note(info)
            if note is None:
                handle = archive.extractfile(info)
                note = f"{_clean_name(info.name)}: skipped (unreadable)" if handle is None else None
                if handle is not None:
                    found.append((_clean_name(info.name), handle.read(MAX_MEMBER_BYTES + 1)))
            if note:
                notes.append(note)
    except InflationLimit as exc:
        notes.append(f"stopped after {len(found)} members: {exc}")
    except (tarfile.TarError, OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as exc:
        notes.append(f"archive damaged after {len(found)} members ({exc})")
        if not found:
            raise UnreadableError(f"not a readable archive ({exc})") from None
    finally:
        archive.close()
    return sorted(found, key=lambda m: m[0]), notes


class _BoundedTarInfo(tarfile.TarInfo):
    """A TAR header whose extended headers (pax records, GNU long names), which ``tarfile``
    reads whole into memory, are refused past the member cap before they are read."""

    def _proc_member(self, tarfile_):  # noqa: ANN001 - tarfile's own hook, called for each header
        if self.type in _EXTENDED_HEADERS and self.size > MAX_MEMBER_BYTES:
            raise InflationLimit(f"an extended TAR header of {self.size:,} bytes, over {MAX_MEMBER_BYTES:,} "
                                 "(possible compression bomb)", total=True)
        return super()._proc_member(tarfile_)


_EXTENDED_HEADERS = {tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
                     tarfile.GNUTYPE_LONGLINK}


def _tar_note(info: tarfile.TarInfo) -> str | None:
    """Why a TAR member is not read ("" for a folder: nothing to say), or None to read it."""
    if info.isdir():
        return ""
    problem = _member_problem(info.name)
    if problem:
        return f"{info.name!r}: {problem}"
    clean = _clean_name(info.name)
    if not info.isfile():
        return f"{clean}: skipped (link or special file)"
    skipped = _skipped_by_name(clean)
    if skipped:
        return skipped
    if info.size > MAX_MEMBER_BYTES:
        return f"{clean}: skipped (larger than {MAX_MEMBER_BYTES:,} bytes)"
    return None
