"""What is computed from a catalog version (readers' views, keyword indexes, topic indexes, topic
subsets) is kept on that version (``Catalog.derived``): reused while the version is current, and
gone with it once master-index.md changes — no cache elsewhere keeps an old version alive."""

from __future__ import annotations

import gc
import os
import weakref

from kb_ai.navigate.navigator import LexicalIndexCache
from kb_ai.navigate.topic_select import TopicIndexCache, _pages_of
from kb_ai.store.access import Reader
from kb_ai.store.derived import Derived

from helpers import write_page


def _new_version(kb) -> None:
    """A hand edit, then `kaas index`: master-index.md changes, so the store hands out a new catalog."""
    write_page(kb.wiki_dir, "ops/new-page.md", "New page", "Added later.", "# New page\n\nQuorvex.", topic="ops")
    kb.reindex()
    index = kb.wiki_dir / "master-index.md"
    st = index.stat()
    os.utime(index, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))  # a new stamp even on a coarse clock


def test_artefacts_of_one_catalog_version_are_built_once_and_shared(sample_kb):
    write_page(sample_kb.wiki_dir, "hr/pay.md", "Pay", "Salaries.", "# Pay\n\nBands.", topic="hr", access=["hr"])
    sample_kb.reindex()
    lexical = LexicalIndexCache(sample_kb.wiki_dir, sample_kb.state_dir / "lexical-index")
    topics = TopicIndexCache(None)
    catalog = sample_kb.catalog()
    assert sample_kb.catalog() is catalog  # unchanged file: the same version
    bob, carol = Reader("bob", frozenset({"eng"})), Reader("carol", frozenset({"eng"}))
    view = catalog.visible_to(bob)
    assert view is catalog.visible_to(carol) and "hr/pay.md" not in view  # one view per kind of reader
    assert lexical.get(catalog) is lexical.get(catalog) and lexical.get(view) is lexical.get(view)
    assert lexical.get(view) is not lexical.get(catalog)  # a view is indexed over its own pages
    assert topics.get(view) is topics.get(view)
    ops = [topics.get(view).find("ops")]
    subset = _pages_of(view, ops)
    assert subset is _pages_of(view, ops) and subset.root is view
    assert lexical.get(subset) is lexical.get(subset)  # the mask, kept on the subset
    assert [h.path for h in lexical.get(subset).search("reverse proxy nginx", 5)] == ["ops/deployment.md"]


def test_a_new_catalog_version_gets_new_artefacts_and_the_old_one_is_freed(sample_kb):
    lexical = LexicalIndexCache(sample_kb.wiki_dir, sample_kb.state_dir / "lexical-index")
    topics = TopicIndexCache(sample_kb.state_dir)
    old = sample_kb.catalog()
    old_index, old_topics = lexical.get(old), topics.get(old)
    gone = weakref.ref(old)
    del old

    _new_version(sample_kb)
    new = sample_kb.catalog()
    assert "ops/new-page.md" in new
    assert lexical.get(new) is not old_index and topics.get(new) is not old_topics
    assert [h.path for h in lexical.get(new).search("Quorvex", 3)] == ["ops/new-page.md"]
    del old_index, old_topics
    gc.collect()
    assert gone() is None  # neither cache object kept the old version (nor its index) alive


def test_one_rule_bounds_what_a_version_keeps():
    derived = Derived()
    built = []
    for i in range(Derived.KEPT + 5):
        derived.get(("thing", i), lambda i=i: built.append(i) or i)
    derived.get(("thing", 5), lambda: built.append("again"))  # recently used: kept
    assert len(derived) == Derived.KEPT and "again" not in built
    assert derived.get(("thing", 0), lambda: "rebuilt") == "rebuilt"  # least recently used: gone


def test_each_artefact_is_built_once_however_many_threads_ask_at_once():
    import threading
    import time

    derived = Derived()
    calls = []

    def build():
        calls.append(1)
        time.sleep(0.05)  # long enough for every other thread to miss and wait
        return object()

    got = []
    threads = [threading.Thread(target=lambda: got.append(derived.get(("index",), build))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(got) == 8 and all(g is got[0] for g in got)
