"""The keyword index is updated page by page: after a hand edit (then `kaas index`, or the
server's watcher) only the pages that changed are read again — one page out, one in — and the
result ranks exactly as a full rebuild of the new catalog would, saved and loaded again."""

from __future__ import annotations

import os

import pytest

from kb_ai.offline import lexical
from kb_ai.offline.lexical import LexicalIndex, index_folder, save_keyword_index
from kb_ai.store.kb import KnowledgeBase

from helpers import build_kb, write_page

PAGES = [(f"t{i % 4}/p{i}.md", f"Page {i} {'river' if i % 3 else 'bridge'}",
          f"About the {'northern' if i % 2 else 'ancient'} thing number {i}.",
          f"# Page {i}\n\nThe {'festival' if i % 5 else 'harbour'} of Zorb{i} was founded in {1500 + i}.")
         for i in range(40)]
QUERIES = ["northern bridge founded", "ancient river festival", "harbour", "Zorb7", "quibblefrost valve",
           "page 12 river", "founded founded 1510"]


def _ranking(index: LexicalIndex, query: str):
    return [(hit.path, hit.score) for hit in index.search(query, 40)]


def _count_reads(monkeypatch) -> list[str]:
    reads: list[str] = []
    real = lexical._read_page

    def counting(wiki_dir, entry):
        reads.append(entry.path)
        return real(wiki_dir, entry)

    monkeypatch.setattr(lexical, "_read_page", counting)
    return reads


def _later(file) -> None:
    st = file.stat()
    os.utime(file, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


@pytest.fixture
def kb(tmp_path):
    kb = build_kb(tmp_path, *PAGES, sample=False)
    save_keyword_index(kb)
    return kb


def test_a_hand_edit_a_deletion_and_a_new_page_update_the_index_page_by_page(kb, monkeypatch):
    edited = kb.wiki_dir / "t1/p5.md"
    write_page(kb.wiki_dir, "t1/p5.md", "Page 5 bridge", "Now about the quibblefrost valve.",
               "# Page 5\n\nThe quibblefrost valve of Zorb5 opens at dawn.")
    _later(edited)
    (kb.wiki_dir / "t2/p10.md").unlink()
    write_page(kb.wiki_dir, "t3/new.md", "New harbour page", "A harbour added by hand.", "# New\n\nHarbour harbour.")
    KnowledgeBase(kb.root).reindex()
    catalog = KnowledgeBase(kb.root).catalog()
    reads = _count_reads(monkeypatch)
    updated = LexicalIndex.load_or_build(kb.wiki_dir, catalog, index_folder(kb.state_dir))
    assert sorted(reads) == ["t1/p5.md", "t3/new.md"]  # the rest is not read again
    rebuilt = LexicalIndex.build(kb.wiki_dir, catalog)
    for query in QUERIES:
        assert _ranking(updated, query) == _ranking(rebuilt, query), query
    assert _ranking(updated, "quibblefrost valve")[0][0] == "t1/p5.md"
    assert "t2/p10.md" not in [p for p, _ in _ranking(updated, "festival harbour Zorb10")]
    assert updated.known_terms("quibblefrost Zorb10") == (["quibblefrost"], ["Zorb10"])

    reads.clear()  # saved as updated: the next process loads it, reading no page
    again = LexicalIndex.load_or_build(kb.wiki_dir, catalog, index_folder(kb.state_dir))
    assert reads == []
    for query in QUERIES:
        assert _ranking(again, query) == _ranking(rebuilt, query), query


def test_updates_pile_up_and_still_rank_as_a_rebuild(kb, monkeypatch):
    for round_ in range(3):
        path = f"t{round_}/p{round_ * 4}.md"
        write_page(kb.wiki_dir, path, f"Edited {round_}", f"Round {round_} of edits about the bridge.",
                   f"# Edited\n\nRound {round_} mentions the northern harbour {round_} times.")
        _later(kb.wiki_dir / path)
        KnowledgeBase(kb.root).reindex()
        catalog = KnowledgeBase(kb.root).catalog()
        updated = LexicalIndex.load_or_build(kb.wiki_dir, catalog, index_folder(kb.state_dir))
        rebuilt = LexicalIndex.build(kb.wiki_dir, catalog)
        for query in QUERIES + ["edits round bridge"]:
            assert _ranking(updated, query) == _ranking(rebuilt, query), (round_, query)


def test_a_view_of_an_updated_index_scores_only_its_pages(kb):
    write_page(kb.wiki_dir, "t0/p0.md", "Page 0 bridge", "Changed.", "# Page 0\n\nThe harbour moved.")
    _later(kb.wiki_dir / "t0/p0.md")
    KnowledgeBase(kb.root).reindex()
    catalog = KnowledgeBase(kb.root).catalog()
    updated = LexicalIndex.load_or_build(kb.wiki_dir, catalog, index_folder(kb.state_dir))
    topic = [e.path for e in catalog.entries if e.topic == "t0"]
    hits = [h.path for h in updated.restricted_to(topic).search("harbour", 40)]
    assert hits and set(hits) <= set(topic) and "t0/p0.md" in hits


def test_a_large_change_is_a_full_rebuild(kb, monkeypatch):
    monkeypatch.setattr(lexical, "UPDATE_AT_MOST", 3)
    for i in range(0, 20):
        write_page(kb.wiki_dir, f"t{i % 4}/p{i}.md", f"Rewritten {i}", "Everything changed.", f"# R\n\nNew text {i}.")
        _later(kb.wiki_dir / f"t{i % 4}/p{i}.md")
    KnowledgeBase(kb.root).reindex()
    catalog = KnowledgeBase(kb.root).catalog()
    reads = _count_reads(monkeypatch)
    index = LexicalIndex.load_or_build(kb.wiki_dir, catalog, index_folder(kb.state_dir))
    assert len(reads) == len(catalog)
    assert _ranking(index, "rewritten") == _ranking(LexicalIndex.build(kb.wiki_dir, catalog), "rewritten")


def test_kaas_index_saves_the_index_so_the_first_question_reads_no_page(kb, monkeypatch):
    reads = _count_reads(monkeypatch)
    catalog = KnowledgeBase(kb.root).catalog()
    index = LexicalIndex.load_or_build(kb.wiki_dir, catalog, index_folder(kb.state_dir))
    assert reads == [] and index.search("Zorb7", 1)[0].path == "t3/p7.md"
