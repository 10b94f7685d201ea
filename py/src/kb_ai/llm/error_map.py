"""Errors of the transports (litellm's, the openai client's, httpx's) made into ``kb_ai.errors``.

Both transports raise what their libraries raise; the gateway maps it here, once, into one
vocabulary with a one-line message for a person: ``LLMTimeoutError``, ``LLMUnreachableError``,
``LLMAuthError``, ``UnknownModelError``, ``LLMRateLimitError`` (carrying ``retry_after``),
``LLMBadRequestError``, ``LLMServerError``, ``LLMOutputError`` (a reply litellm could not read).
Classes are recognised by name and status code, so neither litellm nor openai is imported here.
The two refusals the gateway works around instead of failing (``refuses_temperature``,
``rejects_response_format``) are read from the same exceptions.
"""

from __future__ import annotations

import asyncio
import email.utils
import re
from datetime import datetime, timezone

from kb_ai.errors import (
    KaasError,
    LLMAuthError,
    LLMBadRequestError,
    LLMError,
    LLMOutputError,
    LLMRateLimitError,
    LLMServerError,
    LLMTimeoutError,
    LLMUnreachableError,
    UnknownModelError,
)
from kb_ai.untrusted_text import as_text

_TIMEOUT_NAMES = {"APITimeoutError", "ReadTimeout", "WriteTimeout", "ConnectTimeout", "PoolTimeout",
                  "TimeoutException", "ServerTimeoutError"}
_CONNECTION_NAMES = {"ConnectError", "ConnectionRefusedError", "ConnectionResetError", "ConnectionError",
                     "ClientConnectorError", "ClientConnectionError", "ServerDisconnectedError",
                     "RemoteProtocolError", "gaierror", "NetworkError"}
_BAD_REQUEST_NAMES = {"BadRequestError", "UnprocessableEntityError", "UnsupportedParamsError",
                      "InvalidRequestError", "LiteLLMUnknownProvider", "ContentPolicyViolationError",
                      "RejectedRequestError", "MalformedRequestFieldError", "UnsupportedEndpointError",
                      "EndpointNotSupportedByModelError"}
_SERVER_ERROR_NAMES = {"InternalServerError", "ServiceUnavailableError", "BadGatewayError",
                       "MidStreamFallbackError"}
_SHAPE_ERRORS = (TypeError, AttributeError, KeyError, IndexError)
_FORMAT_WORDS = ("response_format", "json_schema", "schema", "not supported", "unsupported")


class ResponseFormatRejected(LLMBadRequestError):
    """The server (or litellm for this provider) refused the response_format shape we sent."""


def map_error(exc: BaseException, *, where: str, model: str, timeout: float) -> LLMError:
    """``exc`` as a ``kb_ai.errors`` error about ``model`` served by ``where`` ("the LLM server at
    ..."), with a one-line message that is text (a server's message may hold a lone surrogate)."""
    err = _mapped(exc, where, model, timeout)
    clean = as_text(err.message)
    if clean is not err.message:
        err.message, err.args = clean, (clean,)
    return err


def _mapped(exc: BaseException, where: str, model: str, timeout: float) -> LLMError:
    if isinstance(exc, LLMError):
        return exc
    if isinstance(exc, KaasError):
        return LLMError(exc.message)
    chain = _exception_chain(exc)
    if type(exc).__name__ == "MidStreamFallbackError":
        if "finish_reason" in str(exc):
            return LLMOutputError(f"the reply stream from {where} ended early (no finish reason); "
                                  "the answer may be incomplete")
        original = getattr(exc, "original_exception", None)
        if isinstance(original, BaseException) and original is not exc:
            return map_error(original, where=where, model=model, timeout=timeout)
    if _unreadable_reply(chain):
        # litellm could not build its response object from what the server sent (content
        # that is not text, usage that is not a count...): the reply is bad output.
        return LLMOutputError(f"{where} sent a reply that is not what the protocol promises: {one_line(exc)}")
    if _is_timeout(exc, chain):
        return LLMTimeoutError(f"{where} did not answer within {timeout:g} s ({model})")
    if _is_connection_failure(chain):
        return LLMUnreachableError(f"cannot reach {where}: {_root_cause(chain)}")
    return _by_status(exc, where, model)


def _by_status(exc: BaseException, where: str, model: str) -> LLMError:
    """A refusal or failure the server answered with: by class name or HTTP status."""
    name = type(exc).__name__
    status = status_code(exc)
    detail = one_line(exc)
    if name in ("AuthenticationError", "CallerCredentialAuthenticationError") or status == 401:
        return LLMAuthError(f"{where} rejected the API key (set KAAS_API_KEY): {detail}")
    if name == "PermissionDeniedError" or status == 403:
        return LLMAuthError(f"{where} denied access to {model}: {detail}")
    if name == "NotFoundError" or status == 404:
        return UnknownModelError(
            f"{where} does not know model {model!r} (404): check KAAS_MODEL and KAAS_API_BASE "
            f"(an OpenAI-compatible base usually ends in /v1): {detail}"
        )
    if name in ("RateLimitError", "CallerCredentialRateLimitError") or status == 429:
        err: LLMError = LLMRateLimitError(f"{where} is rate limiting requests (429): {detail}")
        err.retry_after = retry_after(exc)  # type: ignore[attr-defined]
        return err
    if name == "ContextWindowExceededError":
        return LLMBadRequestError(f"the prompt is too long for {model}'s context window: {detail}")
    if name in _BAD_REQUEST_NAMES or status in (400, 413, 422):
        return LLMBadRequestError(f"{where} refused the request ({status or 400}): {detail}")
    if name in _SERVER_ERROR_NAMES or (status is not None and status >= 500):
        err = LLMServerError(f"{where} failed ({status or 500}): {detail}")
        err.retry_after = retry_after(exc)  # type: ignore[attr-defined]
        return err
    if name == "APIConnectionError" and "connect" in detail.lower():
        # litellm wraps failures it could not classify as APIConnectionError, with a traceback.
        return LLMUnreachableError(f"cannot reach {where}: {detail}")
    return LLMError(f"the LLM call to {model} failed ({name}): {detail}")


