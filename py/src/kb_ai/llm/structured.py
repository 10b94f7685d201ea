"""Structured output: the response_format shapes ``complete_json`` tries, which one a server
took (remembered in ``llm-capabilities.json``), and reading a model's JSON reply.

Servers differ in how they take a JSON schema: OpenAI's ``json_schema`` response format
(OpenAI, vLLM, LM Studio, recent Ollama), llama.cpp's ``json_object`` with a ``schema``, or
none at all (the schema goes into the prompt). The gateway tries them best first and remembers
per (model, api_base) what worked (``ShapeMemory``). Whatever came, ``parse_and_validate``
reads it leniently (``<think>`` blocks, code fences, prose around the JSON, control characters
in strings) and checks it against the schema with ``jsonschema``; what was wrong goes into the
one repair request (``repair_instruction``).
"""

from __future__ import annotations

import functools
import json
import logging
import re
from pathlib import Path
from typing import Any

from kb_ai.llm.replies import clean_json
from kb_ai.files import DamagedFileError, read_state_json, write_state_bytes

Message = dict[str, str]

log = logging.getLogger(__name__)

# response_format shapes for complete_json, best first.
SHAPE_JSON_SCHEMA = "json_schema"  # OpenAI, vLLM, LM Studio, recent Ollama
SHAPE_JSON_OBJECT = "json_object_schema"  # llama.cpp server: {"type": "json_object", "schema": ...}
SHAPE_INSTRUCTION = "instruction"  # no response_format: the schema goes into the prompt
SHAPES = (SHAPE_JSON_SCHEMA, SHAPE_JSON_OBJECT, SHAPE_INSTRUCTION)

CAPABILITIES_FILE = "llm-capabilities.json"
MAX_CAPABILITIES_BYTES = 1 << 20


# -- the request ---------------------------------------------------------------------------------


def shape_request(messages: list[Message], schema: dict[str, Any], schema_name: str,
                  shape: str) -> tuple[list[Message], dict[str, Any] | None]:
    """The messages and response_format of a request for JSON in ``shape``."""
    if shape == SHAPE_JSON_SCHEMA:
        return messages, {"type": "json_schema",
                          "json_schema": {"name": _safe_schema_name(schema_name), "schema": schema,
                                          "strict": False}}
    if shape == SHAPE_JSON_OBJECT:
        return messages, {"type": "json_object", "schema": schema}
    # Instruction only: copy, never mutate the caller's messages.
    copied = [dict(m) for m in messages]
    instruction = _schema_instruction(schema)
    if copied and copied[-1].get("role") == "user":
        copied[-1]["content"] = f"{copied[-1].get('content') or ''}\n\n{instruction}"
    else:
        copied.append({"role": "user", "content": instruction})
    return copied, None


def _schema_instruction(schema: dict[str, Any]) -> str:
    what = "a JSON object" if schema.get("type") == "object" else "JSON"
    return (f"Answer with only {what} matching this JSON schema, with no prose and no code fences:\n"
            + json.dumps(schema, ensure_ascii=False))


def _safe_schema_name(name: str) -> str:
    # OpenAI requires ^[a-zA-Z0-9_-]{1,64}$.
    return (re.sub(r"[^A-Za-z0-9_-]", "_", name) or "output")[:64]


def repair_instruction(problem: str, schema: dict[str, Any]) -> str:
    return (f"Your previous reply was not valid: {problem}. Answer again with only valid JSON matching "
            "this JSON schema, with no prose and no code fences:\n" + json.dumps(schema, ensure_ascii=False))


# -- what worked, per server ------------------------------------------------------------------------


class ShapeMemory:
    """The response_format shape each (model, api_base) took, in memory and, with a ``path``,
    in ``llm-capabilities.json`` (so the next process does not probe again)."""

    def __init__(self, path: Path | None):
        self.path = path
        self._shapes: dict[str, str] = {}
        self._loaded = False

    def get(self, key: str) -> str:
        if not self._loaded:
            self._loaded = True
            if self.path is not None:
                shapes = self._read(warn=True).get("response_format")
                if isinstance(shapes, dict):
                    self._shapes.update({k: v for k, v in shapes.items() if isinstance(v, str) and v in SHAPES})
        return self._shapes.get(key, SHAPE_JSON_SCHEMA)

    def put(self, key: str, shape: str) -> None:
        if self._shapes.get(key) == shape:
            return
        self._shapes[key] = shape
        if self.path is None:
            return
        try:
            data = self._read(warn=False)
            if not isinstance(data.get("response_format"), dict):
                data["response_format"] = {}
            data["response_format"][key] = shape
            write_state_bytes(self.path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8"))
        except OSError as exc:
            log.warning("could not save %s (%s)", self.path, exc)

    def _read(self, *, warn: bool) -> dict:
        """What ``llm-capabilities.json`` remembers; {} when there is none, or when it is damaged
        (then, with ``warn``, one warning line naming it: each shape is found again by trying)."""
        try:
            data = read_state_json(self.path, MAX_CAPABILITIES_BYTES)
            if data is not None and not isinstance(data, dict):
                raise DamagedFileError(f"a JSON {type(data).__name__}, not a table")
        except DamagedFileError as exc:
            if warn:
                log.warning("%s is damaged (%s); ignored", self.path, exc)
            return {}
        return data or {}


# -- the reply ------------------------------------------------------------------------------------


def validator(schema: dict[str, Any]) -> Any:
    """A jsonschema validator for ``schema`` (checked once: a bad schema is a bug in kaas)."""
    # check_schema costs 14-21 ms a call (measured in the compile benchmark); schemas repeat.
    return _validator_for_text(json.dumps(schema, sort_keys=True))


@functools.lru_cache(maxsize=64)
def _validator_for_text(schema_text: str) -> Any:
    import jsonschema  # noqa: PLC0415 (kept off the import path of offline mode)

    schema = json.loads(schema_text)
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"invalid JSON schema: {exc.message}") from None  # a bug in kaas, not the model
    return cls(schema)


