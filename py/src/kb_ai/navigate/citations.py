"""Citations: ``[Title](path)`` links in an answer, validated against the pages actually read."""

from __future__ import annotations

from kb_ai.navigate.records import Citation, ReadPage
from kb_ai.store.links import resolve_link
from kb_ai.store.markdown_text import find_links


def find_citation_targets(answer: str) -> list[tuple[str, str]]:
    """Every Markdown link in ``answer`` as (title, target), in order of appearance: inline
    ``[Title](path)`` and reference ``[Title][1]`` links alike; links in code are not links."""
    return [(link.text, link.target) for link in find_links(answer) if link.kind != "definition"]


def validate_citations(answer: str, pages_read: list[ReadPage]) -> tuple[list[Citation], list[str]]:
    """Split the answer's links into valid citations (pages read, de-duplicated, in order of first
    appearance, titled from the catalog) and invalid ones (anything else: pages not read,
    invented paths, external links, and saved answers, which are navigation, not evidence)."""
    read = {p.path: p for p in pages_read if p.is_evidence}
    valid: list[Citation] = []
    invalid: list[str] = []
    seen: set[str] = set()
    for _title, target in find_citation_targets(answer):
        path = resolve_link("", target).page  # an answer's paths are catalog paths, as a page's links may be
        if path is None or path not in read:
            if target not in invalid:
                invalid.append(target)
            continue
        if path not in seen:
            seen.add(path)
            valid.append(Citation(path, read[path].title))
    return valid, invalid
