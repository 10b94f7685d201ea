"""Filing an answer back into the wiki as ``answers/<slug>.md`` with ``kind: answer``.

A saved answer is navigation, not evidence: it can be selected and linked, and reading it
leads to the articles it cites, but an answer may never cite it (see ``read.py`` and
``citations.py``). It is re-indexed at once so the next question can find it.
"""

from __future__ import annotations

import datetime as dt
import re
import secrets

from kb_ai.compile.lock import CompileLock
from kb_ai.errors import KaasError, StorageError
from kb_ai.navigate.records import AskResult
from kb_ai.store.access import ADMINS_ONLY, OWNER, Reader, derived_access
from kb_ai.store.articles import SUMMARY_LIMIT, write_article
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.markdown_text import clip
from kb_ai.store.paths import slugify

ANSWERS_TOPIC = "answers"
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _relative_links(answer: str, cited: set[str]) -> str:
    """Citations are catalog paths; inside wiki/answers/ the same page is ``../<path>``."""
    return _LINK.sub(lambda m: f"](../{m.group(1)})" if m.group(1) in cited else m.group(0), answer)


def save_answer(kb: KnowledgeBase, question: str, result: AskResult, today: dt.date | None = None,
                reader: Reader = OWNER) -> str:
    """Write ``result`` as a saved answer and re-index. Returns its catalog path.

    The saved page may be read only by those who may read every page it cites (``access`` is
    derived from theirs), so saving never widens who sees what. A reader who is not an admin
    gets a name with a random suffix: whether another answer already took the plain name
    (perhaps one they may not see) is not theirs to learn."""
    if result.error:
        raise KaasError(f"not saved: the answer failed ({result.error['message']})")
    if not result.citations:
        raise KaasError("not saved: the answer cites no page of the wiki, so it cannot lead anywhere")
    question = " ".join(question.split())
    today = today or dt.date.today()
    slug = slugify(question)[:60].rstrip("-") or "answer"
    cited = [c["path"] for c in result.citations]
    full = kb.catalog()
    rules = []
    for path in cited:
        entry = full.get(path)
        rules.append(entry.access if entry is not None else ADMINS_ONLY)  # unknown: fail closed
    access = derived_access(rules)
    meta = {
        "title": clip(question, 120),
        "summary": clip(f"Saved answer to the question: {question}", SUMMARY_LIMIT),
        "topic": ANSWERS_TOPIC,
        "kind": "answer",
        "question": question,
        "citations": cited,
        "mode": result.mode,
        "updated": today,
        **({"access": list(access)} if access is not None else {}),
    }
    body = "\n".join([
        f"# {clip(question, 120)}",
        "",
        f"> Saved answer ({result.mode} mode, {today.isoformat()}). Navigation only: the articles it cites are the evidence.",
        "",
        _relative_links(result.answer.strip(), set(cited)),
        "",
        "## Sources",
        "",
        *[f"- [{c['title']}](../{c['path']})" for c in result.citations],
    ])
    # The same lock as compile, hand edits and lint --fix: one writer of wiki/ at a time, so two
    # saves of the same question cannot pick the same free name.
    with CompileLock(kb.state_dir):
        if reader.admin:
            path, n = f"{ANSWERS_TOPIC}/{slug}.md", 2
            while (kb.wiki_dir / path).exists():
                path, n = f"{ANSWERS_TOPIC}/{slug}-{n}.md", n + 1
        else:
            path = f"{ANSWERS_TOPIC}/{slug}-{secrets.token_hex(4)}.md"
            while (kb.wiki_dir / path).exists():
                path = f"{ANSWERS_TOPIC}/{slug}-{secrets.token_hex(4)}.md"
        try:
            file = write_article(kb.wiki_dir, path, meta, body)
        except OSError as exc:
            raise StorageError(f"not saved: {StorageError.from_os_error(exc).message}") from None
        try:
            kb.reindex()
        except OSError as exc:
            # Not "saved" if the catalog cannot list it: take the page back out, keep wiki/ consistent.
            file.unlink(missing_ok=True)
            raise StorageError(f"not saved: {StorageError.from_os_error(exc).message}") from None
    return path
