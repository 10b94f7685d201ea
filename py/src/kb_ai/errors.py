"""Errors a person can hit. Each carries a message meant for that person and a stable code.

The CLI turns them into one line on stderr and a non-zero exit; the HTTP server into an
``error`` event; the MCP server into a tool error. Anything that is not a ``KaasError`` is a bug.
"""

from __future__ import annotations


class KaasError(Exception):
    """Base class: ``str(err)`` is a one-line message for a person."""

    code = "kaas_error"
    exit_code = 1

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class ConfigError(KaasError):
    code = "config_error"
    exit_code = 2


class NoWikiError(KaasError):
    code = "no_wiki"
    exit_code = 2


class EmptyCatalogError(KaasError):
    code = "empty_catalog"
    exit_code = 2


class UnsafePathError(KaasError):
    """A path from a user, a catalog line, a source or a model points outside the wiki."""

    code = "unsafe_path"


class StorageError(KaasError):
    """A file of the knowledge base cannot be written or read: disk full, permission denied, ..."""

    code = "storage_error"

    @classmethod
    def from_os_error(cls, exc: OSError, doing: str = "write") -> "StorageError":
        reason = exc.strerror or str(exc) or type(exc).__name__
        where = f" {exc.filename}" if exc.filename else ""
        return cls(f"cannot {doing}{where}: {reason}")


class PageNotFoundError(KaasError):
    code = "page_not_found"


class ArticleFormatError(KaasError):
    """An article cannot be parsed (malformed frontmatter, wrong encoding, too large)."""

    code = "bad_article"


class LockedError(KaasError):
    """Another compile (or index/edit holding the compile lock) is running on this KB."""

    code = "locked"
    exit_code = 3


class LLMError(KaasError):
    """Any failure of the model path. ``retryable`` errors may be retried or degraded around."""

    code = "llm_error"
    retryable = False


class UnknownModelError(LLMError):
    code = "unknown_model"
    exit_code = 2


class MissingApiKeyError(LLMError):
    code = "missing_api_key"
    exit_code = 2


class LLMAuthError(LLMError):
    code = "llm_auth"
    exit_code = 2


class LLMUnreachableError(LLMError):
    code = "llm_unreachable"
    retryable = True


class LLMModelDownError(LLMUnreachableError):
    """The gateway's circuit breaker is open: the last calls got no answer, so this one was not
    sent (it fails at once until a cool-down passes). Same code as unreachable: a compile stops."""

    retryable = False


class LLMTimeoutError(LLMError):
    code = "llm_timeout"
    retryable = True


class LLMDeadlineError(LLMTimeoutError):
    """A call ran out its whole deadline (``call_deadline``): a retry would wait as long again."""

    code = "llm_deadline"
    retryable = False


class LLMRateLimitError(LLMError):
    code = "llm_rate_limited"
    retryable = True


class LLMServerError(LLMError):
    code = "llm_server_error"
    retryable = True


class LLMBadRequestError(LLMError):
    code = "llm_bad_request"


class LLMOutputError(LLMError):
    """The model answered, but not with what was asked (invalid JSON, schema mismatch, empty)."""

    code = "llm_bad_output"
    retryable = True


class LLMReplyCutOff(LLMOutputError):
    """A reply stopped before the model finished: at its ``max_tokens`` (``reason`` "length"),
    at the call deadline ("deadline") or at the size a reply of ``max_tokens`` may have ("size":
    the server ignored max_tokens). ``text`` is what came; a streamed answer keeps it."""

    code = "llm_reply_cut_off"
    retryable = False

    def __init__(self, message: str, *, text: str = "", reason: str = "length"):
        super().__init__(message)
        self.text = text
        self.reason = reason


def exit_code_for(code: str) -> int:
    """The exit code of the error class with this ``code`` (an ``error`` event carries only the
    code); 1 for codes no class declares."""
    pending = [KaasError]
    while pending:
        cls = pending.pop()
        if cls.code == code:
            return cls.exit_code
        pending.extend(cls.__subclasses__())
    return 1
