"""API users: bearer tokens mapped to readers with groups, configured in ``kaas.toml``::

    [users.alice]
    token_sha256 = "9f86d0..."   # SHA-256 (hex) of alice's token; or token = "..." (plain)
    groups = ["hr", "staff"]

    [users.ops]
    token_sha256 = "..."
    admin = true                 # reads every page

``KAAS_API_TOKEN`` (``api_token``), when set, is an admin token too. With neither, a server
(loopback only) has no authentication and every request reads as the owner.

The table is re-read whenever ``kaas.toml`` changes, so adding a group or revoking a user takes
effect on the next request. Fail closed: once tokens were needed (at start, or since), a
``kaas.toml`` that is missing, empty, unreadable, broken or has no users left (an editor that
renames or truncates the file while saving it, ``git stash``, a typo) never opens the server to
everyone as its owner: every token is refused except ``KAAS_API_TOKEN`` (an admin token from
the environment, which needs no file) until the table is back, with the reason in the server
log. Only a restart makes a server that needed tokens open again.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kb_ai.config import CONFIG_FILE, read_config_text
from kb_ai.errors import ConfigError
from kb_ai.store.access import OWNER, Reader

log = logging.getLogger(__name__)


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


@dataclass(frozen=True)
class _User:
    reader: Reader
    digest: bytes


def parse_users(table: Any, origin: str) -> list[_User]:
    """Validate the ``[users]`` table of kaas.toml."""
    if table is None:
        return []
    if not isinstance(table, dict):
        raise ConfigError(f"{origin}: [users] must be a table of users")
    users: list[_User] = []
    for name, spec in table.items():
        where = f"{origin}: [users.{name}]"
        if not isinstance(spec, dict):
            raise ConfigError(f"{where} must be a table with token_sha256 (or token) and groups")
        unknown = set(spec) - {"token", "token_sha256", "groups", "admin"}
        if unknown:
            raise ConfigError(f"{where}: unknown keys {', '.join(sorted(unknown))}")
        if "token_sha256" in spec:
            try:
                digest = bytes.fromhex(str(spec["token_sha256"]))
            except ValueError:
                digest = b""
            if len(digest) != 32:
                raise ConfigError(f"{where}: token_sha256 must be 64 hex digits")
        elif isinstance(spec.get("token"), str) and len(spec["token"]) >= 16:
            digest = token_digest(spec["token"])
        else:
            raise ConfigError(f"{where} needs token_sha256, or a token of at least 16 characters")
        groups = spec.get("groups", [])
        if not isinstance(groups, list) or not all(isinstance(g, str) and g.strip() for g in groups):
            raise ConfigError(f"{where}: groups must be a list of group names")
        admin = spec.get("admin", False)
        if not isinstance(admin, bool):
            raise ConfigError(f"{where}: admin must be true or false")
        users.append(_User(Reader(str(name), frozenset(g.strip() for g in groups), admin), digest))
    digests = [u.digest for u in users]
    if len(set(digests)) != len(digests):
        raise ConfigError(f"{origin}: two users share a token")
    return users


def configured_groups(kb_root: Path) -> set[str] | None:
    """Every group a valid user of ``kaas.toml`` has (``kaas lint``: an ``access`` group nobody
    has is likely a typo); None when no users are configured. Tolerant: an invalid user is
    skipped rather than making every group unknown."""
    try:
        table = tomllib.loads(read_config_text(Path(kb_root) / CONFIG_FILE)).get("users")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    if not isinstance(table, dict) or not table:
        return None
    groups: set[str] = set()
    for name, spec in table.items():
        try:
            groups.update(*(u.reader.groups for u in parse_users({name: spec}, CONFIG_FILE)))
        except ConfigError:
            continue
    return groups


class UserDirectory:
    """Who a bearer token is, per request, from the current kaas.toml."""

    def __init__(self, kb_root: Path, api_token: str | None = None):
        self.file = Path(kb_root) / CONFIG_FILE
        self.admin_digest = token_digest(api_token) if api_token else None
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | str | None | bool = False  # False: never loaded
        self._users: list[_User] = []
        self._error: str | None = None
        # Whether a users table was ever seen (or a broken one): from then on, no users table is
        # an error that refuses every user's token, never "no authentication" (fail closed until
        # the table is back or the server restarts).
        self._had_users = False

    def _current(self) -> tuple[list[_User], str | None]:
        try:
            st = self.file.stat()
            stamp: tuple[int, int] | str | None = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        except OSError as exc:  # permission denied on the folder, a loop, ...: not "no users"
            stamp = f"error {exc.errno}"
        with self._lock:
            if stamp != self._stamp:
                was = self._error
                self._users, self._error = self._load(stamp)
                self._stamp = stamp
                if self._users or self._error:
                    self._had_users = True
                elif self._had_users:
                    what = "is missing" if stamp is None else "has no users"
                    self._error = f"{self.file} {what}"
                if self._error:
                    log.error("%s; every token is refused (KAAS_API_TOKEN excepted) until it is fixed", self._error)
                elif was:
                    log.warning("%s: users are back (%d)", self.file, len(self._users))
            return self._users, self._error

    def _load(self, stamp) -> tuple[list[_User], str | None]:
        if stamp is None:
            return [], None
        try:
            data = tomllib.loads(read_config_text(self.file))
            return parse_users(data.get("users"), str(self.file)), None
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            return [], f"{self.file}: cannot read the users ({exc})"
        except ConfigError as exc:
            return [], exc.message

    def check(self) -> None:
        """Raise the users table's error now (at server start) rather than refuse every request."""
        _users, error = self._current()
        if error:
            raise ConfigError(error)

    def reader_named(self, name: str) -> Reader:
        """A configured user by name, as kaas.toml says now (``kaas ask --user``, and per call
        for ``kaas mcp --user``): a ConfigError when the table is broken or gone, or names no
        such user."""
        users, error = self._current()
        if error:
            raise ConfigError(error)
        for user in users:
            if user.reader.name == name:
                return user.reader
        known = ", ".join(sorted(u.reader.name for u in users)) or "none configured"
        raise ConfigError(f"no user {name!r} in {self.file} (users: {known})")

    def required(self) -> bool:
        """Whether requests must carry a token: an admin token is set, users are configured, or
        were since this directory was made (fail closed: never open again while running)."""
        users, error = self._current()
        return bool(self.admin_digest or self._had_users or users or error)

    def reader_for(self, token: str | None) -> Reader | None:
        """The reader a token belongs to; None for no token or an unknown token. While the users
        table is broken or gone only ``KAAS_API_TOKEN`` is known. Every configured digest is
        compared (constant time), whatever matches."""
        users, error = self._current()
        if token is None:
            return None
        given = token_digest(token)
        found: Reader | None = None
        if self.admin_digest is not None and hmac.compare_digest(given, self.admin_digest):
            found = OWNER
        for user in [] if error else users:
            if hmac.compare_digest(given, user.digest) and found is None:
                found = user.reader
        return found
