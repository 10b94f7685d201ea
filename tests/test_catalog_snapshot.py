"""The parsed-catalog snapshot (store/snapshot.py): a cold process starts from it instead of
parsing master-index.md and stat-ing every article, and still sees what changed on disk — a
page replaced, deleted or added by hand, a new index — and a damaged or foreign snapshot is
rebuilt, never trusted (nor unpickled into anything but plain data)."""

from __future__ import annotations

import io
import os
import pickle
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kb_ai.cli.commands import cli
from kb_ai.store import catalog as catalog_module
from kb_ai.store import snapshot
from kb_ai.store.kb import KnowledgeBase

from helpers import build_kb, write_page

PAGES = [(f"topic{i % 3}/page-{i}.md", f"Page {i}", f"Summary of page {i}.", f"# Page {i}\n\nWord{i} text.")
         for i in range(12)]


def _age(root: Path, seconds: int = 600) -> None:
    """Every file and folder of the wiki as if written ``seconds`` ago (a wiki at rest), the
    index last, so its files are not newer than it."""
    past = time.time_ns() - seconds * 1_000_000_000
    wiki = root / "wiki"
    for folder, dirs, files in os.walk(wiki):
        for name in files:
            os.utime(Path(folder) / name, ns=(past, past))
    for folder, dirs, files in os.walk(wiki, topdown=False):
        os.utime(folder, ns=(past, past))
    os.utime(wiki / "master-index.md", ns=(past + 1_000_000, past + 1_000_000))


def _cold(root: Path) -> KnowledgeBase:
    """A new process's view: a new KnowledgeBase, nothing in memory."""
    return KnowledgeBase(root)


