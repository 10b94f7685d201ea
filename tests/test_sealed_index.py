"""A saved keyword index that is well formed but not the one kaas wrote is never ranked from.

``.kaas/lexical-index/`` is checked against its seal (``kb_ai/seals.py``: the SHA-256 of every
file, bound to the catalog fingerprint it was built for, written last). A reordered
``kaas-paths.txt`` or postings from another build would otherwise pass every shape check and
count a hidden page's words under a public page's path: a word only the hidden page holds would
rank the public page for a reader who may not read the hidden one. Whatever was done to the
files, a reader (offline ranking, ``kaas ask --user``, the server with a reader token) ranks as
from the index kaas built, one warning line says the index was damaged, and it is rebuilt.
"""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from kb_ai.cli import cli
from kb_ai.config import Settings
from kb_ai.offline.lexical import LexicalIndex, index_folder, save_keyword_index
from kb_ai.seals import SEAL_NAME
from kb_ai.server.app import create_app
from kb_ai.store.access import Reader
from kb_ai.store.kb import KnowledgeBase

from access_twins import BOB, USERS_TOML
from helpers import build_kb

HIDDEN_WORD = "zanzibarite"
PUBLIC, HIDDEN = "ops/public.md", "hr/secret.md"
BOB_READER = Reader("bob", frozenset({"eng"}))
PAGES = [
    (PUBLIC, "Harbour cranes", "How the harbour cranes are serviced.", "# Harbour cranes\n\nThe cranes are oiled weekly."),
    ("ops/other.md", "River locks", "How the river locks open.", "# River locks\n\nThe locks open at dawn."),
    (HIDDEN, "Payroll bands", "Salary bands.", f"# Payroll bands\n\nThe {HIDDEN_WORD} band is 91,000.",
     {"access": ["payroll"]}),
]


def _swap(values: list, a, b) -> list:
    i, j = values.index(a), values.index(b)
    values[i], values[j] = values[j], values[i]
    return values


def _reorder_paths(folder) -> None:
    """kaas-paths.txt with the public and the hidden page's lines exchanged: still every page once."""
    paths = (folder / "kaas-paths.txt").read_bytes().split(b"\0")
    (folder / "kaas-paths.txt").write_bytes(b"\0".join(_swap(paths, PUBLIC.encode(), HIDDEN.encode())))


def _postings_of_another_build(folder) -> None:
    """docs.npy as a build that put the two pages at each other's positions wrote it."""
    paths = (folder / "kaas-paths.txt").read_bytes().decode().split("\0")
    a, b = paths.index(PUBLIC), paths.index(HIDDEN)
    docs = np.load(folder / "docs.npy")
    np.save(folder / "docs.npy", np.where(docs == a, b, np.where(docs == b, a, docs)).astype(docs.dtype))


def _both_files_reordered(folder) -> None:
    """Paths and page keys reordered together (keys still match their paths): only a seal of
    the postings sees that the postings are not the ones written with them."""
    _reorder_paths(folder)
    keys = np.load(folder / "keys.npy")
    paths = (folder / "kaas-paths.txt").read_bytes().decode().split("\0")
    a, b = paths.index(PUBLIC), paths.index(HIDDEN)
    keys[[a, b]] = keys[[b, a]]
    np.save(folder / "keys.npy", keys)


def _truncated_vocab(folder) -> None:
    data = (folder / "kaas-vocab.txt").read_bytes()
    (folder / "kaas-vocab.txt").write_bytes(data[:data.rindex(b"\0")])


def _no_seal(folder) -> None:
    (folder / SEAL_NAME).unlink()


def _seal_of_another_build(folder, other) -> None:
    shutil.copy(other / SEAL_NAME, folder / SEAL_NAME)


TAMPERS = {"paths reordered": _reorder_paths, "postings of another build": _postings_of_another_build,
           "paths and keys reordered": _both_files_reordered, "vocabulary truncated": _truncated_vocab,
           "seal missing": _no_seal}


@pytest.fixture
def kb(tmp_path):
    kb = build_kb(tmp_path / "kb", *PAGES, sample=False, toml=USERS_TOML)
    save_keyword_index(kb)
    return kb


def _bob_ranks(kb, query: str = HIDDEN_WORD) -> list[str]:
    catalog = KnowledgeBase(kb.root).catalog()
    index = LexicalIndex.load_or_build(kb.wiki_dir, catalog, index_folder(kb.state_dir))
    return [hit.path for hit in index.as_view(catalog.visible_to(BOB_READER).by_path).search(query, 5)]


def _owner_ranks(kb, query: str) -> list[str]:
    catalog = KnowledgeBase(kb.root).catalog()
    index = LexicalIndex.load_or_build(kb.wiki_dir, catalog, index_folder(kb.state_dir))
    return [hit.path for hit in index.search(query, 5)]


@pytest.mark.parametrize("tamper", TAMPERS.values(), ids=TAMPERS.keys())
def test_a_tampered_index_is_rebuilt_and_never_ranks_a_public_page_for_a_hidden_word(kb, tamper, caplog):
    folder = index_folder(kb.state_dir)
    written = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert _bob_ranks(kb) == [] and _owner_ranks(kb, HIDDEN_WORD) == [HIDDEN]
    tamper(folder)
    with caplog.at_level(logging.WARNING, logger="kb_ai.offline.lexical"):
        assert _bob_ranks(kb) == []
    warnings = [r.getMessage() for r in caplog.records if "lexical index" in r.getMessage()]
    assert len(warnings) == 1 and "damaged" in warnings[0], warnings
    assert _owner_ranks(kb, HIDDEN_WORD) == [HIDDEN] and _owner_ranks(kb, "harbour cranes")[0] == PUBLIC
    rebuilt = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert rebuilt == written  # rebuilt as kaas wrote it (a full build is deterministic)


def test_a_seal_from_another_build_is_not_this_index_s_seal(kb, tmp_path, caplog):
    other = build_kb(tmp_path / "other", *PAGES[:2], sample=False)
    save_keyword_index(other)
    _reorder_paths(index_folder(kb.state_dir))
    _seal_of_another_build(index_folder(kb.state_dir), index_folder(other.state_dir))
    assert _bob_ranks(kb) == []
    assert "damaged" in caplog.text and "seal" in caplog.text


@pytest.mark.parametrize("tamper", [_reorder_paths, _postings_of_another_build], ids=["paths", "postings"])
def test_a_reader_asking_through_the_cli_or_the_server_never_gets_the_public_page_for_a_hidden_word(kb, tamper):
    question = f"What is the {HIDDEN_WORD} band?"

    def cli_pages() -> list[str]:
        out = CliRunner().invoke(cli, ["--kb", str(kb.root), "ask", question, "--user", "bob", "--json"])
        assert out.exit_code == 0, out.output
        return [page["path"] if isinstance(page, dict) else page for page in json.loads(out.stdout)["pages"]]

    def served() -> str:
        with TestClient(create_app(Settings(kb=kb.root), mcp=False), headers={"Authorization": f"Bearer {BOB}"}) as bob:
            return bob.post("/api/chat", json={"question": question}).text

    assert PUBLIC not in cli_pages() and PUBLIC not in served()  # as kaas wrote it
    tamper(index_folder(kb.state_dir))
    assert PUBLIC not in cli_pages()
    tamper(index_folder(kb.state_dir))
    events = served()
    assert "event: error" not in events and PUBLIC not in events and HIDDEN not in events
