"""Twin knowledge bases for access-control tests: the same public pages, and in one of them also
pages a reader ("bob", group eng) may not read — in every state a file can be in.

Whatever bob does, the two must answer him byte for byte alike: then nothing he gets back can
depend on anything he may not read (not even on whether it exists).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from kb_ai.store.kb import KnowledgeBase

from helpers import build_kb, write_page

ALICE, BOB, OPS = "alice-token-0123456789", "bob-token-0123456789ab", "ops-token-0123456789ab"


def users_toml(alice_group: str = "payroll") -> str:
    """kaas.toml with alice (in ``alice_group``), bob (eng) and ops (admin, by token hash)."""
    return f"""
[users.alice]
token = "{ALICE}"
groups = ["{alice_group}"]

[users.bob]
token = "{BOB}"
groups = ["eng"]

[users.ops]
token_sha256 = "{hashlib.sha256(OPS.encode()).hexdigest()}"
admin = true
"""


USERS_TOML = users_toml()

# Words that exist only in what bob may not read. The paths bob types are echoed back to him
# ("no page 'hr/salaries.md' ..."), so these are titles, text, group names and paths he never types.
SECRETS = ("Zanzibarite", "zanzibarite", "91,000", "Quorvex", "Wobblefrotz", "Hugeflarn", "Latinquux",
           "Dirglimmer", "Linkspoor", "Snorkelwhip", "Indexvorn", "Unrequestedblip", "secret-unlisted",
           "payroll", "Topindexzap")

# Paths bob asks for: each is a hidden page (in some state) in the twin with hidden pages, and
# simply not there in the other — or a file kaas generates, there in both.
TARGETS = (
    "hr/salaries.md",        # restricted to a group bob is not in
    "board/minutes.md",      # access: [] (admins only)
    "hr/broken.md",          # restricted, and its frontmatter does not parse
    "hr/huge.md",            # restricted, and larger than an article may be
    "hr/latin1.md",          # restricted, and not UTF-8
    "hr/dir.md",             # a directory named like a page
    "hr/link.md",            # a symlink out of the wiki (to a public-looking file)
    "answers/secret-answer.md",  # a saved answer with no access of its own, made from hr/salaries.md
    "ops/index.md",          # a topic index page name: generated, never a page
    "index.md", "master-index.md", "topics.md", "log.md",  # generated files
)


def spellings(path: str) -> list[str]:
    """How an attacker may write ``path``: every form kaas accepts, and a few it refuses."""
    code = f"{ord(path[0]):02X}"
    return [
        path,
        "./" + path,
        "wiki/" + path,
        "/wiki/" + path,
        "wiki/./" + path,
        f"%{code}{path[1:]}",              # a percent-encoded letter
        f"%25{code}{path[1:]}",            # ... encoded twice
        path[:-3] + "%2Emd",               # an encoded dot
        path + "#section",
        path + "?q=1",
        "ops/../" + path,                  # refused: leaves through ..
        path.replace("/", "//", 1) if "/" in path else ".//" + path,
        path.upper(),
        path[0].upper() + path[1:],
    ]


LINKS_PAGE = ("ops/links.md", "Links", "Where things are.",
              "# Links\n\nSee [the bands](../hr/salaries.md), [the minutes](/wiki/board/minutes.md) "
              "and [nothing](../hr/nowhere.md).", {"topic": "ops"})


def _hidden_pages(root: Path) -> None:
    wiki = root / "wiki"
    write_page(wiki, "hr/salaries.md", "Zanzibarite salary bands", "Pay bands, including the zanzibarite band.",
               "# Salary bands\n\nThe zanzibarite band pays 91,000 a year. Citations are validated by HR.",
               topic="hr", access=["payroll"])
    write_page(wiki, "hr/secret-unlisted.md", "Unrequestedblip", "Unrequestedblip summary.",
               "Unrequestedblip body about the reverse proxy and deployment.", topic="hr", access=["payroll"])
    write_page(wiki, "board/minutes.md", "Quorvex board minutes", "What the board decided about Quorvex.",
               "# Minutes\n\nQuorvex was approved. Deployment behind a reverse proxy.", topic="board", access=[])
    (wiki / "hr" / "broken.md").write_text("---\ntitle: [Wobblefrotz\naccess: [payroll]\n---\nWobblefrotz.\n")
    (wiki / "hr" / "huge.md").write_text("---\ntitle: Hugeflarn\naccess: [payroll]\n---\n" + "Hugeflarn. " * 200_000)
    (wiki / "hr" / "latin1.md").write_bytes(b"---\ntitle: Latinquux\naccess: [payroll]\n---\n\xe9t\xe9 Latinquux\n")
    write_page(wiki / "hr" / "dir.md", "inner.md", "Dirglimmer", "Dirglimmer.", "Dirglimmer.", access=["payroll"])
    outside = root / "outside.md"
    outside.write_text("---\ntitle: Linkspoor\n---\nLinkspoor: a public-looking file outside the wiki.\n")
    (wiki / "hr" / "link.md").symlink_to(outside)
    write_page(wiki, "answers/secret-answer.md", "What is the Snorkelwhip policy?",
               "Saved answer to the question: What is the Snorkelwhip policy?",
               "# Snorkelwhip\n\nThe Snorkelwhip band is described in [Citations](../retrieval/citations.md).",
               topic="answers", kind="answer", question="What is the Snorkelwhip policy?",
               citations=["retrieval/citations.md"], read=["hr/salaries.md", "retrieval/citations.md"])
    write_page(wiki, "ops/index.md", "Indexvorn", "Indexvorn.", "Indexvorn.")
    (wiki / "index.md").write_text("---\ntitle: Topindexzap\n---\nTopindexzap.\n")


def make_twins(base: Path) -> tuple[KnowledgeBase, KnowledgeBase]:
    """(with hidden pages, without them): both indexed, both with the same users."""
    kbs = []
    for name, hidden in (("with-hidden", True), ("public-only", False)):
        root = base / name
        if hidden:
            _hidden_pages(root)
        kbs.append(build_kb(root, LINKS_PAGE, toml=USERS_TOML))
    return kbs[0], kbs[1]


def assert_no_secret(text: str, where: str = "") -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} leaked {where}"
