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
effect on the next request. A ``kaas.toml`` that stops parsing refuses every token until fixed
(fail closed), with the reason in the server log.
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
        self._stamp: tuple[int, int] | None | bool = False  # False: never loaded
        self._users: list[_User] = []
        self._error: str | None = None

    def _current(self) -> tuple[list[_User], str | None]:
        try:
            st = self.file.stat()
            stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        with self._lock:
            if stamp != self._stamp:
                self._users, self._error = self._load(stamp)
                self._stamp = stamp
            return self._users, self._error

    def _load(self, stamp) -> tuple[list[_User], str | None]:
        if stamp is None:
            return [], None
        try:
            data = tomllib.loads(read_config_text(self.file))
            return parse_users(data.get("users"), str(self.file)), None
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            message = f"{self.file}: cannot read the users ({exc})"
        except ConfigError as exc:
            message = exc.message
        log.error("%s; every token is refused until it is fixed", message)
        return [], message

    def check(self) -> None:
        """Raise the users table's error now (at server start) rather than refuse every request."""
        _users, error = self._current()
        if error:
            raise ConfigError(error)

    def reader_named(self, name: str) -> Reader:
        """A configured user by name (``kaas ask --user``, ``kaas mcp --user``)."""
        users, error = self._current()
        if error:
            raise ConfigError(error)
        for user in users:
            if user.reader.name == name:
                return user.reader
        known = ", ".join(sorted(u.reader.name for u in users)) or "none configured"
        raise ConfigError(f"no user {name!r} in {self.file} (users: {known})")

    def required(self) -> bool:
        """Whether requests must carry a token (an admin token or users are configured)."""
        users, error = self._current()
        return bool(self.admin_digest or users or error)

    def reader_for(self, token: str | None) -> Reader | None:
        """The reader a token belongs to; None for no token, an unknown token, or a broken
        users table. Every configured digest is compared (constant time), whatever matches."""
        users, error = self._current()
        if token is None or error:
            return None
        given = token_digest(token)
        found: Reader | None = None
        if self.admin_digest is not None and hmac.compare_digest(given, self.admin_digest):
            found = OWNER
        for user in users:
            if hmac.compare_digest(given, user.digest) and found is None:
                found = user.reader
        return found
