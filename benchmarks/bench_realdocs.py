"""Offline `kaas compile` on real third-party documentation: how good is the wiki it makes?

    .venv/bin/python benchmarks/bench_realdocs.py [CORPUS]
        (default: $KAAS_EVAL_DATA/realdocs-dev, else ../shared/eval-data/realdocs-dev)
    .venv/bin/python benchmarks/bench_realdocs.py --corpus DIR [--keep OUT] [-v]
        (any one folder of documents, compiled as one knowledge base; --keep leaves it in OUT)

Each project folder of CORPUS (uvicorn: MkDocs Markdown, flask: Sphinx reST) is compiled on its
own, then all of them together (each under raw/<project>/), offline, into a temp dir. For each
run it prints:

* articles, and lint errors / warnings by check;
* titles that are not the document's own: the article's title against the title this benchmark
  reads from the raw file itself (frontmatter `title:`, Markdown ATX/setext H1, reST document
  title, else the file name made readable), computed here independently of kaas;
* catalog summaries (and catalog lines) that contain markup: reST directives/roles, admonition
  markers, GitHub alerts, link syntax, code fences, HTML tags, NUL and control characters;
* broken links (lint's `broken-link` errors);
* articles that share a title (case and spacing aside);
* source files in no article's `sources:` (left alone, dropped);
* source markup left in article bodies outside code (reference links left as text, permalink
  marks in headings, HTML comments, reST directives and roles);
* Markdown/reST articles with under 60% of their single source's words (text lost).

One function per measure (``measure_*``), each taking a compiled ``Run`` and returning a dict
(``count`` and ``examples``); add one to ``MEASURES`` to extend the report.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bench_paths import EVAL_DATA_HOW, eval_data, require

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = eval_data("realdocs-dev")

# The projects' own licence files are not documents (SOURCE.md says so).
NOT_DOCUMENTS = {"LICENSE.txt", "LICENSE.md", "LICENSE", "SOURCE.md"}


@dataclass
class Run:
    """One compiled knowledge base: what the measures read."""

    name: str
    root: Path
    seconds: float
    articles: dict[str, dict]  # wiki path -> {"title", "summary", "sources", "body"}
    catalog_lines: list[str]
    findings: list  # lint Finding records
    sources: dict[str, Path] = field(default_factory=dict)  # raw/... -> file


# ---------------------------------------------------------------------------------------------
# the document's own title, read here from the raw file (independently of kaas)

_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+_:.<>])\1{2,}\s*$")


def readable_filename(path: str) -> str:
    """The file name made readable; an index.md / README.md is named after its folder."""
    stem = Path(path).stem
    if stem.lower() in ("index", "readme") and len(Path(path).parts) > 2:
        stem = Path(path).parts[-2]
    words = re.sub(r"[-_.]+", " ", stem).split()
    text = " ".join(words)
    return text[:1].upper() + text[1:] if text else "Untitled"


def _frontmatter_title(text: str) -> str | None:
    if not text.startswith("---\n"):
        return None
    end = text.find("\n---", 4)
    if end < 0:
        return None
    match = re.search(r"(?m)^title:\s*[\"']?(.+?)[\"']?\s*$", text[4:end])
    return match.group(1) if match else None


def _markdown_title(text: str) -> str | None:
    fence = False
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
            continue
        if fence:
            continue
        html_h1 = re.search(r"(?is)<h1\b[^>]*>(.*?)</h1>", line)
        if html_h1 and re.sub(r"<[^>]+>", "", html_h1.group(1)).strip():
            return re.sub(r"<[^>]+>", "", html_h1.group(1)).strip()
        match = re.match(r"#\s+(.+?)\s*#*\s*$", line)
        if match:
            return match.group(1)
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if line.strip() and re.fullmatch(r"=+\s*", following) and not line.startswith(("    ", "\t")):
            return line.strip()
    return None


def _rst_title(text: str) -> str | None:
    """The first section title of a reST file: a text line underlined (and maybe overlined)
    with one punctuation character, outside directives, comments and literal blocks."""
    lines = text.splitlines()
    in_block = False  # inside an indented directive/comment body
    for index, line in enumerate(lines[:-1]):
        if in_block:
            if line.strip() and not line[:1].isspace():
                in_block = False
            else:
                continue
        if line.startswith(".. ") or line.strip() == "..":
            in_block = True
            continue
        if not line.strip() or _UNDERLINE.match(line):
            continue
        under = lines[index + 1]
        if not line[:1].isspace() and _UNDERLINE.match(under) and len(under.rstrip()) >= len(line.rstrip()):
            return line.strip()
        if not re.match(r"^:[\w-]+:", line):
            return None  # text before the first section title: the document has no title of its own
    return None


def _html_title(text: str) -> str | None:
    """<title> without a trailing " | Site name" / " - Site name" part, else the first <h1>."""
    import html as html_lib

    match = re.search(r"(?is)<title[^>]*>(.*?)</title>", text)
    if match:
        title = html_lib.unescape(re.sub(r"<[^>]+>", "", match.group(1))).strip()
        title = re.split(r"\s+[|\u2013\u2014-]\s+", title)[0].strip()
        if title:
            return title
    match = re.search(r"(?is)<h1[^>]*>(.*?)</h1>", text)
    return html_lib.unescape(re.sub(r"<[^>]+>", "", match.group(1))).strip() if match else None


def own_title(file: Path, raw_path: str) -> tuple[str, str]:
    """(title, where it came from) for a raw file (``raw_path``: raw/...)."""
    text = file.read_text(encoding="utf-8", errors="replace")
    found = _frontmatter_title(text)
    if found:
        return found, "frontmatter"
    if file.suffix in (".html", ".htm"):
        found = _html_title(text)
        if found:
            return found, "html title"
        return readable_filename(raw_path), "file name"
    if file.suffix == ".rst":
        found = _rst_title(text)
        if found:
            return found, "rst title"
    else:
        found = _markdown_title(text)
        if found:
            return found, "h1"
    return readable_filename(raw_path), "file name"


def _title_norm(text: str) -> str:
    text = re.sub(r"[`*_]+", "", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return " ".join(text.split()).casefold()


# ---------------------------------------------------------------------------------------------
# markup that must not reach the catalog

MARKUP = {
    "rst directive": re.compile(r"(?:^|\s)\.\.\s+[\w:-]+::|(?:^|\s)\.\.\s+_[\w -]+:|^\.\.\s"),
    "rst role": re.compile(r":[\w:.-]+:`"),
    "rst field": re.compile(r"^:[\w-]+:(?:\s|$)"),
    "admonition": re.compile(r"(?:^|\s)(?:!!!|\?\?\?\+?)\s"),
    "github alert": re.compile(r"\[!(?:NOTE|TIP|IMPORTANT|WARNING|CAUTION)\]", re.I),
    "link syntax": re.compile(r"\]\(|\]\[|^\[[^\]]+\]:"),
    "code fence or backticks": re.compile(r"```|~~~|`"),
    "html tag": re.compile(r"</?[a-zA-Z][\w-]*(?:\s[^<>]*)?/?>"),
    "mkdocstrings": re.compile(r"(?:^|\s):::\s"),
    "control character": re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"),
    "bare urls": re.compile(r"^(?:\S*https?://\S+\s*)+$"),
}


def markup_in(text: str) -> list[str]:
    return [name for name, pattern in MARKUP.items() if pattern.search(text)]


# ---------------------------------------------------------------------------------------------
# measures: each takes a Run, returns {"count": int, "examples": [...], ...}


def measure_lint(run: Run) -> dict:
    by = Counter((f.severity, f.check) for f in run.findings)
    errors = {check: n for (severity, check), n in sorted(by.items()) if severity == "error"}
    warnings = {check: n for (severity, check), n in sorted(by.items()) if severity == "warning"}
    examples = [f"{f.severity} {f.check} {f.path}: {f.message}" for f in run.findings if f.severity == "error"][:5]
    return {"count": sum(errors.values()), "errors": errors, "warnings": warnings,
            "warning_count": sum(warnings.values()), "examples": examples}


def measure_titles(run: Run) -> dict:
    """Articles whose title is not their (first) source's own title."""
    wrong: list[str] = []
    for path, article in sorted(run.articles.items()):
        sources = [s for s in article["sources"] if s in run.sources]
        if not sources:
            continue
        expected, where = own_title(run.sources[sources[0]], sources[0])
        if _title_norm(article["title"]) != _title_norm(expected):
            wrong.append(f"{path}: {article['title']!r}, own title {expected!r} ({where})")
    return {"count": len(wrong), "examples": wrong}


