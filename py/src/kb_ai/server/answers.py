"""``POST /api/answers``: file an answer from the chat into ``wiki/answers/`` (navigation only).

The browser sends the question, the answer text, the paths it cited and the paths of every
page read for it (``pages``: this answer's and those of the earlier answers in the history the
question was asked with). A saved answer is a navigation page, never evidence, and anyone who
may use this endpoint may also edit pages, so the text is taken as given; what is checked is
that every path is a page this reader may read (``store.pages.load_page``: a hidden page is
"no page", exactly like a missing one) and that citations are articles, not other saved
answers. Who may read the saved page then follows all of those pages (``navigate/save.py``).
"""

from __future__ import annotations

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kb_ai.errors import BadRequestError, KaasError, UnsafePathError
from kb_ai.navigate.ask import MAX_QUESTION_CHARS
from kb_ai.navigate.records import AskResult
from kb_ai.navigate.save import save_answer
from kb_ai.server.chat import read_json
from kb_ai.server.guard import reader_of
from kb_ai.server.pages import error_response
from kb_ai.store.access import Reader
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.pages import load_page

MAX_ANSWER_BODY_BYTES = 512_000
MAX_CITATIONS = 50
MAX_PAGES = 500  # this answer's pages and those behind the history it was asked with


def _pages(payload: dict, name: str, limit: int, kb: KnowledgeBase, reader: Reader, *,
           articles_only: bool) -> list[dict[str, str]]:
    raw_items = payload.get(name) or []
    if not isinstance(raw_items, list) or len(raw_items) > limit:
        raise BadRequestError(f"'{name}' must be a list of at most {limit} page paths")
    catalog = kb.catalog().visible_to(reader)
    refs: dict[str, dict[str, str]] = {}
    for item in raw_items:
        raw = item.get("path") if isinstance(item, dict) else item
        try:
            page = load_page(kb, raw if isinstance(raw, str) else "", reader)
        except UnsafePathError as exc:
            raise BadRequestError(f"not a page path: {raw!r} ({exc.message})") from None
        if articles_only and page.article.kind == "answer":
            raise BadRequestError(f"{page.path} is a saved answer: answers may cite articles only")
        entry = catalog.get(page.path)
        refs[page.path] = {"path": page.path, "title": entry.title if entry else page.article.title}
    return list(refs.values())


def _result_from(payload: object, kb: KnowledgeBase, reader: Reader) -> tuple[str, AskResult]:
    if not isinstance(payload, dict):
        raise BadRequestError("send {\"question\", \"answer\", \"citations\": [paths], \"pages\": [paths], \"mode\"}")
    question, answer = payload.get("question"), payload.get("answer")
    if not isinstance(question, str) or not question.strip() or not isinstance(answer, str) or not answer.strip():
        raise BadRequestError("'question' and 'answer' must be non-empty strings")
    if len(question) > MAX_QUESTION_CHARS:  # as for asking: it goes into the page's frontmatter whole
        raise BadRequestError(f"the question is longer than {MAX_QUESTION_CHARS} characters")
    citations = _pages(payload, "citations", MAX_CITATIONS, kb, reader, articles_only=True)
    pages = _pages(payload, "pages", MAX_PAGES, kb, reader, articles_only=False)
    mode = payload.get("mode") if payload.get("mode") in ("llm", "offline") else "llm"
    return question, AskResult(answer=answer, citations=citations, pages=pages, mode=mode)


async def save_answer_endpoint(request: Request) -> Response:
    state = request.app.state.kaas
    try:
        payload = await read_json(request, MAX_ANSWER_BODY_BYTES, "the answer")
        reader = reader_of(request)
        question, result = await anyio.to_thread.run_sync(_result_from, payload, state.kb, reader)
        async with state.save_lock:
            path = await anyio.to_thread.run_sync(lambda: save_answer(state.kb, question, result, reader=reader))
            await anyio.to_thread.run_sync(state.watcher_seen_now)
    except KaasError as exc:
        return error_response(exc, reader_of(request))
    return JSONResponse({"path": path, "saved": True}, status_code=201, headers={"Cache-Control": "no-store"})
