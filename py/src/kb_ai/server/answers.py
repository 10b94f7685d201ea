"""``POST /api/answers``: file an answer from the chat into ``wiki/answers/`` (navigation only).

The browser sends the question, the answer text and the paths it cited. A saved answer is a
navigation page, never evidence, and anyone who may use this endpoint may also edit any
article, so the text is taken as given; what is checked is that every cited path is an
article of the catalog (not another saved answer), so the page leads somewhere real.
"""

from __future__ import annotations


import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kb_ai.errors import KaasError, PageNotFoundError, UnsafePathError
from kb_ai.navigate.ask import MAX_QUESTION_CHARS
from kb_ai.navigate.records import AskResult
from kb_ai.navigate.save import save_answer
from kb_ai.server.chat import BadRequestError, read_json
from kb_ai.server.guard import reader_of
from kb_ai.server.pages import error_response
from kb_ai.store.access import Reader
from kb_ai.store.paths import normalize_wiki_path

MAX_ANSWER_BODY_BYTES = 512_000


def _result_from(payload: object, kb, reader: Reader) -> tuple[str, AskResult]:
    if not isinstance(payload, dict):
        raise BadRequestError("send {\"question\", \"answer\", \"citations\": [paths], \"mode\"}")
    question, answer = payload.get("question"), payload.get("answer")
    if not isinstance(question, str) or not question.strip() or not isinstance(answer, str) or not answer.strip():
        raise BadRequestError("'question' and 'answer' must be non-empty strings")
    if len(question) > MAX_QUESTION_CHARS:  # as for asking: it goes into the page's frontmatter whole
        raise BadRequestError(f"the question is longer than {MAX_QUESTION_CHARS} characters")
    raw_citations = payload.get("citations") or []
    if not isinstance(raw_citations, list) or len(raw_citations) > 50:
        raise BadRequestError("'citations' must be a list of at most 50 page paths")
    catalog = kb.catalog().visible_to(reader)  # a page this reader may not read is "no page"
    citations = []
    for item in raw_citations:
        raw = item.get("path") if isinstance(item, dict) else item
        try:
            path = normalize_wiki_path(raw if isinstance(raw, str) else "")
        except UnsafePathError as exc:
            raise BadRequestError(f"not a page path: {raw!r} ({exc.message})") from None
        entry = catalog.get(path)
        if entry is None:
            raise PageNotFoundError(f"no page {path!r} in the catalog")
        if kb.read_article(path).kind == "answer":
            raise BadRequestError(f"{path} is a saved answer: answers may cite articles only")
        citations.append({"path": path, "title": entry.title})
    mode = payload.get("mode") if payload.get("mode") in ("llm", "offline") else "llm"
    return question, AskResult(answer=answer, citations=citations, mode=mode)


async def save_answer_endpoint(request: Request) -> Response:
    state = request.app.state.kaas
    try:
        payload = await read_json(request, MAX_ANSWER_BODY_BYTES, "the answer")
        reader = reader_of(request)
        question, result = _result_from(payload, state.kb, reader)
        async with state.save_lock:
            path = await anyio.to_thread.run_sync(lambda: save_answer(state.kb, question, result, reader=reader))
            state.watcher_seen_now()
    except KaasError as exc:
        return error_response(exc)
    return JSONResponse({"path": path, "saved": True}, status_code=201)