def measure_summary_markup(run: Run) -> dict:
    """Summaries (frontmatter) and catalog lines that contain markup."""
    bad: list[str] = []
    kinds: Counter = Counter()
    for path, article in sorted(run.articles.items()):
        found = markup_in(article["summary"]) + [f"title: {k}" for k in markup_in(article["title"])]
        if found:
            kinds.update(found)
            bad.append(f"{path}: {found}: {article['summary'][:120]!r}")
    catalog = 0
    for line in run.catalog_lines:
        # a catalog line is "- [Title](path) — summary": only the title and summary are checked
        match = re.match(r"- \[(.*)\]\(([^)]*)\)(?: — (.*))?$", line)
        text = f"{match.group(1)} {match.group(3) or ''}" if match else line
        if markup_in(text):
            catalog += 1
    return {"count": len(bad), "catalog_lines": catalog, "kinds": dict(kinds), "examples": bad}


def measure_broken_links(run: Run) -> dict:
    broken = [f"{f.path}: {f.message}" for f in run.findings if f.check == "broken-link"]
    return {"count": len(broken), "examples": broken}


def measure_duplicate_titles(run: Run) -> dict:
    groups: dict[str, list[str]] = {}
    for path, article in sorted(run.articles.items()):
        groups.setdefault(" ".join(article["title"].split()).casefold(), []).append(path)
    dupes = [f"{key!r}: {paths}" for key, paths in groups.items() if len(paths) > 1]
    return {"count": sum(len(paths) - 1 for paths in groups.values()), "examples": dupes}


