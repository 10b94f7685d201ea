"""``kaas ask``: one question, answered in this process or by a running ``kaas serve`` (its
events streamed or printed as one JSON object; ``--save`` files the answer). Registered on the
``kaas`` group by commands.py."""

from __future__ import annotations

import json
import logging
import sys

import click

from kb_ai.cli.context import _fail, _offline, _reader, _settings, kb_option
from kb_ai.cli.output import say, say_json
from kb_ai.config import Settings
from kb_ai.errors import KaasError, StorageError, exit_code_for

log = logging.getLogger("kb_ai")


@click.command()
@kb_option
@click.argument("question")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of streaming text.")
@click.option("--rewrite", is_flag=True, help="Rewrite the question into a standalone query first.")
@click.option("--suggest", is_flag=True, help="Suggest three follow-up questions.")
@click.option("--pages", "max_pages", type=click.IntRange(1, 50), default=None, help="Select at most N pages.")
@click.option("--page", "paths", multiple=True, help="Read this page (path in wiki/) instead of selecting; repeatable.")
@click.option("--offline", is_flag=True, help="Ignore any configured model: lexical selection, extractive answer.")
@click.option("--debug", is_flag=True, help="Log every prompt and raw model reply to .kaas/logs/llm-trace.jsonl.")
@click.option("--save", is_flag=True, help="File the answer into wiki/answers/ (navigation only, never cited).")
@click.option("--user", "user_name", default=None, metavar="NAME",
              help="Answer as this user of kaas.toml: only the pages their groups may read exist.")
@click.option("--model-only", is_flag=True,
              help="When the model cannot answer, fail (exit 1) instead of answering with the offline extract "
                   "of the pages read (setting answer_fallback = false does the same).")
@click.pass_context
def ask(ctx: click.Context, question: str, as_json: bool, rewrite: bool, suggest: bool, max_pages: int | None,
        paths: tuple[str, ...], offline: bool, debug: bool, save: bool, user_name: str | None,
        model_only: bool) -> None:
    """Answer QUESTION from the wiki, citing the pages it used.

    When `kaas serve` runs for this KB with the same model, the question goes to it (it has the
    catalog, index and model client loaded); otherwise it is answered in this process."""
    from kb_ai.navigate.records import AskRequest

    settings = _settings(ctx, debug=True if debug else None)
    if offline:
        settings = _offline(settings)
    show = _quiet if as_json else _show_event
    reader = _reader(settings, user_name)
    request = AskRequest(question=question, rewrite=rewrite, suggest=suggest, max_pages=max_pages,
                         paths=list(paths) or None, reader=reader,
                         model_only=model_only or not settings.answer_fallback)
    result = _answer(settings, request, show, ask_server=not (paths or debug or user_name))
    save_error = _save(settings, question, result, reader) if save and not result.error else None
    if as_json:  # on error too: scripts get the object with its "error" key, and the exit code
        say_json(json.dumps(result.to_json(), ensure_ascii=False, indent=2))
    if result.error:
        say(f"kaas: error: {result.error['message']}", err=True)
        sys.exit(exit_code_for(result.error["code"]))
    if save_error is not None and as_json:
        _fail(save_error)
    if as_json:
        return
    _print_answer(result)
    if save_error is not None:
        _fail(save_error)


def _quiet(event) -> None:
    """``kaas ask --json``: the events are not shown, the JSON object says it all."""


def _show_event(event) -> None:
    """``kaas ask``: the answer's text as it streams (stdout), notices and a rewritten query (stderr)."""
    if event.name == "token":
        say(event.data["text"], nl=False)
    elif event.name == "notice":
        say(f"kaas: note: {event.data['message']}", err=True)
    elif event.name == "rewrite":
        say(f"kaas: rewritten query: {event.data['query']}", err=True)
    elif event.name == "offline":  # the model failed: the answer is the extract, and why
        say(f"kaas: note: {event.data['message']}", err=True)


OFFLINE_LINE = ("kaas: offline mode (no model configured): the answer quotes the passages of the wiki "
                "that best match the question.")


def _answer(settings: Settings, request, show, *, ask_server: bool):
    """The question's result: from the running `kaas serve` of this KB when ``ask_server`` and
    there is one that answers, else answered in this process (saying why, when the person
    should know that the server declined)."""
    import asyncio  # here, not at the top: most commands never need it

    from kb_ai.navigate.records import AskEvent, ask as ask_question

    server = _running_server(settings) if ask_server else None
    declined: str | None = None  # why the running server did not answer, when the person should know
    if server is not None:
        from kb_ai.server.remote import ServerUnavailable

        try:
            return asyncio.run(ask_question(_ServerEvents(server, settings), request, on_event=show))
        except ServerUnavailable as exc:
            log.info("kaas serve at %s did not answer (%s); answering here", server["url"], exc)
            if exc.notice:
                declined = f"Answered here, not by kaas serve: {exc}."
                show(AskEvent("notice", {"message": declined}))
    from kb_ai.navigate.ask import build_service

    try:
        service = build_service(settings)
    except KaasError as exc:
        _fail(exc)
    result = asyncio.run(ask_question(service, request, on_event=show))
    if declined:
        result.notices.insert(0, declined)
    return result


