"""Who may read which page.

An article may declare ``access: [group, ...]`` in its frontmatter. Without the key it is public
(every reader of the wiki sees it); with it, only readers in one of those groups — and admins —
see it; ``access: []`` (or a value that is not a list of names) means admins only: a malformed
rule fails closed. A frontmatter block kaas cannot read (not closed, not a mapping, bad YAML, ...)
is not "no rule": ``store/frontmatter.py`` refuses it, and a refused page is shown to nobody
(left out of the catalog; ``store/pages.py: load_page`` answers 404, admins get the error).

Authorization is part of the query, not a filter on its results: a reader's catalog is cut
*before* anything is navigated, counted, summarized or shown to a model (``Catalog.visible_to``),
and every page read is checked against the article's own frontmatter at read time too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

ADMINS_ONLY: tuple[str, ...] = ()
_GROUP = re.compile(r"^[\w.@+-]{1,64}$")


@dataclass(frozen=True)
class Reader:
    """Someone asking: a named user with groups, or an admin who reads everything."""

    name: str
    groups: frozenset[str] = frozenset()
    admin: bool = False

    def can_read(self, access: tuple[str, ...] | None) -> bool:
        if self.admin or access is None:
            return True
        return not self.groups.isdisjoint(access)

    @property
    def key(self) -> tuple[bool, frozenset[str]]:
        """Readers with the same key see the same pages."""
        return (True, frozenset()) if self.admin else (False, self.groups)


# The person at the keyboard (CLI, stdio MCP, a server without users): reads everything.
OWNER = Reader("owner", admin=True)


def parse_access(meta: dict[str, Any]) -> tuple[tuple[str, ...] | None, list[str]]:
    """The ``access`` rule of a frontmatter: (None = public | sorted group names), warnings.
    A key that is ``access`` but for case or blanks (``Access``, ``ACCESS``) is a rule kaas
    does not read: admins only, never public."""
    spelt = [key for key in meta if key != "access" and key.strip().casefold() == "access"]
    if spelt:
        return ADMINS_ONLY, [f"access rule under the key {spelt[0]!r} (write it as `access`): readable by admins only"]
    if "access" not in meta:
        return None, []
    value = meta["access"]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return ADMINS_ONLY, [f"access must be a list of group names, got {type(value).__name__}: readable by admins only"]
    groups, bad = [], []
    for item in value:
        name = str(item).strip() if isinstance(item, (str, int)) and not isinstance(item, bool) else None
        (groups if name and _GROUP.match(name) else bad).append(name if name else repr(item))
    warnings = [f"access: ignored invalid group names {', '.join(map(str, bad))}"] if bad else []
    return tuple(sorted(set(groups))), warnings


def derived_access(rules: list[tuple[str, ...] | None]) -> tuple[str, ...] | None:
    """The access of a page made from pages with these rules (a saved answer citing them): only
    readers who can read every one of them. None when all are public."""
    restricted = [set(r) for r in rules if r is not None]
    if not restricted:
        return None
    return tuple(sorted(set.intersection(*restricted)))


def holds(page: tuple[str, ...] | None, rule: tuple[str, ...] | None) -> bool:
    """Whether a page with access ``page`` may hold text that is under ``rule``: everyone who
    may read the page may read that text (``rule`` None: public text, any page holds it; a
    public page holds only public text; else every group of ``page`` must be one of ``rule``'s,
    and admins only, ``()``, holds anything)."""
    if rule is None:
        return True
    if page is None:
        return False
    return set(page) <= set(rule)


def format_access(access: tuple[str, ...]) -> str:
    return ", ".join(access)