BODY_LEFTOVERS = {
    "reference link left as text": re.compile(r"\[[^\]\[,]+\]\[[^\],]*\]"),
    "permalink mark in heading": re.compile(r"^#{1,6} .*\S(?:#|¶)$"),
    "html comment": re.compile(r"<!--"),
    "rst directive": re.compile(r"^\s*\.\. [\w:-]+::"),
    "rst role": re.compile(r":[\w:.-]+:`"),
}


def measure_body_leftovers(run: Run) -> dict:
    """Source markup left in article bodies, outside code (fences and code spans): what a
    reader of the page would see as debris."""
    kinds: Counter = Counter()
    examples: list[str] = []
    for path, article in sorted(run.articles.items()):
        fence = False
        for line in article["body"].splitlines():
            if line.lstrip().startswith(("```", "~~~")):
                fence = not fence
                continue
            if fence:
                continue
            line = re.sub(r"`[^`]*`", lambda m: "x" if "[" in m.group() else m.group(), line)
            for kind, pattern in BODY_LEFTOVERS.items():
                if pattern.search(line):
                    kinds[kind] += 1
                    if len(examples) < 40:
                        examples.append(f"{path}: {kind}: {line[:120]!r}")
    return {"count": sum(kinds.values()), "kinds": dict(kinds), "examples": examples}


def measure_text_lost(run: Run) -> dict:
    """Markdown/reST articles from one source with fewer than 60% of its words (HTML comments
    not counted): text lost on the way (an unclosed construct swallowing the rest of a page)."""
    short: list[str] = []
    for path, article in sorted(run.articles.items()):
        sources = [s for s in article["sources"] if s in run.sources]
        if len(sources) != 1 or run.sources[sources[0]].suffix not in (".md", ".rst", ".markdown"):
            continue
        source = run.sources[sources[0]].read_text(encoding="utf-8", errors="replace")
        source_words = len(re.sub(r"(?s)<!--.*?-->", " ", source).split())  # comments are not text
        words = len(article["body"].split())
        if source_words >= 200 and words < 0.6 * source_words:
            short.append(f"{path}: {words} words of {source_words} in {sources[0]}")
    return {"count": len(short), "examples": short}


def measure_left_out(run: Run) -> dict:
    """Source files no article lists in its ``sources:`` (left alone, skipped, dropped)."""
    listed = {source for article in run.articles.values() for source in article["sources"]}
    missing = sorted(source for source in run.sources if source not in listed)
    return {"count": len(missing), "examples": missing}


