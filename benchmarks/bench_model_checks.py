"""Model-path compile checks (issue 27): did every source's content reach an article?

    python benchmarks/bench_model_checks.py KB [REPORT.json]

Reads a compiled knowledge base (``.kaas/manifest.json``: which articles each source fed) and,
for every source, looks for its informative content (``compile.content_check.facts_of``: numbers,
dates, names, code identifiers, key terms) in those articles. A source *reached* the wiki when its
articles hold all but ``allowed_missing`` of its facts; it was *lost silently* when they do not and
no warning, held or failed line of the compile report (``kaas compile --json`` saved as
REPORT.json) names it. Prints one
JSON line: sources, reached, lost (with the report naming them), lost silently, and the report's
calls and seconds when given.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kb_ai.compile.content_check import allowed_missing, corpus_frequencies, facts_of, missing_facts


def main(kb: Path, report_file: Path | None) -> dict:
    manifest = json.loads((kb / ".kaas" / "manifest.json").read_text())
    report = json.loads(report_file.read_text()) if report_file and report_file.stat().st_size else {}
    # A loss is reported when a warning, a held or a failed line names the source (a line about
    # its plan, such as a refused update, does not say its content is missing).
    said = json.dumps([report.get("warnings"), report.get("held"), report.get("failed")])
    texts = {}
    for path, record in manifest["sources"].items():
        if record.get("status") in ("compiled", "planned", "failed"):
            texts[path] = _text(kb, path)
    frequency = corpus_frequencies(list(texts.values()))
    reached, lost, silent = [], [], []
    for path, text in sorted(texts.items()):
        record = manifest["sources"][path]
        bodies = "\n".join((kb / "wiki" / a).read_text() for a in record.get("articles") or []
                           if (kb / "wiki" / a).is_file()) if record.get("status") == "compiled" else ""
        facts = facts_of(text, frequency, len(texts))
        missing = missing_facts(facts, bodies)
        if len(missing) <= allowed_missing(facts):
            reached.append(path)
        elif path in said:
            lost.append(path)
        else:
            silent.append({"source": path, "missing": missing[:6], "of": len(facts)})
    usage = report.get("usage") or {}
    return {"sources": len(texts), "reached": len(reached), "lost_reported": len(lost),
            "lost_silently": len(silent), "silent": silent, "llm_calls": usage.get("llm_calls"),
            "failed_calls": usage.get("failed_calls"), "seconds": report.get("seconds")}


def _text(kb: Path, path: str) -> str:
    """The source's text as kaas reads it (``compile.readers.parse_document``); an archive's
    member is read from the archive."""
    from kb_ai.compile.readers import parse_document  # noqa: PLC0415

    file = kb / path
    if file.is_file():
        return parse_document(path, file.read_bytes()).text
    for parent in file.parents:  # raw/x.zip/member
        if parent.is_file():
            import zipfile  # noqa: PLC0415

            member = file.relative_to(parent).as_posix()
            with zipfile.ZipFile(parent) as archive:
                return parse_document(path, archive.read(member)).text
    return ""


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kb", type=Path, help="a compiled knowledge base")
    parser.add_argument("report", type=Path, nargs="?", default=None, help="its `kaas compile --json` report")
    args = parser.parse_args()
    print(json.dumps(main(args.kb, args.report)))
