"""`kaas index` reads again only the articles that changed since the last re-index (issue 32):
the catalog, its warnings and master-index.md are those of a full build, a no-op re-index reads
no article, and the walk of wiki/ lists exactly what ``sorted(wiki.rglob("*.md"))`` filtered did."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kb_ai.store import articles, reindex_record
from kb_ai.store.catalog import build_catalog
from kb_ai.store.kb import KnowledgeBase

from helpers import build_kb, write_page

PAGES = [(f"t{i % 3}/p{i}.md", f"Page {i}", f"About thing {i}.", f"# Page {i}\n\nBody {i}.") for i in range(12)]


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """Articles read (every build, old or new, reads an article through read_article_text)."""
    seen: list[str] = []
    real = articles.read_article_text

    def counting(file, rel):
        seen.append(rel)
        return real(file, rel)

    monkeypatch.setattr(articles, "read_article_text", counting)
    return seen


@pytest.fixture
def no_racy_window(monkeypatch):
    """Files written a moment ago count as settled (the tests do not wait two seconds)."""
    monkeypatch.setattr(reindex_record, "RACY_NS", 0)


def _kb(tmp_path) -> KnowledgeBase:
    return build_kb(tmp_path, *PAGES, ("t0/nosummary.md", "No summary", None, "# N\n\nFirst sentence here."),
                    sample=False)


def _state(kb: KnowledgeBase):
    index = kb.master_index.stat()
    return ([(e.path, e.title, e.summary, e.topic, e.access) for e in kb.catalog().entries],
            kb.master_index.read_text(encoding="utf-8"), (index.st_mtime_ns, index.st_ino),
            (kb.wiki_dir / "topics.md").read_text(encoding="utf-8"))


def test_a_no_op_re_index_reads_no_article_and_keeps_every_warning(tmp_path, reads, no_racy_window):
    kb = _kb(tmp_path)
    first = KnowledgeBase(kb.root).reindex()
    before = _state(kb)
    reads.clear()
    again = KnowledgeBase(kb.root).reindex()
    assert reads == []
    assert again.warnings == first.warnings and any("no summary" in w for w in again.warnings)
    assert (again.articles, again.written) == (13, False)
    assert _state(kb) == before  # master-index.md not even touched (its mtime kept)


def test_only_changed_new_and_replaced_articles_are_read_and_the_catalog_is_a_full_builds(
        tmp_path, reads, no_racy_window):
    kb = _kb(tmp_path)
    KnowledgeBase(kb.root).reindex()
    wiki = kb.wiki_dir
    edited = wiki / "t1/p1.md"
    st = edited.stat()
    text = edited.read_text(encoding="utf-8").replace("Page 1", "Page X")  # same size
    edited.write_text(text, encoding="utf-8")
    os.utime(edited, ns=(st.st_atime_ns, st.st_mtime_ns))  # its old mtime back: the ctime tells
    (wiki / "t2/p2.md").unlink()
    write_page(wiki, "t2/new.md", "New page", "Added by hand.", "# New\n\nText.")
    replaced = wiki / "t0/p3.md"
    copy = wiki / "t0/p3.tmp"
    copy.write_text(replaced.read_text(encoding="utf-8").replace("Page 3", "Page Y"), encoding="utf-8")
    os.replace(copy, replaced)
    reads.clear()
    result = KnowledgeBase(kb.root).reindex()
    assert sorted(reads) == ["t0/p3.md", "t1/p1.md", "t2/new.md"]
    full = build_catalog(wiki)
    assert [(e.path, e.title, e.summary) for e in KnowledgeBase(kb.root).catalog().entries] == \
        [(e.path, e.title, e.summary) for e in full.entries]
    assert result.warnings == full.warnings
    titles = {e.path: e.title for e in full.entries}
    assert titles["t1/p1.md"] == "Page X" and titles["t0/p3.md"] == "Page Y" and "t2/p2.md" not in titles


def test_a_hand_edited_master_index_is_rebuilt_from_every_article(tmp_path, reads, no_racy_window):
    kb = _kb(tmp_path)
    KnowledgeBase(kb.root).reindex()
    good = kb.master_index.read_text(encoding="utf-8")
    kb.master_index.write_text(good.replace("Page 4", "Forged title"), encoding="utf-8")
    reads.clear()
    KnowledgeBase(kb.root).reindex()
    assert len(reads) == 13
    assert kb.master_index.read_text(encoding="utf-8") == good


def test_an_article_changed_just_before_the_last_re_index_is_read_again(tmp_path, reads):
    kb = _kb(tmp_path)  # its files were written a moment ago: inside the racy window
    KnowledgeBase(kb.root).reindex()
    reads.clear()
    KnowledgeBase(kb.root).reindex()
    assert len(reads) == 13


@pytest.mark.parametrize("damage", [b"", b"garbage", None])
def test_a_damaged_or_foreign_record_means_a_full_read(tmp_path, reads, no_racy_window, damage):
    kb = _kb(tmp_path)
    KnowledgeBase(kb.root).reindex()
    record = kb.state_dir / reindex_record.RECORD_NAME
    if damage is None:
        data = bytearray(record.read_bytes())
        data[len(data) // 2] ^= 1  # one bit: the seal no longer matches
        record.write_bytes(bytes(data))
    else:
        record.write_bytes(damage)
    reads.clear()
    result = KnowledgeBase(kb.root).reindex()
    assert len(reads) == 13 and result.articles == 13


def _old_walk(wiki_dir: Path) -> list[str]:
    """iter_article_paths as it was: rglob, then resolve every file."""
    root = wiki_dir.resolve()
    found = []
    for file in sorted(wiki_dir.rglob("*.md")):
        rel = file.relative_to(wiki_dir).as_posix()
        if any(p.startswith(".") for p in rel.split("/")) or articles.is_generated(rel):
            continue
        try:
            real = file.resolve()
        except (RuntimeError, OSError):
            found.append(rel)
            continue
        if root not in real.parents or real.is_dir():
            continue
        found.append(rel)
    return found


def test_the_walk_lists_what_rglob_did_links_hidden_and_generated_files_included(tmp_path):
    wiki = tmp_path / "wiki"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("x", encoding="utf-8")
    for rel in ["a/b.md", "a-b/x.md", "a/c/d.md", "Z.md", "a.md", ".hidden/h.md", "a/.h.md", "folder.md/in.md",
                "master-index.md", "topics.md", "log.md", "notes.txt", "a/UPPER.MD"]:
        (wiki / rel).parent.mkdir(parents=True, exist_ok=True)
        (wiki / rel).write_text("x", encoding="utf-8")
    (wiki / "in-link.md").symlink_to(wiki / "a/b.md")
    (wiki / "out-link.md").symlink_to(outside / "secret.md")
    (wiki / "dangling.md").symlink_to(wiki / "nowhere.md")
    (wiki / "loop.md").symlink_to(wiki / "loop.md")
    (wiki / "linked-folder").symlink_to(outside, target_is_directory=True)
    (wiki / "dir-link.md").symlink_to(wiki / "a", target_is_directory=True)
    got = articles.iter_article_paths(wiki)
    assert got == _old_walk(wiki)
    assert "a/b.md" in got and "folder.md/in.md" in got and "out-link.md" not in got
