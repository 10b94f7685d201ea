"""Errors a person can hit. Each carries a message meant for that person and a stable code.

The CLI turns them into one line on stderr and a non-zero exit (``exit_code``); the HTTP server
into an ``error`` event, or a response with the class's ``http_status``; the MCP server into a
tool error. Anything that is not a ``KaasError`` is a bug.

Every class declares (or inherits) both. ``http_status`` is 4xx for whatever the request asked
that cannot be done (the default: a new error class is a user's error unless it says otherwise);
5xx only for failures of the server itself: its configuration, its storage, or the model behind
it.
"""

from __future__ import annotations


class KaasError(Exception):
    """Base class: ``str(err)`` is a one-line message for a person."""

    code = "kaas_error"
    exit_code = 1
    http_status = 400  # the request cannot be done as asked; never 500 for a person's mistake

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class BadRequestError(KaasError):
    """The request itself is malformed (not JSON, wrong types, too large, too many pages)."""

    code = "bad_request"
    http_status = 400


class ConfigError(KaasError):
    code = "config_error"
    exit_code = 2
    http_status = 500  # the server is misconfigured: not the request's fault


class NoWikiError(KaasError):
    code = "no_wiki"
    exit_code = 2
    http_status = 404


class EmptyCatalogError(KaasError):
    code = "empty_catalog"
    exit_code = 2
    http_status = 404


class UnsafePathError(KaasError):
    """A path from a user, a catalog line, a source or a model points outside the wiki."""

    code = "unsafe_path"
    http_status = 400


class StorageError(KaasError):
    """A file of the knowledge base cannot be written or read: disk full, permission denied, ..."""

    code = "storage_error"
    http_status = 507  # Insufficient Storage (WebDAV): the server cannot store what was sent

    @classmethod
    def from_os_error(cls, exc: OSError, doing: str = "write") -> "StorageError":
        reason = exc.strerror or str(exc) or type(exc).__name__
        where = f" {exc.filename}" if exc.filename else ""
        return cls(f"cannot {doing}{where}: {reason}")


class NotSavedError(KaasError):
    """An answer that cannot be filed as a page (it failed, or cites no page of the wiki)."""

    code = "not_saved"
    http_status = 422


class PageNotFoundError(KaasError):
    code = "page_not_found"
    http_status = 404


class ArticleFormatError(KaasError):
    """An article cannot be parsed (malformed frontmatter, wrong encoding, too large)."""

    code = "bad_article"
    http_status = 422


class LockedError(KaasError):
    """Another compile (or index/edit holding the compile lock) is running on this KB."""

    code = "locked"
    exit_code = 3
    http_status = 409


class ListenError(KaasError):
    """``kaas serve`` cannot listen on the address asked for (port in use, no permission)."""

    code = "cannot_listen"
    exit_code = 3  # never an HTTP answer: the server is not up


class LimitedError(KaasError):
    """A per-user serving limit is reached (``server/limits.py``): try again in ``retry_after``
    seconds. ``code`` names the limit: ``rate_limited`` (answers in flight, questions a minute)
    or ``too_many_streams`` (open streams)."""

    code = "rate_limited"
    http_status = 429

    def __init__(self, message: str, retry_after: int, code: str = "rate_limited"):
        super().__init__(message)
        self.retry_after = retry_after
        self.code = code


class LLMError(KaasError):
    """Any failure of the model path. Three class attributes say what a caller can do about it,
    and every caller asks them (never a list of classes or codes of its own):

    * ``retryable``: the same request, sent again, may succeed (the gateway retries it, with
      backoff, within the call's deadline).
    * ``fatal``: no call to this model can succeed until a person changes the configuration
      (model name, API key, credentials). Nothing degrades around it: an ask, a lint and a
      compile stop and say so (a compile after saving its finished work).
    * ``unanswered``: the model did not answer at all (a timeout, the call deadline, a server
      that cannot be reached, the circuit breaker standing for those). The circuit breaker counts
      these; an ask answers the rest without the model.

    A compile also stops on ``LLMUnreachableError`` (``stops_compile``): without the model it
    can do nothing more, and a timeout of one source is that source's failure until the breaker
    says the model is down (which raises an ``LLMUnreachableError``).
    """

    code = "llm_error"
    retryable = False
    fatal = False
    unanswered = False
    http_status = 502  # the model behind the server failed

    @property
    def stops_compile(self) -> bool:
        """A compile cannot go on after this error: ``fatal``, or the model cannot be reached."""
        return self.fatal or isinstance(self, LLMUnreachableError)


class UnknownModelError(LLMError):
    code = "unknown_model"
    fatal = True
    exit_code = 2
    http_status = 500  # the server's configuration


class MissingApiKeyError(LLMError):
    code = "missing_api_key"
    fatal = True
    exit_code = 2
    http_status = 500


class LLMAuthError(LLMError):
    code = "llm_auth"
    fatal = True
    exit_code = 2
    http_status = 500


class LLMUnreachableError(LLMError):
    code = "llm_unreachable"
    retryable = True
    unanswered = True


class LLMModelDownError(LLMUnreachableError):
    """The gateway's circuit breaker is open: the last calls got no answer, so this one was not
    sent (it fails at once until a cool-down passes). Same code as unreachable: a compile stops."""

    retryable = False


class LLMTimeoutError(LLMError):
    code = "llm_timeout"
    retryable = True
    unanswered = True
    http_status = 504


class LLMDeadlineError(LLMTimeoutError):
    """A call ran out its whole deadline (``call_deadline``): a retry would wait as long again."""

    code = "llm_deadline"
    retryable = False


class LLMRateLimitError(LLMError):
    code = "llm_rate_limited"
    retryable = True
    http_status = 503


class LLMServerError(LLMError):
    code = "llm_server_error"
    retryable = True


class LLMBadRequestError(LLMError):
    code = "llm_bad_request"


class LLMOutputError(LLMError):
    """The model answered, but not with what was asked (invalid JSON, schema mismatch, empty)."""

    code = "llm_bad_output"
    retryable = False  # not sent again as it was: complete_json asks once more, saying what was wrong


class LLMReplyCutOff(LLMOutputError):
    """A reply stopped before the model finished: at its ``max_tokens`` (``reason`` "length"),
    at the call deadline ("deadline") or at the size a reply of ``max_tokens`` may have ("size":
    the server ignored max_tokens). ``text`` is what came; a streamed answer keeps it."""

    code = "llm_reply_cut_off"

    def __init__(self, message: str, *, text: str = "", reason: str = "length"):
        super().__init__(message)
        self.text = text
        self.reason = reason


def error_classes() -> list[type[KaasError]]:
    """``KaasError`` and every subclass defined so far (in any module already imported)."""
    found, pending = [], [KaasError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def exit_code_for(code: str) -> int:
    """The exit code of the error class with this ``code`` (an ``error`` event carries only the
    code); 1 for codes no class declares."""
    for cls in error_classes():
        if cls.code == code:
            return cls.exit_code
    return 1