_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


# strict=False: control characters (a literal newline, a tab) inside strings are accepted, as
# every lenient JSON parser does. Models write them, and llama.cpp's grammar for JSON strings
# allows them, so a Markdown article body in a string would otherwise never parse.
_DECODER = json.JSONDecoder(strict=False)


def _drop_think(text: str) -> str:
    """``text`` without its ``<think>...</think>`` blocks. Each search starts where the last one
    ended, and the first ``<think>`` without a ``</think>`` after it ends the search: a reply of
    many unclosed ``<think>`` is read once, not once per ``<think>``."""
    kept: list[str] = []
    position = 0
    while (opened := _THINK_OPEN.search(text, position)) is not None:
        closed = _THINK_CLOSE.search(text, opened.end())
        if closed is None:
            break
        kept.append(text[position:opened.start()])
        position = closed.end()
    kept.append(text[position:])
    return "".join(kept)


def parse_json_reply(text: str) -> Any:
    """Parse a model's JSON reply robustly: drop <think> blocks and ``` fences, accept control
    characters inside strings, and take the first {...} or [...] block when prose surrounds it.
    Raises ValueError naming the real parse error: the one that got furthest into the JSON."""
    cleaned = _drop_think(text or "").strip()
    if not cleaned:
        raise ValueError("the reply was empty")
    fenced = _FENCE.search(cleaned)
    candidates = [fenced.group(1).strip()] if fenced else []
    candidates.append(cleaned)
    best: json.JSONDecodeError | None = None
    best_depth = -1
    for candidate in candidates:
        starts = [0] + sorted(i for i in (candidate.find("{"), candidate.find("[")) if i > 0)
        for start in starts:
            try:
                value, end = _decoded(candidate, start)
            except RecursionError:  # valid JSON nested past Python's stack: no schema wants that
                raise ValueError("the reply is nested too deeply") from None
            except json.JSONDecodeError as exc:
                # The attempt that read furthest is where the JSON really broke; an attempt that
                # failed at its first character (prose before the JSON) says nothing about it.
                if exc.pos - start > best_depth:
                    best, best_depth = exc, exc.pos - start
                continue
            if start == 0 and candidate[end:].strip() and not isinstance(value, (dict, list)):
                continue  # a number or word leading prose ("2 pages: {...}"): look for the JSON
            return value
    if best is None:
        raise ValueError("no JSON found in the reply")
    raise _parse_error(best)


def _decoded(candidate: str, start: int) -> tuple[Any, int]:
    """The JSON value at ``start`` of ``candidate`` and where it ends, its strings made text (a
    ``"\\ud83d"`` escape, half an emoji, is valid JSON but not text: it becomes U+FFFD)."""
    value, end = _DECODER.raw_decode(candidate, start)
    return clean_json(value), end


def _parse_error(exc: json.JSONDecodeError) -> ValueError:
    doc, pos = exc.doc, exc.pos
    near = doc[max(0, pos - 30):pos + 30].replace("\n", "\\n")
    end = "" if pos < len(doc) else " (the reply ends there: it was cut short)"
    return ValueError(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}{end}, near {near!r}")


def parse_and_validate(text: str, validator: Any) -> tuple[Any, str | None]:
    """(value, None) when ``text`` holds JSON valid for the schema, else (None, what was wrong)."""
    try:
        value = parse_json_reply(text)
    except ValueError as exc:
        return None, str(exc)
    errors = sorted(validator.iter_errors(value), key=lambda e: (len(list(e.absolute_path)), e.message))
    if errors:
        import jsonschema  # noqa: PLC0415

        best = jsonschema.exceptions.best_match(errors) or errors[0]
        where = "/".join(str(p) for p in best.absolute_path) or "(root)"
        message = best.message if len(best.message) <= 200 else best.message[:199] + "…"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return None, f"schema mismatch at {where}: {message}{more}"
    return value, None