MEASURES: dict[str, Callable[[Run], dict]] = {
    "lint errors": measure_lint,
    "titles not the document's own": measure_titles,
    "summaries with markup": measure_summary_markup,
    "broken links": measure_broken_links,
    "duplicate-title articles": measure_duplicate_titles,
    "sources in no article": measure_left_out,
    "markup left in bodies": measure_body_leftovers,
    "articles with text lost": measure_text_lost,
}


# ---------------------------------------------------------------------------------------------
# compiling


def _copy_project(src: Path, dest: Path) -> None:
    """Copy a project's documents (not its licence file) into ``dest``, a folder under raw/."""
    for file in sorted(src.rglob("*")):
        if not file.is_file() or file.name in NOT_DOCUMENTS:
            continue
        target = dest / file.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(file, target)


def compile_corpus(name: str, projects: list[Path], workdir: Path, nested: bool) -> Run:
    from kb_ai.compile.pipeline import run_compile
    from kb_ai.config import Settings
    from kb_ai.quality.lint import lint_kb
    from kb_ai.store.articles import split_frontmatter
    from kb_ai.store.kb import KnowledgeBase

    root = workdir / name
    raw = root / "raw"
    raw.mkdir(parents=True)
    (root / "wiki").mkdir()
    for project in projects:
        _copy_project(project, raw / project.name if nested else raw)
    sources = {f"raw/{p.relative_to(raw).as_posix()}": p for p in raw.rglob("*") if p.is_file()}
    start = time.perf_counter()
    run_compile(Settings(kb=root), progress=False)
    seconds = time.perf_counter() - start
    kb = KnowledgeBase(root)
    articles: dict[str, dict] = {}
    wiki = root / "wiki"
    for file in sorted(wiki.rglob("*.md")):
        rel = file.relative_to(wiki).as_posix()
        if rel in ("master-index.md", "log.md", "topics.md") or file.name == "index.md":
            continue
        meta, body = split_frontmatter(file.read_text(encoding="utf-8"), rel)
        srcs = meta.get("sources") or []
        articles[rel] = {"title": str(meta.get("title") or ""), "summary": str(meta.get("summary") or ""),
                         "sources": [str(s) for s in srcs] if isinstance(srcs, list) else [str(srcs)],
                         "body": body}
    index = wiki / "master-index.md"
    catalog = [line for line in index.read_text(encoding="utf-8").splitlines() if line.startswith("- [")] \
        if index.exists() else []
    findings = lint_kb(kb).findings
    return Run(name, root, seconds, articles, catalog, findings, sources)


def report(run: Run, verbose: bool) -> dict:
    results = {name: measure(run) for name, measure in MEASURES.items()}
    lint = results["lint errors"]
    print(f"\n== {run.name}: {len(run.articles)} articles from {len(run.sources)} files, "
          f"compiled in {run.seconds:.1f} s")
    print(f"  lint: {lint['count']} errors {lint['errors']}, {lint['warning_count']} warnings {lint['warnings']}")
    for name, result in results.items():
        if name == "lint errors":
            continue
        extra = {k: v for k, v in result.items() if k not in ("count", "examples")}
        print(f"  {name}: {result['count']}" + (f"  {extra}" if extra else ""))
    if verbose:
        for name, result in results.items():
            for example in result["examples"][:40]:
                print(f"    [{name}] {example}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--corpus", dest="folder", type=Path, default=None,
                        help="measure one folder of documents (any layout) as a single knowledge base "
                             "instead of a folder of projects")
    parser.add_argument("--keep", type=Path, default=None,
                        help="build the knowledge bases under this folder and keep them (to read by eye)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the examples of each measure")
    args = parser.parse_args()
    corpus = args.folder or args.corpus
    require(corpus, EVAL_DATA_HOW)
    projects = [corpus] if args.folder else sorted(p for p in corpus.iterdir() if p.is_dir())
    print(f"corpus {corpus} ({', '.join(p.name for p in projects)}); python {platform.python_version()}, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for project in projects:
            report(compile_corpus(project.name, [project], work, nested=False), args.verbose)
        if len(projects) > 1:
            report(compile_corpus("all", projects, work, nested=True), args.verbose)


if __name__ == "__main__":
    main()
