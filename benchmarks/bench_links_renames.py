"""Links and renames on real documentation (issue 14, items 1 and 4), offline.

    .venv/bin/python benchmarks/bench_links_renames.py [--data DIR] [--renames N]

Copies each project folder of ../shared/eval-data/realdocs-dev (uvicorn MkDocs, flask Sphinx) into
the raw/ of a fresh knowledge base in a temp folder, compiles offline, and prints:

* lint errors, broken-link errors, and the "unlinked" infos (source links to nothing compiled);
* links between sources that lead to the right article: every Markdown link of a source to
  another source file that exists (``[text](path.md)``, read with the plain path rules, not with
  kaas's resolver), checked in the article compiled from the linking source: is there a link with
  that text, and does it resolve to the article the manifest says the target source became?
* then renames N sources (``x.md`` -> ``renamed-x.md``), moves N others to another folder
  (``moved/<folder>-x.md``) with one line changed, compiles again and counts: articles before/after, articles created, orphaned
  articles, ``-2`` files, broken-link errors.

Run it against any checkout: ``PYTHONPATH=../main/py/src`` measures main.
"""

from __future__ import annotations

import argparse
import json
import posixpath
import re
import shutil
import sys
import tempfile
from pathlib import Path

from bench_paths import eval_data
from kb_ai.compile.pipeline import run_compile
from kb_ai.config import Settings
from kb_ai.quality.lint import lint_kb
from kb_ai.store.articles import load_article
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.links import resolve_link
from kb_ai.store.markdown_text import find_links

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = eval_data("realdocs-dev")
SKIP = {"wiki/master-index.md", "wiki/log.md", "wiki/topics.md"}


def articles(root: Path) -> list[str]:
    wiki = root / "wiki"
    return sorted(p.relative_to(wiki).as_posix() for p in wiki.rglob("*.md")
                  if f"wiki/{p.relative_to(wiki).as_posix()}" not in SKIP)


def manifest(root: Path) -> dict:
    return json.loads((root / ".kaas" / "manifest.json").read_text())["sources"]


def lint_counts(root: Path) -> dict[str, int]:
    findings = lint_kb(KnowledgeBase(root)).findings
    return {"errors": sum(f.severity == "error" for f in findings),
            "broken_links": sum(f.check == "broken-link" for f in findings),
            "unlinked_infos": sum(f.check == "unlinked" for f in findings)}


def right_links(root: Path) -> tuple[int, int]:
    """(links that lead to the article of their target source, links between existing sources)."""
    sources = manifest(root)
    wiki = root / "wiki"
    good = total = 0
    for source, record in sorted(sources.items()):
        if not source.endswith(".md") or not record.get("articles"):
            continue
        text = (root / source).read_text(errors="replace")
        page = record["articles"][0]
        body = load_article(wiki, page).body
        compiled = {link.text: link.target for link in find_links(body)}
        for link in find_links(text):
            path = link.target.split("#", 1)[0]
            if not path or re.match(r"[a-z]+:", path) or path.startswith("/"):
                continue
            target = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
            if target not in sources or not sources[target].get("articles"):
                continue
            total += 1
            written = compiled.get(link.text)
            if written is None:
                continue
            resolved = resolve_link(page, written, lambda rel: (wiki / rel).is_file()).page
            good += resolved == sources[target]["articles"][0]
    return good, total


def one_project(folder: Path, renames: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(folder, root / "raw" / folder.name)
        for file in (root / "raw").rglob("*"):
            file.chmod(0o755 if file.is_dir() else 0o644)
        run_compile(Settings(kb=root), progress=False)
        result = {"project": folder.name, "articles": len(articles(root)), **lint_counts(root)}
        result["right_links"], result["source_links"] = right_links(root)
        before = set(articles(root))
        docs = sorted(p for p in (root / "raw").rglob("*") if p.suffix in (".md", ".rst"))
        for file in docs[:renames]:
            file.rename(file.with_name(f"renamed-{file.name}"))
        moved = root / "raw" / folder.name / "moved"
        moved.mkdir()
        for file in docs[renames:2 * renames]:
            lines = file.read_text().splitlines()
            lines[-1] = lines[-1] + " (revised)"
            (moved / f"{file.parent.name}-{file.name}").write_text("\n".join(lines) + "\n")
            file.unlink()
        report = run_compile(Settings(kb=root), progress=False)
        after = set(articles(root))
        result["after_renames"] = {
            "articles": len(after), "created": len(report.created), "orphaned": len(report.orphaned),
            "new_-2_files": len([p for p in after - before if re.search(r"-\d+\.md$", p)]),
            "lost": len(before - after), **lint_counts(root)}
        return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--renames", type=int, default=5)
    args = parser.parse_args()
    if args.data is None or not args.data.is_dir():
        print("no realdocs-dev folder (pass --data DIR)", file=sys.stderr)
        return 2
    for folder in sorted(p for p in args.data.iterdir() if p.is_dir()):
        print(json.dumps(one_project(folder, args.renames)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
