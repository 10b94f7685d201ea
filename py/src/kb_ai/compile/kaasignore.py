"""``raw/.kaasignore``: a user's rules, in gitignore syntax, for what of ``raw/`` is compiled.

The rules that apply to a path below raw/ are ``formats.registry.DEFAULT_RULES`` (what is not a
document by its type) followed by the lines of ``raw/.kaasignore``, read with ``pathspec`` (the
gitignore syntax: ``*``, ``**``, a trailing ``/`` for folders, a leading ``/`` to anchor at raw/,
``!`` to bring back). As in git, the last rule matching a path decides: a user's line wins over
the defaults (``!scripts/*.py`` makes those files sources, read as code; ``drafts/`` leaves a
folder out), and a file in a folder that is left out cannot be brought back by a rule for the
file alone (``!_build/`` brings the folder back). The file itself is kaas's configuration, not a
source. User rules match the path as written; the defaults match it lower-cased.

The same rules judge every way in: the walk of compile (``ingest.walk_raw``), ``kaas add`` (a
file or a folder) and the server's upload (``compile/add.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pathspec

from kb_ai.compile.formats.registry import IGNORED, default_reason
from kb_ai.errors import ConfigError
from kb_ai.files import FileTooLargeError, NotRegularFileError, read_regular_bytes

IGNORE_FILE = ".kaasignore"
MAX_IGNORE_BYTES = 256_000


class IgnoreFileError(ConfigError):
    """``raw/.kaasignore`` cannot be used (a line that is not a pattern, not a text file)."""


@dataclass(frozen=True)
class Decision:
    """What the rules say of one path: ``reason`` it is left out (None: it is not), and whether
    a user's ``!pattern`` asked for it (then it is read whatever its type or content)."""

    reason: str | None = None
    asked: bool = False


class SourceRules:
    """The defaults and a user's rules, for paths relative to raw/ (POSIX)."""

    def __init__(self, lines: list[str] | None = None) -> None:
        self.lines = list(lines or [])
        try:
            self._user = pathspec.GitIgnoreSpec.from_lines(self.lines) if self.lines else None
        except (ValueError, TypeError) as exc:  # pathspec's pattern errors are ValueErrors
            raise IgnoreFileError(f"raw/{IGNORE_FILE}: {exc}") from None

    @classmethod
    def load(cls, raw_dir: Path) -> "SourceRules":
        """The rules of ``raw_dir``: the defaults, and its ``.kaasignore`` when there is one
        (read bounded, as a regular file; one that is not UTF-8 text is an error, never guessed)."""
        path = Path(raw_dir) / IGNORE_FILE
        if not path.exists() and not path.is_symlink():
            return cls()
        try:
            data = read_regular_bytes(path, MAX_IGNORE_BYTES)
            text = data.decode("utf-8-sig")
        except FileTooLargeError:
            raise IgnoreFileError(f"raw/{IGNORE_FILE}: larger than {MAX_IGNORE_BYTES:,} bytes") from None
        except (NotRegularFileError, IsADirectoryError):
            raise IgnoreFileError(f"raw/{IGNORE_FILE}: not a regular file") from None
        except UnicodeDecodeError:
            raise IgnoreFileError(f"raw/{IGNORE_FILE}: not UTF-8 text") from None
        except OSError as exc:
            raise IgnoreFileError(f"raw/{IGNORE_FILE}: cannot be read ({exc.strerror or exc})") from None
        return cls(text.splitlines())

    def decide(self, rel: str, *, is_dir: bool = False) -> Decision:
        """The decision for ``rel`` (below raw/, without ``raw/``; a folder with ``is_dir``)."""
        rel = rel.strip("/")
        if self._user is not None:
            result = self._user.check_file(rel + "/" if is_dir else rel)
            if result.include is True:
                return Decision(IGNORED)
            if result.include is False:
                return Decision(None, asked=True)
        return Decision(default_reason(rel, is_dir=is_dir))


def group_left_out(items: list[tuple[str, str]], examples: int = 3) -> list[dict]:
    """``(path, reason)`` pairs as one entry per reason, most files first:
    ``{"reason", "count", "examples"}`` (the first few paths in path order)."""
    groups: dict[str, list[str]] = {}
    for path, reason in sorted(items):
        groups.setdefault(reason, []).append(path)
    return [{"reason": reason, "count": len(paths), "examples": paths[:examples]}
            for reason, paths in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def left_out_lines(groups: list[dict]) -> list[str]:
    """The groups for a person: ``12 left out: image (raw/a.svg, raw/b.png, ... and 10 more)``."""
    lines = []
    for group in groups:
        shown = ", ".join(group["examples"])
        more = group["count"] - len(group["examples"])
        lines.append(f"{group['count']} left out: {group['reason']} ({shown}{f', ... and {more} more' if more else ''})")
    return lines
