"""Dedup precision and recall on a labelled set of document pairs (issue 14).

    .venv/bin/python benchmarks/bench_dedup.py [--no-corpus] [--sample N]

A pair is compiled offline in a knowledge base of its own (``raw/`` holds its two files, nothing
else), and dedup's verdict is read from the compile report: "dropped" when one of the two is
reported as an exact or near copy of the other (a revision is merged, not dropped). Labels:

* **distinct** (must both be compiled):
  - the pairs of realdocs files found the same way (the BSD licences of flask and uvicorn);
  - every pair of HotpotQA paragraphs (``../shared/eval-data/hotpotqa-dev500/corpus.jsonl``) whose
    estimated similarity (dedup's own MinHash) is >= 0.5, i.e. that dedup merges or nearly
    merges. Their titles all differ (the corpus has no two paragraphs with one title); read,
    each is a paragraph of another Wikipedia article (a list of rulers and the kingdom, a
    filmography and the actress, two seasons of a team, two orchid species, two years of
    honours). ``LABELS`` records what was read per pair; a pair found that is not in it is
    printed as unlabelled and left out of the figures.
  - made pairs that are distinct by what they name: a paragraph and the same paragraph with its
    numbers and years changed (another season), or its names changed (another county list).
* **duplicate** (one of the two should be dropped), made from HotpotQA paragraphs and the
  realdocs files (``../shared/eval-data/realdocs-dev/``), ``--sample`` of each:
  - ``saved twice``: the same bytes under a second name (``x (copy).md``);
  - ``re-exported``: the same text re-wrapped, with spaces doubled and emphasis markup added;
  - ``header dropped``: a copy whose first line under the title (a "Last updated" line the
    original has) was left out by the export;
  - ``header added``: a copy with one more header line naming a date ("Exported 2026-11-30"): by
    issue 14's rule (a copy may not name what its original does not) this one is *kept*, and is
    counted as a miss of recall here.

Also, with the corpus (default), the whole HotpotQA corpus is compiled once offline (one file per
paragraph) and the paragraphs dropped as copies are counted: every one of them is a distinct
document (no two share a title).

Run it against main's code for the "before" figures:
``PYTHONPATH=../main/py/src .venv/bin/python benchmarks/bench_dedup.py``.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench_paths import eval_data
from kb_ai.compile.dedup import NUM_PERM, fingerprint
from kb_ai.compile.pipeline import run_compile
from kb_ai.config import load_settings

REPO = Path(__file__).resolve().parents[1]
SHARED = eval_data()
HOTPOT = SHARED / "hotpotqa-dev500" / "corpus.jsonl"
REALDOCS = SHARED / "realdocs-dev"
NEAR_SCAN = 0.5

# Pairs found by the scan, read and labelled (both titles, then what they are).
LABELS = {
    ("Kingdom of the Isles", "List of rulers of the Kingdom of the Isles"): "distinct: the kingdom; the list of its rulers",
    ("Tara Strong", "Tara Strong filmography"): "distinct: the actress; her filmography (same lead paragraph)",
    ("Motion City Soundtrack", "Motion City Soundtrack discography"): "distinct: the band; its discography",
    ("List of Unbreakable Kimmy Schmidt episodes", "Unbreakable Kimmy Schmidt"): "distinct: the series; its episode list",
    ("2044 election", "United States presidential election, 2020"): "distinct: two elections",
    ("2014 Colorado Buffaloes football team", "2015 Colorado Buffaloes football team"): "distinct: two seasons",
    ("Teen Titans (season 1)", "Teen Titans (season 4)"): "distinct: two seasons",
    ("2013 Birthday Honours", "2014 Birthday Honours"): "distinct: two years",
    ("2010 Ms. Olympia", "2011 Ms. Olympia"): "distinct: two contests",
    ("2013 Texas Tech Red Raiders football team", "2016 Texas Tech Red Raiders football team"): "distinct: two seasons",
    ("2011 Ms. Olympia", "2012 Ms. Olympia"): "distinct: two contests",
    ("2014 Birthday Honours", "2016 Birthday Honours"): "distinct: two years",
    ("Seven Days Confederate order of battle", "Seven Days Union order of battle"): "distinct: two armies",
    ("2015 Texas Tech Red Raiders football team", "2016 Texas Tech Red Raiders football team"): "distinct: two seasons",
    ("Pterostylis barringtonensis", "Pterostylis chocolatina"): "distinct: two orchid species",
    ("2014 Texas Tech Red Raiders football team", "2016 Texas Tech Red Raiders football team"): "distinct: two seasons",
    ("Pterostylis barringtonensis", "Pterostylis lineata"): "distinct: two orchid species",
    ("2013 Texas Tech Red Raiders football team", "2014 Texas Tech Red Raiders football team"): "distinct: two seasons",
    ("2014 Birthday Honours", "2015 Birthday Honours"): "distinct: two years",
    ("1997 Kansas City Wizards season", "1998 Kansas City Wizards season"): "distinct: two seasons",
    ("2015 Birthday Honours", "2016 Birthday Honours"): "distinct: two years",
    ("1987 Georgia Tech Yellow Jackets football team", "1988 Georgia Tech Yellow Jackets football team"): "distinct: two seasons",
    ("2013 Birthday Honours", "2015 Birthday Honours"): "distinct: two years",
    ("Cinizasaurus", "Comanchesaurus"): "distinct: two genera",
    ("2016 Birthday Honours", "2017 Birthday Honours"): "distinct: two years",
    ("Comanchesaurus", "Cryptoraptor"): "distinct: two genera",
    ("2013 Birthday Honours", "2016 Birthday Honours"): "distinct: two years",
    ("Pterostylis chocolatina", "Pterostylis lineata"): "distinct: two orchid species",
    ("Pterostylis barringtonensis", "Pterostylis crassa"): "distinct: two orchid species",
    ("Battle of Cross Keys", "Battle of Port Republic"): "distinct: two battles",
    # realdocs-dev (file paths): found by the same scan over its files
    ("flask/LICENSE.txt", "uvicorn/LICENSE.md"): "distinct: the BSD-3 licence of two projects, other holders",
    ("flask/deploying/apache-httpd.rst", "flask/deploying/nginx.rst"): "distinct: deploying behind two servers",
}


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "doc"


def dropped(files: dict[str, str]) -> bool:
    """Compile ``files`` (raw/ name -> text) offline in a fresh KB: did dedup drop one?"""
    with tempfile.TemporaryDirectory(prefix="kaas-dedup-") as tmp:
        root = Path(tmp)
        for name, text in files.items():
            (root / "raw" / name).parent.mkdir(parents=True, exist_ok=True)
            (root / "raw" / name).write_text(text, encoding="utf-8")
        report = run_compile(load_settings(root, env={}), progress=False)
        return any(d.get("kind") in ("exact", "near") for d in report.duplicates)


def hotpot_records() -> list[tuple[str, str]]:
    return [(" ".join(html.unescape(r["title"]).split()), r["text"].strip())
            for r in map(json.loads, HOTPOT.read_text(encoding="utf-8").splitlines())]


def as_markdown(title: str, text: str) -> str:
    return f"# {title}\n\n{text}\n"


def near_pairs(records: list[tuple[str, str]], markdown: bool = True) -> list[tuple[float, int, int]]:
    """Pairs of (title, text) at least ``NEAR_SCAN`` similar by dedup's own MinHash."""
    fps = [fingerprint(as_markdown(t, x) if markdown else x) for t, x in records]
    idx = [i for i, fp in enumerate(fps) if fp.minhash]
    sig = np.stack([np.frombuffer(fps[i].minhash, dtype=np.uint32) for i in idx])
    found = []
    for a in range(len(idx)):
        same = (sig[a + 1:] == sig[a]).sum(axis=1) / NUM_PERM
        for b in np.nonzero(same >= NEAR_SCAN)[0]:
            found.append((float(same[b]), idx[a], idx[a + 1 + b]))
    return sorted(found, reverse=True)


