"""What a server keeps per catalog page is compact (issue 18 item 5): the catalog's name maps
(``by_title``, ``by_stem``), the bridge's title mentions, the files' stamps and the keyword
index's path lookup are numpy columns of hashes (store/name_index.py, store/stamps.py), not
dicts of 100,000 strings. They must still answer exactly as the dicts did — first page of a
title, every page of a stem, a hash collision never a match — and a reader's view must still
know nothing of the pages it hides."""

from __future__ import annotations

import os
import tracemalloc

import pytest

from kb_ai.navigate.bridge import TitleMentions
from kb_ai.offline.lexical import LexicalIndex
from kb_ai.server.watch import WikiWatcher, changed_paths, wiki_fingerprint
from kb_ai.store.access import Reader
from kb_ai.store.catalog import CatalogEntry, CatalogStore, parse_master_index, Catalog
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.name_index import NameIndex
from kb_ai.store.words import title_identity

from helpers import build_kb, write_page


class Colliding(str):
    """A name whose hash is every other Colliding name's hash."""

    def __hash__(self) -> int:
        return 7


def _entry(path: str, title: str) -> CatalogEntry:
    return CatalogEntry(path=path, title=title, summary="", topic=path.split("/")[0])


def test_names_that_share_a_hash_are_still_told_apart():
    entries = [_entry("a/one.md", "One"), _entry("b/two.md", "Two"), _entry("c/one.md", "One")]
    index = NameIndex(entries, lambda e: (Colliding(e.title),))
    assert index.paths(Colliding("One")) == ["a/one.md", "c/one.md"]
    assert index.paths(Colliding("Two")) == ["b/two.md"]
    assert index.paths(Colliding("Three")) == [] and Colliding("Three") not in index
    assert index.many([Colliding("Two"), Colliding("One"), Colliding("x")]) == [["b/two.md"], ["a/one.md", "c/one.md"], []]
    each = NameIndex.one_each(entries, [Colliding(e.title) for e in entries], lambda e: (Colliding(e.title),))
    assert each.paths(Colliding("One")) == ["a/one.md", "c/one.md"] and each.positions(Colliding("Two")) == [1]
    assert each.first_positions([Colliding("Three"), Colliding("One")]) == [None, 0]
    first = NameIndex(entries, lambda e: (Colliding(e.title),), first=True)
    assert first[Colliding("One")] == "a/one.md"
    with pytest.raises(KeyError):
        first[Colliding("Three")]


def test_the_name_maps_answer_as_the_dicts_they_replace(tmp_path):
    pages = [("history/bridge.md", "The Bridge", "A bridge.", "text"),
             ("music/bridge.md", "The bridge", "A song part.", "text"),  # same title identity, same stem
             ("music/chorus.md", "Chorus", "A song part.", "text"),
             ("law/treaty.md", "Treaty of Ghent (1814)", "A treaty.", "text")]
    kb = build_kb(tmp_path / "kb", *pages, sample=False)
    catalog = kb.catalog()
    by_title: dict[str, str] = {}
    by_stem: dict[str, list[str]] = {}
    for e in catalog.entries:  # the dicts these maps used to be
        by_title.setdefault(title_identity(e.title), e.path)
        by_stem.setdefault(e.path.rsplit("/", 1)[-1].removesuffix(".md"), []).append(e.path)
    assert dict(catalog.by_title) == by_title and dict(catalog.by_stem) == by_stem
    assert catalog.by_title[title_identity("THE BRIDGE")] == by_title["the bridge"]
    assert catalog.by_stem["bridge"] == by_stem["bridge"] and len(by_stem["bridge"]) == 2
    assert "nothing" not in catalog.by_title and catalog.by_stem.get("nothing", []) == []
    text = "In 1814 the Treaty of Ghent ended the war; The Bridge was sung."
    assert TitleMentions.of(catalog).find(text) == ["law/treaty.md", "history/bridge.md", "music/bridge.md"]


def test_stamps_are_each_files_size_and_mtime_after_a_cold_load(tmp_path):
    kb = build_kb(tmp_path / "kb", ("a/x.md", "X", "x.", "x"), ("b/y.md", "Y", "y.", "yy"), sample=False)
    KnowledgeBase(kb.root).reindex()
    for store in (CatalogStore(kb.wiki_dir, kb.state_dir), CatalogStore(kb.wiki_dir, kb.state_dir)):  # parsed, then the snapshot
        catalog = store.get()
        for entry in catalog.entries:
            st = os.stat(kb.wiki_dir / entry.path)
            assert catalog.stamps[entry.path] == (st.st_size, st.st_mtime_ns)
        assert "a/none.md" not in catalog.stamps and catalog.stamps.get("a/none.md") is None
        assert sorted(catalog.stamps) == sorted(e.path for e in catalog.entries)