def _is_timeout(exc: BaseException, chain: list[BaseException]) -> bool:
    if type(exc).__name__ == "Timeout" or isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return True
    return bool({type(e).__name__ for e in chain} & _TIMEOUT_NAMES)


def _exception_chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _unreadable_reply(chain: list[BaseException]) -> bool:
    """litellm failed to read what the server sent: it raised one of its own errors over a
    pydantic validation error or a type/attribute/key error met while building its response
    objects (content that is not text, a usage that is not a count, choices that are not a list)."""
    if not any((type(e).__module__ or "").startswith("litellm") for e in chain) or _is_connection_failure(chain):
        return False
    for e in chain:
        if type(e).__name__ == "ValidationError" and (type(e).__module__ or "").startswith("pydantic"):
            return True
        if isinstance(e, _SHAPE_ERRORS) or str(e).startswith("Invalid response object"):
            return True
    return False


def _is_connection_failure(chain: list[BaseException]) -> bool:
    # litellm reports "connection refused" as InternalServerError("Connection error."): the cause
    # chain (openai.APIConnectionError <- httpx.ConnectError <- ConnectionRefusedError) tells.
    for e in chain:
        name = type(e).__name__
        module = type(e).__module__ or ""
        if name in _CONNECTION_NAMES:
            return True
        if name == "APIConnectionError" and module.startswith("openai"):
            return True
    return False


def _root_cause(chain: list[BaseException]) -> str:
    for e in reversed(chain):
        if type(e).__module__.startswith("respx"):
            continue
        text = one_line(e)
        if text:
            return text
    return "connection failed"


def status_code(exc: BaseException) -> int | None:
    for value in (getattr(exc, "status_code", None), getattr(getattr(exc, "response", None), "status_code", None)):
        try:
            if value is not None:
                return int(value)
        except (TypeError, ValueError):
            continue
    return None


_PREFIX = re.compile(r"^\s*(?:litellm\.)?[A-Za-z]+(?:Error|Exception|Timeout)\s*:\s*")
_PROVIDER_PREFIX = re.compile(r"^\s*[A-Za-z]+Exception\s*-\s*")


def one_line(exc: BaseException | str, limit: int = 300) -> str:
    """The useful first line of an exception message, without litellm's class-name prefixes."""
    text = exc if isinstance(exc, str) else str(getattr(exc, "message", None) or exc or type(exc).__name__)
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    for _ in range(4):
        stripped = _PROVIDER_PREFIX.sub("", _PREFIX.sub("", line))
        if stripped == line:
            break
        line = stripped
    if len(line) > limit:
        line = line[: limit - 1] + "…"
    return line or type(exc).__name__


def retry_after(exc: BaseException) -> float | None:
    """Seconds from a Retry-After header (seconds or HTTP date) on a litellm exception, if any."""
    candidates = (
        getattr(getattr(exc, "response", None), "headers", None),
        getattr(exc, "litellm_response_headers", None),
        getattr(exc, "headers", None),
    )
    for headers in candidates:
        seconds = _header_seconds(headers)
        if seconds is not None:
            return seconds
    return None


def _header_seconds(headers: object) -> float | None:
    if not headers:
        return None
    try:
        items = {str(k).lower(): str(v) for k, v in headers.items()}  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001
        return None
    if "retry-after-ms" in items:
        try:
            return max(0.0, float(items["retry-after-ms"]) / 1000.0)
        except ValueError:
            pass
    value = items.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def refuses_temperature(exc: BaseException) -> bool:
    """litellm refusing it client-side (o-series models), or the server saying so (400)."""
    text = str(exc).lower()
    if "temperature" not in text:
        return False
    return type(exc).__name__ == "UnsupportedParamsError" or (
        status_code(exc) == 400 and ("unsupported" in text or "not support" in text))


def rejects_response_format(exc: BaseException) -> bool:
    name = type(exc).__name__
    if name in ("ContextWindowExceededError", "ContentPolicyViolationError", "AuthenticationError"):
        return False
    status = status_code(exc)
    text = str(exc).lower()
    # llama-cpp-python's server answers an unknown response_format type with a 500 carrying its
    # request-validation error ("loc: body.response_format.type ... Input should be ...").
    if "response_format" in text and ("validation error" in text or "input should be" in text):
        return True
    if not (name in ("BadRequestError", "UnprocessableEntityError", "UnsupportedParamsError")
            or status in (400, 422)):
        return False
    return status == 422 or any(word in text for word in _FORMAT_WORDS)