def _replace_by_rename(file: Path, text: str) -> None:
    """How most editors, git and kaas save a file: a new file renamed over the old one."""
    tmp = file.with_name("." + file.name + ".swp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, file)


@pytest.fixture
def rested_kb(tmp_path):
    build_kb(tmp_path, *PAGES, sample=False)
    _age(tmp_path)
    KnowledgeBase(tmp_path).catalog()  # a full load: writes the snapshot
    assert (tmp_path / ".kaas" / snapshot.SNAPSHOT_NAME).is_file()
    return tmp_path


def _no_parse(monkeypatch):
    def refuse(text):
        raise AssertionError("master-index.md parsed although its snapshot is current")
    monkeypatch.setattr(catalog_module, "parse_master_index", refuse)


def test_a_cold_load_uses_the_snapshot_and_stats_no_article(rested_kb, monkeypatch):
    expected = KnowledgeBase(rested_kb).catalog_store._load(KnowledgeBase(rested_kb).catalog_store._current_stamp())
    _no_parse(monkeypatch)
    stats: list[str] = []
    real_stat = os.stat

    def counting_stat(path, *args, **kwargs):
        if str(path).endswith(".md") and "master-index" not in str(path):
            stats.append(str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counting_stat)
    catalog = _cold(rested_kb).catalog()
    assert stats == []
    assert catalog.entries == expected.entries and catalog.stamps == expected.stamps
    assert catalog.identity == expected.identity
    assert catalog.line_chars == expected.line_chars and catalog.by_stem == expected.by_stem
    assert catalog.by_title == expected.by_title


def test_a_page_replaced_by_hand_is_seen_cold(rested_kb, monkeypatch):
    page = rested_kb / "wiki" / "topic1" / "page-4.md"
    _replace_by_rename(page, "---\ntitle: Renamed by hand\nsummary: Edited in an editor.\n---\n# Renamed\n\nQuibblefrost.\n")
    catalog = _cold(rested_kb).catalog()
    assert catalog.get("topic1/page-4.md").title == "Renamed by hand"
    assert catalog.get("topic1/page-4.md").summary == "Edited in an editor."
    # ...and the snapshot now holds it: the next cold process neither parses nor re-reads it
    _no_parse(monkeypatch)
    assert _cold(rested_kb).catalog().get("topic1/page-4.md").title == "Renamed by hand"


def test_a_hand_edit_restricting_a_page_hides_it_from_a_cold_question(rested_kb):
    page = rested_kb / "wiki" / "topic1" / "page-4.md"
    _replace_by_rename(page, "---\ntitle: Page 4\nsummary: Now secret.\naccess: [hr]\n---\n# Page 4\n\nWord4 text.\n")
    catalog = _cold(rested_kb).catalog()
    assert catalog.get("topic1/page-4.md").access == ("hr",)


def test_a_deleted_page_is_gone_cold(rested_kb):
    (rested_kb / "wiki" / "topic2" / "page-5.md").unlink()
    catalog = _cold(rested_kb).catalog()
    assert "topic2/page-5.md" not in catalog
    assert any("topic2/page-5.md" in w and "does not exist" in w for w in catalog.warnings)
    assert len(catalog) == len(PAGES) - 1


def test_a_deleted_page_that_comes_back_is_listed_again(rested_kb):
    page = rested_kb / "wiki" / "topic2" / "page-5.md"
    text = page.read_text(encoding="utf-8")
    page.unlink()
    assert "topic2/page-5.md" not in _cold(rested_kb).catalog()
    page.write_text(text, encoding="utf-8")
    assert "topic2/page-5.md" in _cold(rested_kb).catalog()


def test_a_new_page_indexed_is_seen_cold(rested_kb):
    write_page(rested_kb / "wiki", "topic0/new.md", "Brand new", "Added by hand.", "# New\n\nZanzibarite.", topic="topic0")
    KnowledgeBase(rested_kb).reindex()
    catalog = _cold(rested_kb).catalog()
    assert catalog.get("topic0/new.md").title == "Brand new"


def test_an_in_place_edit_of_the_page_a_cold_question_reads_is_answered_from(rested_kb):
    """The one change folder mtimes do not show (an edit in place): the page a question reads
    is read from disk, so the answer quotes what the page says now."""
    page = rested_kb / "wiki" / "topic1" / "page-4.md"
    with open(page, "r+", encoding="utf-8") as handle:  # truncate and write: the folder's mtime stays
        text = handle.read()
        handle.seek(0)
        handle.truncate()
        handle.write(text.replace("Word4 text.", "Word4 text. The quorble valve opens at dawn."))
    result = CliRunner().invoke(cli, ["ask", "--kb", str(rested_kb), "--json", "What does Word4 say about the quorble valve?"])
    assert result.exit_code == 0, result.output
    assert "quorble valve opens at dawn" in result.output


@pytest.mark.parametrize("damage", ["garbage", "global", "shape", "folder", "version", "other-index", "mentions",
                                    "unsealed", "seal-of-other-bytes", "cut-short"])
def test_a_damaged_or_foreign_snapshot_is_rebuilt(rested_kb, damage, caplog, monkeypatch):
    file = rested_kb / ".kaas" / snapshot.SNAPSHOT_NAME
    good = _cold(rested_kb).catalog()
    raw = pickle.loads(file.read_bytes())
    ran = rested_kb / "ran"
    if damage == "garbage":
        file.write_bytes(b"\x80\x05not a pickle at all")
    elif damage == "global":  # a pickle that would run a command when unpickled by pickle.load
        file.write_bytes(pickle.dumps(_Evil(str(ran))))
    elif damage == "shape":  # sealed as kaas seals it: the fields' checks still refuse it
        raw["entries"] = [("only", "three", "fields")]
        file.write_bytes(snapshot.snapshot_bytes(raw))
    elif damage == "folder":
        file.unlink()
        file.mkdir()
    elif damage == "version":
        raw["version"] = "0.0.0-other"
        raw["entries"] = raw["entries"][:1]
        raw["stamps"] = raw["stamps"][:1]
        file.write_bytes(pickle.dumps(raw))
    elif damage == "mentions":  # keys naming rows the snapshot does not have
        keys, rows, longest = raw["mentions"]
        raw["mentions"] = (keys, b"\xff\xff\xff\x7f" * len(keys), longest)
        file.write_bytes(snapshot.snapshot_bytes(raw))
    elif damage == "unsealed":  # the very pickle kaas wrote, its seal cut off
        file.write_bytes(pickle.dumps(raw))
    elif damage == "seal-of-other-bytes":  # a summary changed, the seal of the bytes before kept
        data = file.read_bytes()
        body, seal = _pickle_and_rest(data)
        path, title, summary, *rest = raw["entries"][0]
        raw["entries"][0] = (path, title, summary.replace("Summary", "Summery"), *rest)
        file.write_bytes(pickle.dumps(raw) + seal)
    elif damage == "cut-short":
        file.write_bytes(file.read_bytes()[:-10])
    elif damage == "other-index":
        raw["index_id"] = [1, 2, 3]
        raw["entries"] = raw["entries"][:1]
        raw["stamps"] = raw["stamps"][:1]
        file.write_bytes(pickle.dumps(raw))
    catalog = _cold(rested_kb).catalog()
    assert catalog.entries == good.entries
    assert not ran.exists()
    if damage not in ("version", "other-index"):
        assert "catalog snapshot" in caplog.text and "damaged" in caplog.text
    # rewritten: the next cold load uses it
    assert file.is_file()
    _no_parse(monkeypatch)
    assert _cold(rested_kb).catalog().entries == good.entries


def _pickle_and_rest(data: bytes) -> tuple[bytes, bytes]:
    """A snapshot file's pickle and what follows it (its seal; nothing in a kaas before seals)."""
    stream = io.BytesIO(data)
    pickle.Unpickler(stream).load()
    return data[:stream.tell()], data[stream.tell():]


@pytest.mark.parametrize("swap", [4, 1], ids=["access rules", "titles"])
def test_a_snapshot_with_two_entries_swapped_never_shows_a_reader_a_hidden_title(tmp_path, swap, caplog):
    """Two entries' access rules (or titles) exchanged in a well-formed snapshot, the seal kept:
    a cold process must not list the hidden page's title for a reader (under its own path or a
    public one). The snapshot is not what its seal names: rebuilt from master-index.md."""
    from starlette.testclient import TestClient

    from kb_ai.config import Settings
    from kb_ai.server.app import create_app
    from kb_ai.store.access import Reader

    from access_twins import BOB, USERS_TOML

    hidden = ("hr/secret.md", "Zanzibarite payroll bands", "Salary bands.", "# Bands\n\nSecret.", {"access": ["payroll"]})
    build_kb(tmp_path, *PAGES[:3], hidden, sample=False, toml=USERS_TOML)
    _age(tmp_path)
    KnowledgeBase(tmp_path).catalog()
    file = tmp_path / ".kaas" / snapshot.SNAPSHOT_NAME
    body, seal = _pickle_and_rest(file.read_bytes())
    raw = pickle.loads(body)
    rows = [list(row) for row in raw["entries"]]
    at, public = [[row[0] for row in rows].index(path) for path in ("hr/secret.md", "topic0/page-0.md")]
    rows[public][swap], rows[at][swap] = rows[at][swap], rows[public][swap]
    raw["entries"] = [tuple(row) for row in rows]
    file.write_bytes(pickle.dumps(raw) + seal)

    view = KnowledgeBase(tmp_path).catalog().visible_to(Reader("bob", frozenset({"eng"})))
    assert "hr/secret.md" not in view and all("Zanzibarite" not in e.title for e in view.entries)
    assert "catalog snapshot" in caplog.text and "damaged" in caplog.text
    file.write_bytes(pickle.dumps(raw) + seal)
    with TestClient(create_app(Settings(kb=tmp_path), mcp=False), headers={"Authorization": f"Bearer {BOB}"}) as bob:
        listing = bob.get("/api/index")
    assert listing.status_code == 200 and "Zanzibarite" not in listing.text and "hr/secret.md" not in listing.text


class _Evil:
    def __init__(self, target: str):
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


def test_a_read_only_state_folder_still_answers(rested_kb, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    (rested_kb / ".kaas" / snapshot.SNAPSHOT_NAME).unlink()
    monkeypatch.setattr(snapshot, "write_state_bytes", refuse)
    assert len(_cold(rested_kb).catalog()) == len(PAGES)


# -- title mentions (navigate/bridge.py) from the snapshot ---------------------------------------

MENTION_PAGES = PAGES + [
    ("films/kiss.md", "Kiss and Tell (1945 film)", "A film.", "# Kiss\n\nA comedy."),
    ("films/kiss-play.md", "Kiss and Tell", "A play.", "# Kiss\n\nA play."),
    ("places/nyc.md", "New York City", "A city.", "# NYC\n\nA city."),
    ("places/ny.md", "New York", "A state.", "# NY\n\nA state."),
    ("misc/the.md", "The", "Stop words only.", "# The\n\nNothing."),
    ("misc/long.md", "One two three four five six seven eight nine", "Too long.", "# Long\n\nLong."),
    ("misc/cafe.md", "Café Müller", "Accents.", "# Café\n\nA dance."),
]
MENTION_TEXT = ("Kiss and Tell was filmed in New York City; Page 3 and Page 11 mention New York, "
                "the Café Müller, The one two three four five six seven eight nine.")


def _fresh_mentions(catalog):
    """What a catalog's mentions are when computed from its titles (no snapshot)."""
    from kb_ai.navigate.bridge import TitleMentions
    from kb_ai.store.catalog import Catalog

    return TitleMentions(Catalog(list(catalog.entries), []))


@pytest.fixture
def mentions_kb(tmp_path):
    build_kb(tmp_path, *MENTION_PAGES, sample=False)
    _age(tmp_path)
    KnowledgeBase(tmp_path).catalog()  # a full load: writes the snapshot
    return tmp_path


def test_a_cold_load_finds_the_same_title_mentions_without_computing_every_titles_keys(mentions_kb, monkeypatch):
    from kb_ai.navigate.bridge import TitleMentions, mention_keys
    from kb_ai.store import mention_keys as keys_module

    computed: list[str] = []
    real = keys_module.title_key

    def counting(text):
        computed.append(text)
        return real(text)

    monkeypatch.setattr(keys_module, "title_key", counting)
    _no_parse(monkeypatch)
    catalog = _cold(mentions_kb).catalog()
    cold = TitleMentions.of(catalog)
    found = cold.find(MENTION_TEXT)
    monkeypatch.undo()
    # only the pages a lookup hits have their keys recomputed (to confirm the hit), not all 19
    hit_titles = {catalog.by_path[p].title for p in found}
    assert {t.removesuffix(" (1945 film)") for t in computed} <= hit_titles, computed
    fresh = _fresh_mentions(catalog)
    assert found == fresh.find(MENTION_TEXT)
    assert found[:2] == ["films/kiss-play.md", "films/kiss.md"] and "places/nyc.md" in found
    assert "misc/the.md" not in found and "misc/long.md" not in found and "misc/cafe.md" in found
    assert cold.longest == fresh.longest
    for entry in catalog.entries:  # every key of every page answers as a fresh build does
        for key in mention_keys(entry):
            assert cold.keys.paths(key) == fresh.keys.paths(key), key
    assert cold.keys.paths("nothing here") == []


def test_an_old_snapshot_without_mention_keys_is_rebuilt_quietly(mentions_kb, caplog):
    from kb_ai.navigate.bridge import TitleMentions

    file = mentions_kb / ".kaas" / snapshot.SNAPSHOT_NAME
    raw = pickle.loads(file.read_bytes())
    raw["format"] = 1  # what the kaas before the mention keys wrote
    del raw["mentions"]
    file.write_bytes(pickle.dumps(raw))
    catalog = _cold(mentions_kb).catalog()
    assert TitleMentions.of(catalog).find(MENTION_TEXT) == _fresh_mentions(catalog).find(MENTION_TEXT)
    assert "snapshot" not in caplog.text  # quietly: no warning
    rewritten = pickle.loads(file.read_bytes())
    assert rewritten["format"] == snapshot.SNAPSHOT_FORMAT and rewritten["mentions"] is not None


def test_a_stale_snapshot_does_not_give_the_old_titles(mentions_kb):
    from kb_ai.navigate.bridge import TitleMentions

    _cold(mentions_kb).catalog()
    page = mentions_kb / "wiki" / "places" / "nyc.md"
    _replace_by_rename(page, "---\ntitle: Gotham\nsummary: Renamed by hand.\n---\n# Gotham\n\nA city.\n")
    catalog = _cold(mentions_kb).catalog()  # the folder changed: the page re-read, the snapshot rewritten
    for cold in (catalog, _cold(mentions_kb).catalog()):  # ...and the next process uses the new one
        mentions = TitleMentions.of(cold)
        assert mentions.find("New York City and Gotham") == ["places/ny.md", "places/nyc.md"]
        assert mentions.find("Gotham") == ["places/nyc.md"]
    write_page(mentions_kb / "wiki", "places/paris.md", "Paris", "A city.", "# Paris\n\nA city.", topic="places")
    KnowledgeBase(mentions_kb).reindex()
    assert TitleMentions.of(_cold(mentions_kb).catalog()).find("Paris and Gotham") == ["places/paris.md", "places/nyc.md"]


def test_a_page_gone_since_the_snapshot_is_never_mentioned(mentions_kb):
    from kb_ai.navigate.bridge import TitleMentions

    (mentions_kb / "wiki" / "places" / "nyc.md").unlink()
    catalog = _cold(mentions_kb).catalog()
    assert TitleMentions.of(catalog).find("New York City") == ["places/ny.md"]
