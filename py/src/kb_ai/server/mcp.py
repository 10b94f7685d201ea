"""The MCP server: ``ask``, ``read_page`` and ``list_pages`` (read-only) and ``ask_and_save``
(which files the answer into the wiki) for agents.

Built with the official SDK's ``MCPServer`` (mcp 2.x). The same ``AskService`` as the CLI and
the HTTP server answers; this module only shapes the results for MCP: structured content with
a published output schema, plus a readable text form that lists the sources. A bad argument
or a wiki problem is a tool error result the calling model can act on, never a crashed server.
Served over stdio by ``kaas mcp`` (protocol only on stdout; logs go to stderr) and over
streamable HTTP at ``/mcp`` inside ``kaas serve``.
"""

from __future__ import annotations

import logging
import time
from contextlib import asynccontextmanager, contextmanager
from typing import Annotated, Callable, Iterator

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field
from starlette.responses import JSONResponse

from kb_ai import __version__
from kb_ai.config import Settings
from kb_ai.errors import KaasError, LimitedError
from kb_ai.navigate.ask import MAX_PAGES_PER_QUESTION, AskService, build_service
from kb_ai.navigate.records import AskEvent, AskRequest, AskResult
from kb_ai.navigate.records import ask as ask_question
from kb_ai.navigate.save import save_answer
from kb_ai.server.compile_view import told
from kb_ai.server.guard import READER_KEY
from kb_ai.server.limits import UserLimits
from kb_ai.store.backlinks import links_in, page_links
from kb_ai.store.access import OWNER, Reader
from kb_ai.store.catalog import CatalogEntry, entry_from_article
from kb_ai.store.pages import load_page

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "A wiki compiled by KaaS. Use `ask` for a cited answer to a question (it selects and reads the "
    "relevant pages itself), or navigate yourself with `list_pages` (the catalog: path, title, "
    "one-line summary) and `read_page` (one article's Markdown). Citations are [Title](path) with "
    "paths relative to the wiki; only pages that were read are returned as citations. "
    "`ask_and_save` answers like `ask` and also files the answer into the wiki (it writes a page)."
)
PROGRESS_INTERVAL = 0.5  # seconds between progress notifications while an answer streams


class PageRef(BaseModel):
    path: str
    title: str


class Passage(BaseModel):
    anchor: str | None = Field(description="id of the heading the passage is under in the rendered page (/wiki/<path>#<anchor>); null: the page's lead")
    heading: str | None
    quote: str = Field(description="the passage as a reader sees it: text of the page, never of the answer")
    start: int = Field(description="offset of the passage in the page body (frontmatter removed)")
    end: int
    links: list[int] = Field(description="which links to this page in the answer cite it (0: the first)")


class CitationRef(PageRef):
    """A cited page and where in it: the first passage at the top, every passage in ``passages``."""

    anchor: str | None = None
    heading: str | None = None
    quote: str | None = None
    start: int | None = None
    end: int | None = None
    passages: list[Passage] = Field(default_factory=list)


class OfflineNote(BaseModel):
    reason: str
    message: str
class ReadingRound(BaseModel):
    round: int
    why: str = Field(description="why these pages were read")
    added: list[str] = Field(description="paths of the pages this round read")
    usage: dict[str, int] = Field(default_factory=dict, description="model calls and tokens this round cost")


class AskOutput(BaseModel):
    answer: str
    citations: list[CitationRef]
    pages: list[PageRef]
    suggestions: list[str] = Field(default_factory=list)
    mode: str = Field(description="'llm' or 'offline'")
    notices: list[str] = Field(default_factory=list, description="fallbacks, trimmed pages, dropped citations")
    invalid_citations: list[str] = Field(default_factory=list)
    saved_path: str | None = Field(default=None, description="where ask_and_save filed the answer (None for ask, or when it could not be saved)")
    rounds: list[ReadingRound] = Field(default_factory=list, description="the rounds of reading: round 2 and later read "
                                       "the pages the pages read led to (multi-hop)")
    abstained: bool = Field(default=False, description="true when the answer is that the wiki does not cover the question")
    related: list[PageRef] = Field(default_factory=list, description="with abstained: the closest pages, related but not an answer")
    offline: OfflineNote | None = Field(default=None, description="set when the model failed and the answer is the offline extract of the pages read")


# A page's record as MCP publishes it: the fields of ``CatalogEntry.record()`` (the SDK needs
# pydantic models for the output schemas), built from the record and nothing else.
class CatalogLine(BaseModel):
    path: str
    title: str
    summary: str
    topic: str

    @classmethod
    def of(cls, entry: CatalogEntry) -> "CatalogLine":
        return cls(**entry.record())


class PageOutput(CatalogLine):
    frontmatter: dict
    markdown: str
    # catalog paths of the pages this one links to and of those linking to it, as the reader
    # may know them (``store.backlinks``): pages the reader may not read are never listed
    links_out: list[str] = []
    links_in: list[str] = []


