"""The wikis of benchmarks/bench_abstention.py, built offline in one work folder (kept: a wiki
whose master index is there is not built again):

* ``demo``: examples/demo/raw compiled offline;
* ``ownwiki``: the repository's own ``wiki/`` (copied and indexed);
* ``realdocs``: ../shared/eval-data/realdocs-dev (uvicorn + flask docs) compiled offline (the
  ``uvicorn`` and ``flask`` question sets are asked on it);
* ``hp-del``: HotpotQA dev500 without the gold pages of questions 351-500 (bench_answers.py);
* ``node``: bench_own_wiki.py's Node.js API docs wiki;
* the outside corpora of bench_outside.py whose sources are on this machine.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import bench_answers
import bench_outside
import bench_own_wiki

from kb_ai.store.kb import KnowledgeBase

REPO = Path(__file__).resolve().parents[1]
OUTSIDE = ("outside", "second", "third", "fourth", "fifth", "small", "tiny", "team", "crew")


def build_ownwiki(root: Path) -> None:
    if not (root / "wiki" / "master-index.md").exists():
        shutil.copytree(REPO / "wiki", root / "wiki", dirs_exist_ok=True)
        KnowledgeBase(root).reindex()


def build_all(work: Path, log=print) -> dict[str, Path]:
    """Build every wiki that can be built here; their roots by name."""
    roots: dict[str, Path] = {}
    log("building demo ...")
    bench_outside.build(work / "demo", bench_outside.CORPORA["demo"])
    roots["demo"] = work / "demo"
    log("building ownwiki ...")
    build_ownwiki(work / "ownwiki")
    roots["ownwiki"] = work / "ownwiki"
    log("building realdocs and HotpotQA ...")
    bench_answers._build(work)  # hp-full, hp-del, realdocs
    roots["realdocs"], roots["hp-del"] = work / "realdocs", work / "hp-del"
    log("building node ...")
    bench_own_wiki.build(work / "node")
    roots["node"] = work / "node"
    for name in OUTSIDE:
        sources = bench_outside.CORPORA[name]
        if not any(path.is_dir() for path, _ in sources.values()):
            log(f"skipped {name}: its sources are not on this machine")
            continue
        log(f"building {name} ...")
        bench_outside.build(work / name, sources)
        roots[name] = work / name
    return roots