def test_a_readers_view_knows_nothing_of_the_pages_it_hides(tmp_path):
    kb = build_kb(tmp_path / "kb",
                  ("ops/open.md", "Open Plan", "Public.", "The Open Plan text."),
                  ("hr/secret.md", "Secret Plan", "Salaries.", "The Secret Plan text.", {"access": ["hr"]}),
                  sample=False)
    catalog = kb.catalog()
    view = catalog.visible_to(Reader("eve", frozenset({"eng"})))
    assert [e.path for e in view.entries] == ["ops/open.md"]
    assert title_identity("Secret Plan") not in view.by_title and "secret" not in view.by_stem
    assert TitleMentions.of(view).find("Both the Secret Plan and the Open Plan.") == ["ops/open.md"]
    index = LexicalIndex.load_or_build(kb.wiki_dir, catalog, None).restricted_to(view.by_path)
    assert [p.path for p in index.search("secret plan salaries", 5)] == ["ops/open.md"]
    hr = catalog.visible_to(Reader("ann", frozenset({"hr"})))
    assert TitleMentions.of(hr).find("the Secret Plan") == ["hr/secret.md"]


def test_name_maps_of_20000_pages_hold_kilobytes_not_megabytes():
    lines = ["# Master index", "", "## history", ""]
    lines += [f"- [Person{i} of the northern bridge](history/person{i}-bridge.md) — A long summary of {i}."
              for i in range(20_000)]
    catalog = parse_master_index("\n".join(lines) + "\n")
    assert len(catalog) == 20_000
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = (catalog.by_title, catalog.by_stem, TitleMentions(catalog),
                Catalog(catalog.entries, [], None).by_path)  # by_path: the one dict kept, for scale
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept[0][title_identity("Person7 of the northern bridge")] == "history/person7-bridge.md"
    # by_path (the one dict kept; its keys are the entries' own strings) is ~0.8 MB of it
    assert held < 2_500_000, held  # here ~1.25 MB; on the dicts ~9.8 MB


def test_the_watcher_tells_which_articles_changed_by_path(tmp_path):
    kb = build_kb(tmp_path / "kb", ("ops/a:b.md", "A", "a.", "a"), ("ops/c.md", "C", "c.", "c"), sample=False)
    before = wiki_fingerprint(kb.wiki_dir)
    write_page(kb.wiki_dir, "ops/c.md", "C", "c, longer now.", "c")
    write_page(kb.wiki_dir, "new/ü d.md", "D", "d.", "d")
    (kb.wiki_dir / "ops" / "a:b.md").unlink()
    after = wiki_fingerprint(kb.wiki_dir)
    assert changed_paths(before, after) == ["new/ü d.md", "ops/a:b.md", "ops/c.md"]
    assert changed_paths(after, after) == []
    seen: list[list[str]] = []
    watcher = WikiWatcher(kb, 0.1, lock=None, on_change=seen.append)
    watcher.mark_seen()  # the baseline
    write_page(kb.wiki_dir, "ops/e.md", "E", "e.", "e")
    assert watcher.mark_seen() == ["ops/e.md"] and seen == [["ops/e.md"]]


def test_a_hidden_pages_title_is_never_a_mention_for_a_reader_who_cannot_read_it(tmp_path):
    """The mention map a cold process loads from the snapshot is the full catalog's; a reader's
    view (and a topic subset of it) is cut from it: the hidden page's keys are not even hashed
    into the view's map, and the page is never found, however the text names it."""
    from kb_ai.store.snapshot import SNAPSHOT_NAME

    kb = build_kb(tmp_path / "kb",
                  ("ops/open.md", "Open Plan", "Public.", "The Open Plan text."),
                  ("ops/kiss.md", "Kiss and Tell (1945 film)", "Public.", "A film."),
                  ("hr/secret.md", "Secret Plan", "Salaries.", "The Secret Plan text.", {"access": ["hr"]}),
                  ("hr/long.md", "Quarterly Review of the Eight Regional Salary Bands", "Salaries.", "Bands.",
                   {"access": ["hr"]}),
                  ("hr/film.md", "Kiss and Tell", "Secret.", "A play.", {"access": ["hr"]}),
                  sample=False)
    KnowledgeBase(kb.root).catalog()
    assert (kb.state_dir / SNAPSHOT_NAME).is_file()
    catalog = KnowledgeBase(kb.root).catalog()  # a cold process: the mention keys from the snapshot
    assert "mention_names" in catalog.__dict__
    text = ("Kiss and Tell, the Secret Plan, the Open Plan and the Quarterly Review of the Eight "
            "Regional Salary Bands.")
    assert TitleMentions.of(catalog).find(text) == ["hr/film.md", "ops/kiss.md", "hr/secret.md", "ops/open.md",
                                                    "hr/long.md"]
    view = catalog.visible_to(Reader("eve", frozenset({"eng"})))
    hidden = ["secret plan", "quarterly review of the eight regional salary bands"]
    for reader_catalog in (view, view.subset([e for e in view.entries if e.topic == "ops"])):
        mentions = TitleMentions.of(reader_catalog)
        assert mentions.find(text) == ["ops/kiss.md", "ops/open.md"]
        assert mentions.keys.maybe(hidden) == [False, False]  # not even a hash of them
        assert mentions.keys.paths("kiss and tell") == ["ops/kiss.md"]
        assert all(p in reader_catalog for key in ("open plan", "kiss and tell") for p in mentions.keys.paths(key))
    hr = catalog.visible_to(Reader("ann", frozenset({"hr"})))
    assert TitleMentions.of(hr).find("the Secret Plan") == ["hr/secret.md"]