def reexport(text: str) -> str:
    """The same words, re-wrapped at 60 columns, spaces doubled after sentences, some emphasis."""
    out = []
    for block in text.split("\n\n"):
        if block.lstrip().startswith(("#", "```", "    ", "..", "-", "*", ">", "|")):
            out.append(block)
            continue
        flat = " ".join(block.split()).replace(". ", ".  ")
        lines, line = [], ""
        for word in flat.split(" "):
            if line and len(line) + len(word) > 60:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
        out.append("\n".join(lines))
    body = "\n\n".join(out)
    return re.sub(r"\b(important|default|must|only)\b", r"*\1*", body, count=3)


def with_header(text: str, header: str) -> str:
    """``text`` with ``header`` as the first paragraph under its title (a Markdown ``#`` line, or
    a reST title with its underline, and overline)."""
    lines = text.split("\n")
    at = 0
    while at < len(lines) and not lines[at].strip():
        at += 1
    at += 1
    while at < len(lines) and lines[at].strip() and set(lines[at].strip()) <= set("=-~^*#\"'`+:."):
        at += 1  # the underline (and the title line after an overline)
        if at < len(lines) and lines[at].strip() and not set(lines[at].strip()) <= set("=-~^*#\"'`+:."):
            at += 1
    return "\n".join(lines[:at] + ["", header, ""] + lines[at:])


