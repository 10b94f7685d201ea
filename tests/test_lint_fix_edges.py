"""`kaas lint --fix` changes dead links and nothing else; lint reads source names as written
(red-team finding B15).

Links in code (fenced, indented, inline) are not links, so --fix must leave them. A dead
reference definition goes with its uses: removing only the definition line leaves "[ref][r1]"
as literal brackets. A backslash is a character of a POSIX file name, so a source
``raw/back\\slash.md`` that exists is not "missing"."""

from __future__ import annotations

import json

from click.testing import CliRunner

from kb_ai.cli import cli
from kb_ai.config import Settings
from kb_ai.quality.lint import run_lint
from kb_ai.store.kb import KnowledgeBase

from helpers import write_page

BODY = """# Links

A dead link: [Old page](old.md). A live one: [the pump](pump.md).
Inline code: `[keep](missing-in-code.md)` must stay.
Reference: [ref][r1] and [again][r1], live [pump ref][p1].

    indented code [keep](missing-indented.md)

```
fenced [keep](missing-fenced.md)
```

~~~python
tilde = "[keep](missing-tilde.md)"
~~~

[r1]: missing-ref.md
[p1]: pump.md
"""

FIXED = """# Links

A dead link: Old page. A live one: [the pump](pump.md).
Inline code: `[keep](missing-in-code.md)` must stay.
Reference: ref and again, live [pump ref][p1].

    indented code [keep](missing-indented.md)

```
fenced [keep](missing-fenced.md)
```

~~~python
tilde = "[keep](missing-tilde.md)"
~~~

[p1]: pump.md
"""


def _kb(tmp_path) -> KnowledgeBase:
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "notes.md").write_text("# Notes\n\nText.\n")
    write_page(tmp_path / "wiki", "valves/pump.md", "Pump", "A pump.", "# Pump\n\nSee [links](links.md).",
               topic="valves", sources=["raw/notes.md"])
    write_page(tmp_path / "wiki", "valves/links.md", "Links", "Links.", BODY, topic="valves", sources=["raw/notes.md"])
    kb = KnowledgeBase(tmp_path)
    kb.reindex()
    return kb


def test_fix_changes_dead_links_only_never_code_and_takes_reference_uses_with_their_definition(tmp_path):
    kb = _kb(tmp_path)
    article = kb.wiki_dir / "valves" / "links.md"
    before = article.read_text()
    found = run_lint(Settings(kb=kb.root))
    dead = sorted(f.message for f in found.findings if f.check == "broken-link")
    assert len(dead) == 2 and all("old.md" in m or "missing-ref.md" in m for m in dead), dead
    report = run_lint(Settings(kb=kb.root), fix=True)
    assert article.read_text() == before.replace(BODY, FIXED)
    assert report.fixed[0] == "wiki/valves/links.md: removed 2 dead links, kept the text"
    assert not [f for f in report.findings if f.check == "broken-link"]


def test_a_source_whose_name_holds_a_backslash_is_found(tmp_path):
    kb = _kb(tmp_path)
    (kb.root / "raw" / "names").mkdir()
    (kb.root / "raw" / "names" / "back\\slash.md").write_text("# B\n\nText.\n")
    write_page(kb.wiki_dir, "valves/odd.md", "Odd", "Odd.", "# Odd\n\n[Pump](pump.md)", topic="valves",
               sources=["raw/names/back\\slash.md", "raw\\notes.md", "raw/names/other\\missing.md"])
    kb.reindex()
    result = CliRunner().invoke(cli, ["--kb", str(kb.root), "lint", "--json"])
    sources = [f["message"] for f in json.loads(result.stdout)["findings"]
               if f["check"] == "broken-source" and f["path"] == "valves/odd.md"]
    assert len(sources) == 1 and "raw/names/other\\missing.md" in sources[0], sources  # really missing
    # raw/names/back\slash.md exists; raw\notes.md is raw/notes.md written with a Windows separator
