"""``POST /api/feedback``: a thumbs-up/down on an answer, appended to ``.kaas/feedback.jsonl``
(``quality/feedback.py``: validated, one line per vote, the file bounded). Any reader may vote;
the record names the reader (their user name) and never changes the wiki."""

from __future__ import annotations

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kb_ai.errors import KaasError, StorageError
from kb_ai.quality.feedback import feedback_record, record_feedback
from kb_ai.server.chat import read_json
from kb_ai.server.guard import reader_of
from kb_ai.server.pages import error_response

MAX_FEEDBACK_BODY_BYTES = 64_000


async def feedback_endpoint(request: Request) -> Response:
    state = request.app.state.kaas
    try:
        payload = await read_json(request, MAX_FEEDBACK_BODY_BYTES, "the feedback")
        record = feedback_record(payload, reader_of(request).name)
        try:
            await anyio.to_thread.run_sync(record_feedback, state.kb.state_dir, record)
        except OSError as exc:
            raise StorageError(f"could not record the feedback: {exc.strerror or exc}") from None
    except KaasError as exc:
        return error_response(exc, reader_of(request))
    return JSONResponse({"recorded": True, "vote": record["vote"]}, status_code=201)
