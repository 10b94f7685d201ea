"""What a model server sends back, made into what the gateway promises its callers.

A reply is outside input: a server may send anything its protocol does not promise, and the
gateway is the one boundary where that is handled, for both transports and the cache:

* **Text is text.** A JSON reply may escape half of an emoji (``"\\ud83d"``, a model cut in the
  middle of a surrogate pair) and Python keeps it as a lone surrogate, which no file, terminal,
  log line or HTTP response can encode. ``clean_json`` and the stream joiner (``StreamText``)
  replace each lone surrogate with U+FFFD (and join a pair split over two stream chunks).
* **Wrong types are bad output or ignored.** ``content`` that is not a string is bad output
  (``LLMOutputError``); a ``usage`` that is not a count is ignored and estimated (``usage_numbers``).
* **Size is bounded.** ``max_tokens`` is a request, not a guarantee: a server may ignore it.
  ``reply_limits`` derives from it how many characters of text, and how many bytes on the wire,
  one reply may bring; past them the reply is cut off (``ReplyTooLarge`` from the transport),
  kept as far as it came, and never cached. A repair request quotes at most ``REPAIR_QUOTE_CHARS``
  of a bad reply.
* **One shape for both transports.** Each transport hands the gateway kaas's own ``Reply`` and
  ``ReplyChunk`` (text, finish reason, ``Usage``), read from the server's JSON or litellm's
  objects by the same ``reply_of`` and ``chunks_of``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kb_ai.errors import LLMOutputError

from kb_ai.llm.tokens import estimate_tokens
from kb_ai.untrusted_text import as_text

# A token is a few characters (~4 in English prose); the longest tokens of common vocabularies
# (runs of spaces, dashes or '=') are a few dozen. 32 per token, plus slack, never cuts a real
# reply, and still bounds a server that ignores max_tokens to kilobytes, not gigabytes.
REPLY_CHARS_PER_TOKEN = 32
REPLY_SLACK_CHARS = 16_384
# On the wire a character can take 6 bytes (a "\\uXXXX" escape), and every streamed chunk comes in
# an envelope of a few hundred bytes (ids, model name, fingerprint) with one or a few tokens.
WIRE_BYTES_PER_CHAR = 6
WIRE_BYTES_PER_TOKEN = 1_024
WIRE_SLACK_BYTES = 65_536
# An error body is shown as one line (300 characters): more is never needed.
ERROR_BODY_BYTES = 65_536
# A repair request quotes the bad reply so the model sees its mistake; a few pages of it do.
REPAIR_QUOTE_CHARS = 8_000
# A usage count above this is not a count of one reply's tokens.
MAX_REPORTED_TOKENS = 100_000_000


@dataclass(frozen=True)
class ReplyLimits:
    """How much one reply asked for with ``max_tokens`` may bring: ``chars`` of text and
    ``bytes`` on the wire (a whole body, or a whole stream with its envelopes)."""

    max_tokens: int
    chars: int
    bytes: int


def reply_limits(max_tokens: int) -> ReplyLimits:
    chars = max_tokens * REPLY_CHARS_PER_TOKEN + REPLY_SLACK_CHARS
    wire = chars * WIRE_BYTES_PER_CHAR + max_tokens * WIRE_BYTES_PER_TOKEN + WIRE_SLACK_BYTES
    return ReplyLimits(max_tokens=max_tokens, chars=chars, bytes=wire)


class ReplyTooLarge(Exception):
    """The transport stopped reading a reply at its byte limit (the server ignored max_tokens)."""

    def __init__(self, limit_bytes: int):
        super().__init__(f"the reply was larger than {limit_bytes:,} bytes")
        self.limit_bytes = limit_bytes


def clean_json(value: Any) -> Any:
    """``value`` (freshly parsed JSON, changed in place) with every string, keys included, made
    text by ``as_text``. Iterative: a deeply nested reply cannot exhaust the stack."""
    if isinstance(value, str):
        return as_text(value)
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, list):
            for index, child in enumerate(item):
                if isinstance(child, str):
                    item[index] = as_text(child)
                elif isinstance(child, (list, dict)):
                    pending.append(child)
        elif isinstance(item, dict):
            if any(isinstance(key, str) and as_text(key) is not key for key in item):
                entries = [(as_text(k) if isinstance(k, str) else k, v) for k, v in item.items()]
                item.clear()
                item.update(entries)
            for key, child in item.items():
                if isinstance(child, str):
                    item[key] = as_text(child)
                elif isinstance(child, (list, dict)):
                    pending.append(child)
    return value


class StreamText:
    """Text deltas of a stream, made text one by one: a lone surrogate becomes U+FFFD, except a
    high surrogate ending a delta, which waits for the next one (its pair may come there)."""

    def __init__(self) -> None:
        self._held = ""

    def push(self, delta: str) -> str:
        text = self._held + delta
        self._held = ""
        if text and "\ud800" <= text[-1] <= "\udbff":
            text, self._held = text[:-1], text[-1]
        return as_text(text)

    def flush(self) -> str:
        text, self._held = as_text(self._held), ""
        return text


def count(value: Any) -> int | None:
    """A token count a server reported, or None when it is not one (a string, a negative,
    NaN, a bool, an absurd number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value < 0 or value > MAX_REPORTED_TOKENS:
        return None
    return int(value)


def member(value: Any, name: str) -> Any:
    """Field ``name`` of a reply object: a parsed JSON object (the direct transport) or a
    litellm response object. None when absent or when ``value`` is no object at all."""
    if isinstance(value, dict):
        return value.get(name)
    if value is None or isinstance(value, (str, bytes, int, float, bool, list, tuple)):
        return None
    return getattr(value, name, None)


@dataclass(frozen=True)
class Usage:
    """Tokens as a server reported them; None where it did not, or not as a count."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    # Of the prompt tokens, those the server served from its prompt cache (OpenAI's
    # ``usage.prompt_tokens_details.cached_tokens``; vLLM and llama.cpp's server report it too).
    cached_tokens: int | None = None


@dataclass(frozen=True)
class Reply:
    """One non-streamed reply as a transport got it: ``text`` made text (None when the server
    sent no content), the finish reason when it is a word, the usage when there was one."""

    text: str | None
    finish_reason: str | None = None
    usage: Usage | None = None


@dataclass(frozen=True)
class ReplyChunk:
    """One piece of a streamed reply: a text delta as sent (the gateway's ``StreamText`` joins
    and cleans them), a finish reason, a usage (usually on a last chunk of its own)."""

    text: str | None = None
    finish_reason: str | None = None
    usage: Usage | None = None


def usage_of(value: Any) -> Usage | None:
    """The ``usage`` member of a reply or chunk; None when there is none."""
    if not value:
        return None
    details = member(value, "prompt_tokens_details")
    return Usage(count(member(value, "prompt_tokens")), count(member(value, "completion_tokens")),
                 count(member(details, "cached_tokens")) if details else None)


def finish_reason_of(value: Any) -> str | None:
    """A finish reason is a word; anything else a server sends there is no finish reason."""
    return value if isinstance(value, str) and value else None


def content_of(value: Any, where: str, what: str) -> str | None:
    """A reply's or chunk's ``content``: text (lone surrogates made U+FFFD later: by the stream
    joiner, or by ``reply_of``), None when absent; anything else is bad output."""
    if value is None or isinstance(value, str):
        return value
    raise LLMOutputError(f"{where} sent a {what} whose content is not text "
                         f"({type(value).__name__}); the protocol promises a string")


def reply_of(response: Any, where: str) -> Reply:
    """The reply of a non-streamed response (a server's JSON or litellm's object), checked:
    choices that are a list, content that is text. ``where`` names the server for the error."""
    choices = member(response, "choices")
    if not isinstance(choices, (list, tuple)) or not choices:
        raise LLMOutputError(f"{where} sent a reply without choices")
    choice = choices[0]
    text = content_of(member(member(choice, "message"), "content"), where, "reply")
    return Reply(text=None if text is None else as_text(text),
                 finish_reason=finish_reason_of(member(choice, "finish_reason")),
                 usage=usage_of(member(response, "usage")))


def chunks_of(chunk: Any, where: str) -> list[ReplyChunk]:
    """A streamed chunk (a server's JSON or litellm's object) as one ``ReplyChunk`` per choice,
    the first carrying the chunk's usage; a usage-only chunk or a keep-alive as one without text."""
    usage = usage_of(member(chunk, "usage"))
    choices = member(chunk, "choices")
    if choices is None:
        return [ReplyChunk(usage=usage)]
    if not isinstance(choices, (list, tuple)):
        raise LLMOutputError(f"{where} sent a stream chunk whose choices are not a list")
    pieces = [ReplyChunk(text=content_of(member(member(choice, "delta"), "content"), where, "stream chunk"),
                         finish_reason=finish_reason_of(member(choice, "finish_reason")))
              for choice in choices]
    if not pieces:
        return [ReplyChunk(usage=usage)]
    first = pieces[0]
    pieces[0] = ReplyChunk(first.text, first.finish_reason, usage)
    return pieces


def usage_numbers(usage: Usage | None, messages: list[dict[str, Any]], text: str) -> tuple[int, int]:
    """(prompt, completion) tokens as the server reported them; estimated where it did not, or
    reported something that is not a count."""
    prompt = (usage.prompt_tokens if usage else None) or 0
    completion = (usage.completion_tokens if usage else None) or 0
    if prompt <= 0:
        prompt = sum(estimate_tokens(str(m.get("content") or "")) for m in messages)
    if completion <= 0 and text:
        completion = estimate_tokens(text)
    return prompt, completion


def quote_for_repair(text: str) -> str:
    """At most ``REPAIR_QUOTE_CHARS`` of a bad reply, for the repair request."""
    if len(text) <= REPAIR_QUOTE_CHARS:
        return text
    return text[:REPAIR_QUOTE_CHARS] + f"\n[... {len(text) - REPAIR_QUOTE_CHARS:,} more characters left out]"
