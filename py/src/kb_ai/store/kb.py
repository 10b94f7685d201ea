"""A knowledge base on disk: ``raw/`` sources, ``wiki/`` articles and catalog, ``.kaas/`` state."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kb_ai.errors import EmptyCatalogError, NoWikiError
from kb_ai.faults import fault_point
from kb_ai.store.catalog import Catalog, CatalogStore, append_log, write_master_index
from kb_ai.store.reindex_record import build_catalog_reusing, save_record, topics_key
from kb_ai.files import atomic_write_text
from kb_ai.store.topics import build_topic_index, load_model_summaries, write_topics

KAAS_TOML_TEMPLATE = """\
# KaaS settings. Environment variables (KAAS_MODEL, ...) override these.
# With no model set, kaas runs in offline mode: lexical selection and extractive answers.

# model = "openai/gpt-4o-mini"         # any litellm model string
# api_base = "http://127.0.0.1:8080/v1" # for an OpenAI-compatible server
# compile_model = ""                    # optional separate model for `kaas compile`
# read_budget = 12000                   # tokens of article text an answer may read
# max_pages = 5                         # pages selected per question
"""


@dataclass
class IndexResult:
    articles: int
    topics: int
    written: bool
    warnings: list[str]


class KnowledgeBase:
    """Paths and the in-memory catalog of one KB folder."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self.raw_dir = self.root / "raw"
        self.wiki_dir = self.root / "wiki"
        self.state_dir = self.root / ".kaas"
        self.catalog_store = CatalogStore(self.wiki_dir, self.state_dir)

    @property
    def master_index(self) -> Path:
        return self.wiki_dir / "master-index.md"

    def require_wiki(self) -> None:
        if not self.wiki_dir.is_dir():
            raise NoWikiError(f"no wiki at {self.wiki_dir} (run `kaas init` or pass --kb DIR)")

    def catalog(self) -> Catalog:
        self.require_wiki()
        return self.catalog_store.get()

    def require_catalog(self) -> Catalog:
        catalog = self.catalog()
        if not catalog.entries:
            raise EmptyCatalogError(
                f"the catalog of {self.wiki_dir} is empty (add articles, then run `kaas index` or `kaas compile`)"
            )
        return catalog

    def reindex(self) -> IndexResult:
        """Regenerate master-index.md and topics.md from the articles and log the operation.
        Articles unchanged since the last re-index are not read again, and topics.md is not
        rebuilt when neither the catalog nor the model's topic summaries changed
        (``store/reindex_record.py``)."""
        fault_point("store.reindex.before")
        self.require_wiki()
        build = build_catalog_reusing(self.wiki_dir, self.state_dir)
        catalog = build.catalog()
        written = not build.unchanged and write_master_index(self.wiki_dir, catalog)
        if not written and build.parsed:
            # Unchanged text, but the articles were just read: mark the index as current, so
            # loading it does not re-read articles edited before now (see CatalogStore).
            os.utime(self.master_index)
        same = not written and not build.parsed and build.topics is not None
        if not (same and build.topics == topics_key(self.wiki_dir, self.state_dir)):
            topic_index = build_topic_index(catalog, load_model_summaries(self.state_dir))
            written = write_topics(self.wiki_dir, topic_index) or written
            same = False
        topics = len(catalog.topics)
        if written:  # an unchanged catalog is not an event worth a line (and keeps wiki/ clean in git)
            append_log(self.wiki_dir, "index", f"{len(catalog)} articles in {topics} topics")
        if not same:
            save_record(self.wiki_dir, self.state_dir, build, topics_key(self.wiki_dir, self.state_dir))
        self.catalog_store.invalidate()
        return IndexResult(len(catalog), topics, written, catalog.warnings)


def init_kb(root: Path) -> list[Path]:
    """Create a KB skeleton; never overwrites an existing file. Returns what was created."""
    root = Path(root)
    created: list[Path] = []
    for folder in (root / "raw", root / "wiki"):
        if not folder.exists():
            folder.mkdir(parents=True)
            created.append(folder)
    files = {
        root / "kaas.toml": KAAS_TOML_TEMPLATE,
        root / ".gitignore": ".kaas/\n",
    }
    for path, text in files.items():
        if not path.exists():
            atomic_write_text(path, text)
            created.append(path)
    kb = KnowledgeBase(root)
    if not kb.master_index.exists():
        kb.reindex()
        created.append(kb.master_index)
    return created