class PageList(BaseModel):
    pages: list[CatalogLine]
    topics: list[str]
    total: int


# The arguments `ask` and `ask_and_save` share.
Question = Annotated[str, Field(description="The question, in natural language.")]
Paths = Annotated[list[str] | None, Field(
    description=f"Read exactly these pages (paths from list_pages, at most {MAX_PAGES_PER_QUESTION}) instead of selecting.",
    max_length=MAX_PAGES_PER_QUESTION)]
Rewrite = Annotated[bool, Field(description="Rewrite the question into a standalone query first.")]
Suggest = Annotated[bool, Field(description="Also return three follow-up questions.")]
ModelOnly = Annotated[bool, Field(description="Fail when the model cannot answer, instead of answering with the "
                                              "offline extract of the pages read (the default).")]


def _text_form(result: AskResult) -> str:
    lines = [result.answer.rstrip()]
    if result.citations:
        lines += ["", "Sources:"] + [_source_line(c) for c in result.citations]
    if len(result.rounds) > 1:
        lines += ["", "Read in rounds:"] + [f"- round {r['round']}: {r['why']} ({', '.join(r['added'])})"
                                            for r in result.rounds]
    if result.suggestions:
        lines += ["", "Follow-up questions:"] + [f"- {q}" for q in result.suggestions]
    if result.notices:
        lines += ["", "Notes:"] + [f"- {n}" for n in result.notices]
    if result.saved_path:
        lines += ["", f"Saved as {result.saved_path}."]
    return "\n".join(lines)


def _source_line(citation: dict) -> str:
    """A cited page, with where in it when known: ``- Title (path#anchor): "quote"``."""
    where = citation["path"] + (f"#{citation['anchor']}" if citation.get("anchor") else "")
    quote = f': "{citation["quote"]}"' if citation.get("quote") else ""
    return f"- {citation['title']} ({where}){quote}"


def _tool_error(exc: KaasError, reader: Reader) -> ToolError:
    exc = told(reader, exc)  # as this reader may hear it (compile_view)
    return ToolError(f"{exc.message} [{exc.code}]")


StdioReader = Reader | Callable[[], Reader]