def made_pairs(records: list[tuple[str, str]], sample: int) -> list[tuple[str, str, dict[str, str], bool]]:
    """(group, name, files, is duplicate) for the made pairs."""
    docs: list[tuple[str, str]] = []  # (name, markdown text)
    long_ones = [(t, x) for t, x in records if len(x.split()) >= 60]
    step = max(1, len(long_ones) // sample)
    docs += [(f"{slug(t)}.md", as_markdown(t, x)) for t, x in long_ones[::step][:sample]]
    if REALDOCS.is_dir():
        real = sorted(p for p in REALDOCS.rglob("*") if p.is_file() and p.suffix in (".md", ".rst"))
        real = [p for p in real if len(p.read_text(encoding="utf-8", errors="replace").split()) >= 80]
        step = max(1, len(real) // sample)
        for p in real[::step][:sample]:
            docs.append((p.relative_to(REALDOCS).as_posix(), p.read_text(encoding="utf-8", errors="replace")))
    pairs = []
    for name, text in docs:
        stem, dot, ext = name.rpartition(".")
        copy = f"{stem} (copy).{ext}"
        pairs.append(("duplicate", f"saved twice: {name}", {name: text, copy: text}, True))
        pairs.append(("duplicate", f"re-exported: {name}", {name: text, copy: reexport(text)}, True))
        original = with_header(text, "Last updated: 2026-03-01")
        pairs.append(("duplicate", f"header dropped: {name}", {name: original, copy: text}, True))
        pairs.append(("duplicate", f"header added: {name}", {name: text, copy: with_header(text, "Exported 2026-11-30")}, True))
    # distinct by what they name: another season (numbers), another list (names)
    for title, text in long_ones[::step][:sample]:
        years = re.sub(r"\b(1[89]\d\d|20\d\d)\b", lambda m: str(int(m.group(1)) + 1), text)
        numbers = re.sub(r"\b\d+\b", lambda m: str(int(m.group(0)) + 3), years)
        if numbers != text:
            pairs.append(("distinct", f"other numbers: {title}",
                          {f"{slug(title)}.md": as_markdown(title, text),
                           f"{slug(title)}-other.md": as_markdown(title, numbers)}, False))
        names = re.findall(r"(?<=[a-z,;] )[A-Z][a-z]{3,}", text)
        if names:
            swapped = text
            for i, name in enumerate(sorted(set(names))[:3]):
                swapped = re.sub(rf"\b{name}\b", ["Kent", "Sussex", "Surrey"][i], swapped)
            pairs.append(("distinct", f"other names: {title}",
                          {f"{slug(title)}.md": as_markdown(title, text),
                           f"{slug(title)}-other.md": as_markdown(title, swapped)}, False))
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-corpus", action="store_true", help="skip compiling the whole HotpotQA corpus")
    parser.add_argument("--sample", type=int, default=15, help="documents per source for the made pairs")
    args = parser.parse_args()
    if not HOTPOT.is_file():
        sys.exit(f"no {HOTPOT}")
    import kb_ai

    print(f"# code: {Path(kb_ai.__file__).parent}; machine: {platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}; load {os.getloadavg()[0]:.1f}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    records = hotpot_records()
    started = time.monotonic()
    labelled: list[tuple[str, str, dict[str, str], bool]] = []
    for value, i, j in near_pairs(records):
        (ti, xi), (tj, xj) = records[i], records[j]
        key = tuple(sorted((ti, tj)))
        if key not in LABELS:
            print(f"unlabelled pair (similarity {value:.3f}): {ti!r} / {tj!r}")
            continue
        labelled.append(("distinct", f"hotpotqa {value:.2f}: {ti} / {tj}",
                         {f"{slug(ti)}.md": as_markdown(ti, xi), f"{slug(tj)}.md": as_markdown(tj, xj)}, False))
    if REALDOCS.is_dir():
        real = sorted(p for p in REALDOCS.rglob("*") if p.is_file())
        texts = [(p.relative_to(REALDOCS).as_posix(), p.read_text(encoding="utf-8", errors="replace")) for p in real]
        for value, i, j in near_pairs(texts, markdown=False):
            (ni, xi), (nj, xj) = texts[i], texts[j]
            if tuple(sorted((ni, nj))) not in LABELS:
                print(f"unlabelled pair (similarity {value:.3f}): {ni!r} / {nj!r}")
                continue
            labelled.append(("distinct", f"realdocs {value:.2f}: {ni} / {nj}", {ni: xi, nj: xj}, False))
    labelled += made_pairs(records, args.sample)
    groups: dict[str, list[int]] = {}  # group -> [pairs, dropped]
    tp = fp = fn = 0
    for group, name, files, duplicate in labelled:
        verdict = dropped(files)
        kind = name.split(":")[0] if group == "duplicate" else group + " " + name.split(":")[0].split(" ")[0]
        kind = kind.replace("distinct hotpotqa", "distinct: HotpotQA pairs >= 0.5 similar").replace(
            "distinct realdocs", "distinct: realdocs pairs >= 0.5 similar").replace(
            "distinct other", "distinct: made (other numbers / other names)")
        g = groups.setdefault(kind, [0, 0])
        g[0] += 1
        g[1] += int(verdict)
        if verdict and duplicate:
            tp += 1
        elif verdict:
            fp += 1
            print(f"DISTINCT DROPPED: {name}")
        elif duplicate:
            fn += 1
            if not name.startswith("header added"):
                print(f"duplicate kept: {name}")
    print()
    print("| pairs | labelled | dropped by dedup |")
    print("| --- | ---: | ---: |")
    for kind, (n, d) in groups.items():
        print(f"| {kind} | {n} | {d} |")
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    recall_no_added = None
    added = groups.get("header added", [0, 0])
    if tp + fn - added[0]:
        recall_no_added = (tp - added[1]) / (tp + fn - added[0])
    print()
    print(f"pairs: {len(labelled)} ({sum(1 for p in labelled if p[3])} duplicate, "
          f"{sum(1 for p in labelled if not p[3])} distinct); dropped correctly {tp}, distinct dropped {fp}, "
          f"duplicates kept {fn}")
    print(f"precision {precision:.3f}  recall {recall:.3f}" +
          (f"  (recall without 'header added': {recall_no_added:.3f})" if recall_no_added is not None else "") +
          f"  [{time.monotonic() - started:.0f} s]")
    if not args.no_corpus:
        with tempfile.TemporaryDirectory(prefix="kaas-dedup-corpus-") as tmp:
            root = Path(tmp)
            (root / "raw").mkdir()
            used: set[str] = set()
            for title, text in records:
                name, n = slug(title), 2
                while name in used:
                    name, n = f"{slug(title)}-{n}", n + 1
                used.add(name)
                (root / "raw" / f"{name}.md").write_text(as_markdown(title, text), encoding="utf-8")
            started = time.monotonic()
            report = run_compile(load_settings(root, env={}), progress=False)
            gone = [d for d in report.duplicates if d.get("kind") in ("exact", "near")]
            print(f"\nwhole HotpotQA corpus ({len(records):,} paragraphs, every title distinct), offline compile "
                  f"{time.monotonic() - started:.0f} s: {len(gone)} paragraphs dropped as copies")
            for d in gone:
                print(f"  {d['path']} -> {d['of']} ({d['kind']}, {d.get('similarity')})")


if __name__ == "__main__":
    main()
