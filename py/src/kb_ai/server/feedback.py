"""``POST /api/feedback``: a thumbs-up/down on an answer, kept in ``.kaas/feedback.jsonl``
(``quality/feedback.py`` validates it, ``quality/feedback_store.py`` keeps it: the file bounded,
and what is dropped chosen per user, so no one user can erase anyone else's votes). Any reader
may vote; the record names the reader (their user name) and never changes the wiki.

Per user (not admins), at most ``user_vote_rate`` votes a minute (``server/limits.py:
UserRouteRate``, 429 before the body is read). A vote larger than a vote may be (a body declared
over ``MAX_FEEDBACK_BODY_BYTES``, a text over its length, more than ``MAX_VOTE_BYTES`` stored) is
413 ``vote_too_large``.
"""

from __future__ import annotations

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kb_ai.errors import KaasError, StorageError
from kb_ai.quality.feedback import Retention, VoteTooLargeError, feedback_record, record_feedback
from kb_ai.server.chat import read_json
from kb_ai.server.guard import reader_of
from kb_ai.server.pages import error_response

MAX_FEEDBACK_BODY_BYTES = 64_000  # the JSON as sent (escapes included); what is stored is MAX_VOTE_BYTES at most


async def feedback_endpoint(request: Request) -> Response:
    state = request.app.state.kaas
    settings = state.settings
    try:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_FEEDBACK_BODY_BYTES:
            raise VoteTooLargeError(f"the vote is larger than {MAX_FEEDBACK_BODY_BYTES:,} bytes")
        payload = await read_json(request, MAX_FEEDBACK_BODY_BYTES, "the feedback")
        record = feedback_record(payload, reader_of(request).name)
        retention = Retention(per_user=settings.feedback_user_votes, days=settings.feedback_days)
        try:
            await anyio.to_thread.run_sync(record_feedback, state.kb.state_dir, record, retention)
        except OSError as exc:
            raise StorageError(f"could not record the feedback: {exc.strerror or exc}") from None
    except KaasError as exc:
        return error_response(exc, reader_of(request))
    return JSONResponse({"recorded": True, "vote": record["vote"]}, status_code=201)
