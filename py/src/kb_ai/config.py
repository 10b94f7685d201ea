"""Settings: environment variables override ``kaas.toml``, which overrides the defaults.

``kaas.toml`` uses the environment variables' names in lower case, with or without the
``kaas_`` prefix (``model = "openai/gpt-4o-mini"`` and ``kaas_model = ...`` mean the same).
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

from kb_ai.errors import ConfigError
from kb_ai.files import read_regular_bytes

CONFIG_FILE = "kaas.toml"
MAX_CONFIG_BYTES = 1_000_000


@dataclass(frozen=True)
class Settings:
    """Everything configurable, resolved once per process (or per request when overridden)."""

    kb: Path = field(default_factory=Path.cwd)
    model: str | None = None
    compile_model: str | None = None
    api_base: str | None = None
    api_key: str | None = None
    prompts_dir: Path | None = None
    api_token: str | None = None
    # LLM gateway
    timeout: float = 60.0  # seconds to connect, and for each read of a reply
    call_deadline: float | None = None  # seconds one model call may take in all, retries and stream included; None: 3 x timeout
    max_retries: int = 3
    breaker_failures: int = 3  # calls in a row the model did not answer, after which it is treated as down (0: never)
    breaker_cooldown: float = 60.0  # seconds it is then treated as down (calls fail at once) before one call probes it
    # Model calls in flight for one compile or CLI process; None: by the model's provider kind
    # (llm/config.py call_concurrency: a hosted API or a local server).
    concurrency: int | None = None
    # Where `kaas compile` runs its plan proposals and article writes (compile/cluster.py,
    # docs/scale.md): None = in this process; "local" = a Ray cluster on this machine, started
    # and ended by kaas; anything else = a running Ray cluster's address ("auto", "ray://head:10001").
    cluster: str | None = None
    # Serving (server/limits.py): model calls in flight for one `kaas serve`, all users together;
    # per user (a token of kaas.toml's [users]): answers in flight, questions a minute, and open
    # streams (change streams and chats; below events.MAX_STREAMS, the server's) (0: no limit).
    serve_concurrency: int = 256
    serve_streams: int = 32  # of those, streamed answers: the rest stay free for the calls that start a question
    stream_concurrency: int | None = None  # set from serve_streams by the server (llm/config.py)
    user_concurrency: int = 8
    user_rate: int = 60
    user_streams: int = 16
    # Votes on answers (POST /api/feedback): per user, votes a minute (0: no limit); kept in
    # .kaas/feedback.jsonl: each user's newest N, none older than D days (quality/feedback_store.py).
    user_vote_rate: int = 20
    feedback_user_votes: int = 500
    feedback_days: int = 365
    cache: bool = True
    direct_http: bool = True  # talk to OpenAI-compatible servers over httpx, not through litellm
    # Navigation budgets, in estimated tokens. select_budget None = derived from the model's context.
    select_budget: int | None = None
    # The model's context window in tokens, when litellm does not know it (a local server's alias):
    # None = asked of the server (llm/context_window.py), else the default selection budget.
    context_window: int | None = None
    # Over the budget: "shortlist" (keyword shortlist, one call) or "topics" (topics, then pages).
    navigation: str = "shortlist"
    read_budget: int = 12_000
    max_pages: int = 5  # pages read per question, all rounds together
    # Multi-hop (navigate/rounds.py): rounds of reading per question (1: no second look), and the
    # model calls one question may spend choosing pages in all rounds (rewrite included).
    max_rounds: int = 2
    max_calls: int = 4
    # When the model fails the answer step (unreachable, timeout, 5xx after retries): answer with
    # the offline extract of the pages read, saying why (true), or fail with the error (false).
    answer_fallback: bool = True
    # The links compile writes between articles (compile/autolink.py): "markdown", [text](page.md)
    # relative to the article; or "wikilink", [[path|text]] (an Obsidian vault that uses them).
    link_style: str = "markdown"
    debug: bool = False

    @property
    def offline(self) -> bool:
        """True when no model is configured: every answer comes from the lexical engine."""
        return not self.model

    @property
    def effective_compile_model(self) -> str | None:
        return self.compile_model or self.model

    def with_overrides(self, **changes: Any) -> "Settings":
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


_INT_FIELDS = {"max_retries", "breaker_failures", "concurrency", "select_budget", "context_window", "read_budget", "max_pages",
               "serve_concurrency", "serve_streams", "stream_concurrency", "user_concurrency", "user_rate",
               "user_streams", "user_vote_rate", "feedback_user_votes", "feedback_days", "max_rounds", "max_calls"}
_ZERO_ALLOWED = {"max_retries", "breaker_failures", "user_concurrency", "user_rate", "user_streams", "user_vote_rate"}
_FLOAT_FIELDS = {"timeout", "call_deadline", "breaker_cooldown"}
_BOOL_FIELDS = {"cache", "debug", "direct_http", "answer_fallback"}
_PATH_FIELDS = {"kb", "prompts_dir"}
_CHOICE_FIELDS = {"navigation": ("shortlist", "topics"), "link_style": ("markdown", "wikilink")}


def _coerce(name: str, value: Any, origin: str) -> Any:
    """Setting ``name``'s value (from ``origin``: kaas.toml, the environment, an option) as its
    type; None when unset or empty; ``ConfigError`` naming the origin when it is not valid."""
    if value is None or value == "":
        return None
    try:
        if name in _INT_FIELDS:
            return _whole_number(name, value)
        if name in _FLOAT_FIELDS:
            return _positive_number(value)
        if name in _BOOL_FIELDS:
            return _flag(value)
        if name in _CHOICE_FIELDS:
            return _choice(name, value)
        if name in _PATH_FIELDS:
            return Path(str(value)).expanduser()
        return str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{origin}: invalid value for {name!r}: {value!r} ({exc})") from None


def _whole_number(name: str, value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError("expected a whole number")  # int() would read true as 1, 2.9 as 2
    number = int(value)
    if number < 0 or (number == 0 and name not in _ZERO_ALLOWED):
        raise ValueError("must be positive")
    return number


def _positive_number(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("expected a number")
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise ValueError("must be a positive number")  # nan and inf reach the model client otherwise
    return number


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off"}:
        return False
    raise ValueError("expected true or false")


def _choice(name: str, value: Any) -> str:
    text = str(value).strip().lower()
    if text not in _CHOICE_FIELDS[name]:
        raise ValueError("expected " + " or ".join(_CHOICE_FIELDS[name]))
    return text


def read_config_text(path: Path) -> str:
    """The text of a ``kaas.toml``: a regular file of at most ``MAX_CONFIG_BYTES``, UTF-8 (a FIFO
    in its place is refused, not waited on). Raises OSError (FileNotFoundError when there is
    none) or UnicodeDecodeError."""
    return read_regular_bytes(path, MAX_CONFIG_BYTES).decode("utf-8")


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(read_config_text(path))
    except FileNotFoundError:
        return {}
    except OSError as exc:  # a folder or FIFO named kaas.toml, permission denied, too large
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    known = {f.name for f in fields(Settings)} - {"kb"}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key == "users":  # API users and their groups: read per request by kb_ai.store.users
            continue
        name = key.lower().removeprefix("kaas_")
        if name not in known:
            raise ConfigError(f"{path}: unknown setting {key!r} (known: {', '.join(sorted(known))})")
        values[name] = _coerce(name, value, str(path))
    return values


def load_settings(kb: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Resolve settings for the knowledge base at ``kb`` (or ``KAAS_KB``, or the current folder)."""
    env = os.environ if env is None else env
    kb_value = kb if kb is not None else env.get("KAAS_KB") or Path.cwd()
    kb_path = Path(kb_value).expanduser().resolve()
    values: dict[str, Any] = _read_toml(kb_path / CONFIG_FILE)
    for f in fields(Settings):
        if f.name == "kb":
            continue
        raw = env.get(f"KAAS_{f.name.upper()}")
        if raw is not None and raw != "":
            values[f.name] = _coerce(f.name, raw, f"KAAS_{f.name.upper()}")
    values = {k: v for k, v in values.items() if v is not None}
    if "prompts_dir" in values and not values["prompts_dir"].is_absolute():
        values["prompts_dir"] = (kb_path / values["prompts_dir"]).resolve()
    return Settings(kb=kb_path, **values)
