"""Filing an answer back into the wiki as ``answers/<slug>.md`` with ``kind: answer``.

A saved answer is navigation, not evidence: it can be selected and linked, and reading it
leads to the articles it cites, but an answer may never cite it (see ``read.py`` and
``citations.py``). It is re-indexed at once so the next question can find it. Who may read
it follows the pages it was made from, now and later (``save_answer``).
"""

from __future__ import annotations

import datetime as dt
import secrets

from kb_ai.store.lock import CompileLock
from kb_ai.errors import KaasError, NotSavedError, StorageError
from kb_ai.navigate.records import AskResult
from kb_ai.store.access import OWNER, Reader, derived_access
from kb_ai.store.articles import SUMMARY_LIMIT, write_article
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.links import link_to, resolve_link
from kb_ai.store.markdown_text import find_links
from kb_ai.store.sentences import clip
from kb_ai.store.pages import load_page
from kb_ai.store.paths import slugify

ANSWERS_TOPIC = "answers"
_SAVED_FROM = f"{ANSWERS_TOPIC}/answer.md"  # where links in a saved answer are written from


def _relative_links(answer: str, cited: set[str]) -> str:
    """Citations are catalog paths (however the answer spelled them: ``store.links``, as
    ``citations.py`` read them); inside wiki/answers/ the same page is ``../<path>``."""
    out: list[str] = []
    position = 0
    for link in find_links(answer):
        target = resolve_link("", link.target)
        if link.kind == "reference" or target.page not in cited or link.start < position:
            continue
        relative = link_to(_SAVED_FROM, target.page) + (f"#{target.fragment}" if target.fragment else "")
        out.append(answer[position:link.text_end])
        if link.kind == "definition":
            newline = "\n" if answer[link.start:link.end].endswith("\n") else ""
            out.append(f"]: {relative}{newline}")
        else:
            out.append(f"]({relative})")
        position = link.end
    out.append(answer[position:])
    return "".join(out)


def save_answer(kb: KnowledgeBase, question: str, result: AskResult, today: dt.date | None = None,
                reader: Reader = OWNER) -> str:
    """Write ``result`` as a saved answer and re-index. Returns its catalog path.

    The saved page records the pages it was made from: every page read for it (``read``:
    whatever the model or the extractive answer saw, cited or not) and the pages it cites. Only
    those who may read every one of them, as they are at the time of reading, may read the
    saved answer (``Catalog.readable_by``, ``store.pages.load_page``): restricting one of them
    later hides the answer too, and one that is gone hides it from all but admins. ``access``
    is also written, derived from the pages' rules today, so saving never widens who sees what.
    ``reader`` (who saves) must be able to read each of those pages.

    A reader who is not an admin gets a name with a random suffix: whether another answer
    already took the plain name (perhaps one they may not see) is not theirs to learn."""
    if result.error:
        raise NotSavedError(f"not saved: the answer failed ({result.error['message']})")
    if not result.citations:
        raise NotSavedError("not saved: the answer cites no page of the wiki, so it cannot lead anywhere")
    question = " ".join(question.split())
    today = today or dt.date.today()
    slug = slugify(question)[:60].rstrip("-") or "answer"
    cited = list(dict.fromkeys(c["path"] for c in result.citations))
    read = list(dict.fromkeys(p["path"] for p in result.pages))
    rules = []
    for path in dict.fromkeys(read + cited):
        try:
            rules.append(load_page(kb, path, reader).article.access)
        except KaasError as exc:
            raise type(exc)(f"not saved: {exc.message}") from None
    access = derived_access(rules)
    meta = {
        "title": clip(question, 120),
        "summary": clip(f"Saved answer to the question: {question}", SUMMARY_LIMIT),
        "topic": ANSWERS_TOPIC,
        "kind": "answer",
        "question": question,
        "citations": cited,
        "read": read,
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
        *[f"- [{c['title']}]({link_to(_SAVED_FROM, c['path'])})" for c in result.citations],
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