def _save(settings: Settings, question: str, result, reader) -> StorageError | None:
    """``kaas ask --save``: file the answer into wiki/answers/. A storage failure (disk full, ...)
    is returned, for the command to end with it as an error; any other refusal is a note."""
    from kb_ai.navigate.save import save_answer
    from kb_ai.store.kb import KnowledgeBase

    try:
        result.saved_path = save_answer(KnowledgeBase(settings.kb), question, result, reader=reader)
    except StorageError as exc:  # asked to save and could not (disk full, ...): an error, exit 1
        result.notices.append(exc.message)
        return exc
    except KaasError as exc:
        result.notices.append(exc.message)
        say(f"kaas: note: {exc.message}", err=True)
    else:
        say(f"kaas: saved the answer as wiki/{result.saved_path}", err=True)
    return None


def _print_answer(result) -> None:
    """After the streamed answer: its sources, suggested questions and (stderr) its mode: the
    model's usage, or that it was answered offline (never a line of the answer itself)."""
    if not result.answer.endswith("\n"):
        say()
    if result.citations:
        say("\nSources:")
        for citation in result.citations:
            say(f"  - {citation['title']} (wiki/{citation['path']})")
            for passage in citation.get("passages", []):
                say(_passage_line(passage))
    if result.suggestions:
        say("\nYou could ask next:")
        for suggestion in result.suggestions:
            say(f"  - {suggestion}")
    usage = result.usage
    if usage.get("mode") == "llm":
        cached = f", {usage['cache_hits']} more answered from the cache" if usage.get("cache_hits") else ""
        failed = f" ({usage['failed_calls']} failed)" if usage.get("failed_calls") else ""
        say(
            f"kaas: {usage['llm_calls']} LLM calls{failed}{cached}; "
            f"{usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion tokens, ${usage['cost_usd']:.4f}",
            err=True,
        )
    elif usage.get("mode") == "offline" and result.offline is None:  # a model that failed said so already
        say(OFFLINE_LINE, err=True)


QUOTE_CHARS = 160  # of a cited passage, under its source


def _passage_line(passage: dict) -> str:
    """A cited passage under its source: ``#anchor "quote"`` (the quote clipped at a word)."""
    quote = " ".join(str(passage.get("quote", "")).split())
    if len(quote) > QUOTE_CHARS:
        quote = quote[:QUOTE_CHARS - 1].rsplit(" ", 1)[0] + "…"
    where = f"#{passage['anchor']} " if passage.get("anchor") else ""
    return f'      {where}"{quote}"'


def _running_server(settings: Settings) -> dict | None:
    """The running `kaas serve` of this KB with this model, if any (``server.remote.running_server``)."""
    from kb_ai.server.remote import running_server

    # KnowledgeBase(...).state_dir, spelled out: importing the store here would cost this fast path.
    return running_server(settings.kb / ".kaas", settings.model)


class _ServerEvents:
    """A running `kaas serve` as the source of a question's events (``records.ask`` folds them):
    the same events as in-process, read from its SSE stream. A server that takes no question
    raises ``server.remote.ServerUnavailable`` (the question is then answered here); one that breaks
    off or closes the answer before its end ends it with an ``error`` event, keeping what came."""

    def __init__(self, server: dict, settings: Settings):
        self.server = server
        self.token = settings.api_token
        self.deadline = _remote_deadline(settings)
        self.mode = "offline" if settings.offline else "llm"

    async def events(self, request):
        from kb_ai.navigate.records import AskEvent
        from kb_ai.server.remote import ask_events_remote

        url = self.server["url"]
        body = {"question": request.question, "rewrite": request.rewrite, "suggest": request.suggest,
                **({"max_pages": request.max_pages} if request.max_pages else {}),
                **({"model_only": True} if request.model_only else {})}
        ended = False
        try:
            for name, data in ask_events_remote(self.server, body, self.token, deadline=self.deadline):
                yield AskEvent(name, data if isinstance(data, dict) else {})
                ended = ended or name in ("done", "error")
        except (OSError, ValueError) as exc:
            yield AskEvent("error", {"code": "llm_unreachable",
                                     "message": f"kaas serve at {url} broke off the answer ({exc})"})
            return
        if not ended:
            yield AskEvent("error", {"code": "llm_unreachable",
                                     "message": f"kaas serve at {url} closed the answer before it ended"})
        log.info("answered by kaas serve at %s", url)


def _remote_deadline(settings: Settings) -> float:
    """How long an answer from `kaas serve` may take in all: its model calls (rewrite, topics,
    selection, answer, suggestions), each bounded by the call deadline, and a minute more."""
    per_call = settings.call_deadline or 3 * settings.timeout
    return 5 * per_call + 60