def build_mcp_server(settings: Settings, service: AskService | None = None, *,
                     stdio_reader: StdioReader = OWNER, limits: UserLimits | None = None) -> MCPServer:
    """An MCP server answering from the knowledge base in ``settings``. Over stdio, tools act as
    ``stdio_reader`` (the owner unless ``kaas mcp --user NAME``, which passes a function that
    resolves that user from the current kaas.toml on every call); over HTTP, as the token's user.
    Each answer is counted in ``limits`` (the app's, over HTTP; else this server's own) as its
    reader's answer in flight and question while it runs (server/limits.py), and is cancelled
    when the HTTP request that asked for it ends first (``_cancelled_with_request``)."""
    service = service or build_service(settings)
    limits = limits or UserLimits.of(settings)
    server = MCPServer(name="kaas", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")

    async def answer(ctx: Context, question: str, paths: list[str] | None, rewrite: bool,
                     suggest: bool, model_only: bool = False) -> tuple[AskResult, Reader]:
        if not question or not question.strip():
            raise ToolError("the question is empty: pass the question to answer as `question`")
        request = AskRequest(question=question, rewrite=rewrite, suggest=suggest, paths=paths or None,
                             reader=_reader(ctx, stdio_reader), model_only=model_only)
        result: AskResult | None = None
        tokens, chars, last_report = 0, 0, 0.0

        async def report(event: AskEvent) -> None:
            nonlocal tokens, chars, last_report
            if event.name == "pages":
                await _progress(ctx, 1, f"reading {len(event.data['pages'])} pages")
            elif event.name == "token":
                tokens, chars = tokens + 1, chars + len(event.data["text"])
                now = time.monotonic()
                if now - last_report >= PROGRESS_INTERVAL:
                    last_report = now
                    await _progress(ctx, 2 + tokens, f"answering ({chars} characters so far)")

        try:
            with limits.held(request.reader, answer=True, rated=True), _cancelled_with_request(ctx):
                result = await ask_question(service, request, on_event=report)
        except LimitedError as exc:  # before any model call
            raise _tool_error(exc, request.reader) from None
        if result is None:  # cancelled: its request is gone, and nobody can receive the answer
            raise ToolError("the request that asked for this answer was closed before it was ready [cancelled]")
        if result.error:
            raise ToolError(f"{result.error['message']} [{result.error['code']}]")
        return result, request.reader

    ask_description = (
        "Answer a question from the wiki with inline citations [Title](path). Selects the relevant "
        "pages itself unless `paths` names the pages to read. Says so when the wiki does not cover it."
    )

    @server.tool(
        description=ask_description + " Changes nothing.",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    async def ask(
        question: Question,
        ctx: Context,
        paths: Paths = None,
        rewrite: Rewrite = False,
        suggest: Suggest = False,
        model_only: ModelOnly = False,
    ) -> Annotated[CallToolResult, AskOutput]:
        result, _ = await answer(ctx, question, paths, rewrite, suggest, model_only)
        return _ask_output(result)

    @server.tool(
        description=ask_description + " Then files the answer into the wiki's answers/ folder as a new page "
        "(navigation only, never cited as evidence; readable only by those who may read every page it was made from) "
        "and returns its path as `saved_path`.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                    open_world_hint=False),
    )
    async def ask_and_save(
        question: Question,
        ctx: Context,
        paths: Paths = None,
        rewrite: Rewrite = False,
        suggest: Suggest = False,
        model_only: ModelOnly = False,
    ) -> Annotated[CallToolResult, AskOutput]:
        result, reader = await answer(ctx, question, paths, rewrite, suggest, model_only)
        try:
            result.saved_path = await anyio.to_thread.run_sync(
                lambda: save_answer(service.kb, question, result, reader=reader))
        except KaasError as exc:
            result.notices.append(told(reader, exc).message)
        return _ask_output(result)

    @server.tool(
        description="Read one wiki page: its frontmatter and full Markdown. `path` is a catalog path such as `topic/page.md`.",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    async def read_page(
        path: Annotated[str, Field(description="Page path relative to the wiki, as listed by list_pages.")],
        ctx: Context,
    ) -> Annotated[CallToolResult, PageOutput]:
        reader = _reader(ctx, stdio_reader)

        def read():  # file reads: in a worker thread, never on the event loop
            # The one page reader of every interface: a hidden page is exactly a missing one.
            loaded = load_page(service.kb, path, reader)
            full = service.kb.catalog()
            catalog = full.visible_to(reader)
            out = page_links(loaded.article.path, loaded.article.body, catalog)
            return loaded, catalog, out, links_in(service.kb.wiki_dir, full, loaded.article.path, reader)

        try:
            loaded, catalog, out, into = await anyio.to_thread.run_sync(read)
        except KaasError as exc:
            exc = told(reader, exc)
            raise ToolError(f"{exc.message}; call list_pages to see the page paths [{exc.code}]") from None
        article = loaded.article
        entry = catalog.get(article.path)
        record = entry_from_article(article).record()
        if entry is not None:
            record["title"] = entry.title
        page = PageOutput(**record, frontmatter=article.frontmatter_json, markdown=article.body,
                          links_out=out, links_in=[p for p in into if p in catalog])
        return CallToolResult(content=[TextContent(type="text", text=f"# {page.title} ({page.path})\n\n{article.body}")],
                              structured_content=page.model_dump(mode="json"))

    @server.tool(
        description="List the wiki's pages (the catalog: path, title, one-line summary), optionally only one topic.",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    async def list_pages(
        ctx: Context,
        topic: Annotated[str | None, Field(description="Only pages of this topic.")] = None,
    ) -> Annotated[CallToolResult, PageList]:
        reader = _reader(ctx, stdio_reader)
        try:
            catalog = await anyio.to_thread.run_sync(lambda: service.kb.catalog().visible_to(reader))
        except KaasError as exc:
            raise _tool_error(exc, reader) from None
        entries = catalog.entries
        if topic:
            entries = [e for e in entries if e.topic.casefold() == topic.strip().casefold()]
            if not entries:
                raise ToolError(f"no topic {topic!r}; topics: {', '.join(catalog.topics) or '(none)'}")
        listing = PageList(
            pages=[CatalogLine.of(e) for e in entries],
            topics=catalog.topics, total=len(catalog),
        )
        text = "\n".join(e.line() for e in entries) or "(the catalog is empty)"
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=listing.model_dump(mode="json"))

    return server


def _ask_output(result: AskResult) -> CallToolResult:
    structured = AskOutput(
        answer=result.answer, citations=result.citations,
        pages=[{"path": p["path"], "title": p["title"]} for p in result.pages],
        suggestions=result.suggestions, mode=result.mode, notices=result.notices,
        invalid_citations=result.invalid_citations, saved_path=result.saved_path,
        rounds=[{"round": r["round"], "why": r["why"], "added": r["added"],
                 "usage": {k: v for k, v in r["usage"].items() if isinstance(v, int)}} for r in result.rounds],
        abstained=result.abstained, related=result.related, offline=result.offline,
    )
    return CallToolResult(content=[TextContent(type="text", text=_text_form(result))],
                          structured_content=structured.model_dump(mode="json"))


def _reader(ctx: Context, stdio_reader: StdioReader) -> Reader:
    """Who calls: over HTTP, the reader the server's guard authenticated; over stdio, the reader
    `kaas mcp` was started as, resolved again for this call (a user revoked in kaas.toml, or a
    users table that is gone or broken, is refused now, not at the next restart). An HTTP call
    the guard did not mark is refused."""
    request = getattr(ctx.request_context, "request", None)
    if request is None:
        if isinstance(stdio_reader, Reader):
            return stdio_reader
        try:
            return stdio_reader()
        except KaasError as exc:
            log.error("refused an MCP call: %s", exc.message)
            raise ToolError(f"{exc.message} [unauthorized]") from None
    reader = getattr(request, "scope", {}).get(READER_KEY)
    if reader is None:
        raise ToolError("this request was not authenticated [unauthorized]")
    return reader


REQUEST_WORK_KEY = "kaas.mcp_work"  # the scope key of the work a request to /mcp started


class RequestWork:
    """The tool calls one HTTP request to ``/mcp`` started, each in a cancel scope that the end
    of the request cancels. An MCP session runs a tool in a task of its own, which outlives
    the POST that asked for it; no event store is kept (``MCPHttpEndpoint``), so once the POST
    is gone nobody can receive the result, and the answer would run on (at the model, holding
    its reader's slot) for nobody."""

    def __init__(self) -> None:
        self.ended = False
        self._scopes: set[anyio.CancelScope] = set()

    @contextmanager
    def scope(self) -> Iterator[anyio.CancelScope]:
        cancel = anyio.CancelScope()
        if self.ended:  # the request was gone before its tool call began
            cancel.cancel()
        self._scopes.add(cancel)
        try:
            with cancel:
                yield cancel
        finally:
            self._scopes.discard(cancel)

    def end(self) -> None:
        self.ended = True
        for cancel in list(self._scopes):
            cancel.cancel()


@contextmanager
def _cancelled_with_request(ctx: Context) -> Iterator[None]:
    """The block, cancelled (it ends early, without raising) when the HTTP request of this tool
    call ends (``RequestWork``). Over stdio and in-process there is no such request: the block
    just runs (the caller's connection is the process's own)."""
    request = getattr(ctx.request_context, "request", None)
    work = getattr(request, "scope", {}).get(REQUEST_WORK_KEY) if request is not None else None
    if work is None:
        yield
        return
    with work.scope():
        yield


async def _progress(ctx: Context, progress: float, message: str) -> None:
    """Progress where the transport allows it; a client that asked for none is not an error."""
    try:
        await ctx.report_progress(progress, None, message)
    except Exception as exc:  # noqa: BLE001 - progress is best-effort by design
        log.debug("progress notification not sent: %s", exc)


class MCPHttpEndpoint:
    """The streamable-HTTP MCP endpoint as an ASGI app to route at ``/mcp`` in the chat app.

    The SDK's session manager can run only once, but an app's lifespan may run several times
    (tests, reloads): ``running()`` builds a fresh server and session manager for each lifespan,
    which the app enters. Host checks and the bearer token are the chat app's guard's job, for
    /mcp as for /api, so the SDK's own DNS-rebinding check is off here rather than done twice
    with two different lists."""

    def __init__(self, settings: Settings, service: AskService, *, stateless: bool = False,
                 limits: UserLimits | None = None):
        self.settings = settings
        self.service = service
        self.limits = limits
        # Stateless: every POST stands alone (no session kept in this process), for a server of
        # several worker processes, where a session's next request may reach another process.
        self.stateless = stateless
        self._app = None

    @asynccontextmanager
    async def running(self):
        server = build_mcp_server(self.settings, self.service, limits=self.limits)
        # No event store: a client cannot resume a dropped stream, so a result whose POST is gone
        # is lost, and RequestWork cancels the work that would make it (with a store, it must not).
        app = server.streamable_http_app(
            streamable_http_path="/mcp", stateless_http=self.stateless,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        async with server.session_manager.run():
            self._app = app
            try:
                yield
            finally:
                self._app = None

    async def __call__(self, scope, receive, send) -> None:
        if self._app is None:
            response = JSONResponse({"error": {"code": "unavailable", "message": "the MCP endpoint is not running"}}, 503)
            await response(scope, receive, send)
            return
        work = scope[REQUEST_WORK_KEY] = RequestWork()
        try:
            await self._app(scope, receive, send)
        finally:
            work.end()  # a tool call of this request still running has nobody to answer


def run_stdio(settings: Settings, reader: StdioReader = OWNER) -> None:
    """Serve MCP over stdin/stdout. Nothing but protocol may reach stdout; a message the SDK
    could not parse gets a JSON-RPC error instead of no answer (``mcp_stdio.py``)."""
    from kb_ai.server.mcp_stdio import run_screened_stdio

    run_screened_stdio(build_mcp_server(settings, stdio_reader=reader))
