"""The wiki over HTTP: the catalog, one article (read and hand-edited), and rendered pages.

Every page is read through ``store.pages.load_page`` (paths normalised first; ``..``, encoded
forms, absolute paths, generated files and symlinks out of ``wiki/`` refused; access applied, a
hidden page answering exactly like a missing one) before anything is shown or written.

A save keeps the person's text exactly as typed (YAML comments, quoting, key order), after
checking that it parses and has a title; it is written atomically, then the wiki is re-indexed
so the catalog (and the navigator) see the change at once.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import anyio
import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from kb_ai.store.lock import CompileLock
from kb_ai.errors import BadRequestError, KaasError, StorageError, UnsafePathError
from kb_ai.server.render import render_markdown, wiki_href
from kb_ai.server.chat import read_json
from kb_ai.server.compile_view import told
from kb_ai.server.guard import reader_of
from kb_ai.store.access import OWNER, Reader
from kb_ai.store.backlinks import links_in
from kb_ai.store.articles import MAX_ARTICLE_BYTES, is_generated, link_on_path, validate_article_text, write_article_text
from kb_ai.store.catalog import Catalog, entry_from_article
from kb_ai.store.frontmatter import split_frontmatter
from kb_ai.files import FileTooLargeError, NotRegularFileError, read_regular_bytes
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.pages import LoadedPage, load_page
from kb_ai.store.paths import normalize_wiki_path, resolve_in

log = logging.getLogger(__name__)

MAX_SAVE_BODY_BYTES = MAX_ARTICLE_BYTES + 64_000


class ForbiddenError(KaasError):
    """The reader may see this page but not do this to it."""

    code = "forbidden"
    http_status = 403


class VersionConflictError(KaasError):
    """The article changed on disk since the editor loaded it."""

    code = "conflict"
    http_status = 409




def error_response(exc: KaasError, reader: Reader) -> JSONResponse:
    """A ``KaasError`` as JSON, with the status its class declares (``errors.py``), as ``reader``
    may hear it (``compile_view.told``: who holds the writer lock only for those who learn of compiles)."""
    exc = told(reader, exc)
    return JSONResponse({"error": {"code": exc.code, "message": exc.message}}, status_code=exc.http_status,
                        headers={"Cache-Control": "no-store"})


def text_version(text: str) -> str:
    """What an editor sends back to say which text it edited (optimistic concurrency)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _exists_in(kb: KnowledgeBase, catalog: Catalog, reader: Reader):
    """Whether a link target exists, as far as ``reader`` may know: for anyone but an admin, a
    link to a page they may not read renders exactly like a link to a missing page."""
    def exists(path: str) -> bool:
        return path in catalog or (reader.admin and not is_generated(path) and (kb.wiki_dir / path).is_file())
    return exists


def page_json(kb: KnowledgeBase, page: LoadedPage, reader: Reader = OWNER) -> dict[str, Any]:
    """``GET /api/pages/<path>``: frontmatter, the full Markdown text, rendered HTML and TOC."""
    article = page.article
    catalog = kb.catalog().visible_to(reader)
    rendered = render_markdown(article.body, from_path=article.path, exists=_exists_in(kb, catalog, reader),
                               names=catalog.wiki_page)
    return {
        **entry_from_article(article).record(),
        "frontmatter": article.frontmatter_json,
        "markdown": page.text,
        "body": article.body,
        "html": rendered.html,
        "toc": [entry.as_dict() for entry in rendered.toc],
        "links": rendered.links,
        "broken_links": rendered.broken_links,
        # the pages this one links to and those linking here, as this reader may know them
        "links_out": [catalog.get(p).record("path", "title") for p in rendered.links if p in catalog],
        "links_in": [catalog.get(p).record("path", "title")
                     for p in links_in(kb.wiki_dir, kb.catalog(), article.path, reader) if p in catalog],
        "warnings": article.warnings,
        "in_catalog": article.path in catalog,
        "version": text_version(page.text),
        "url": wiki_href(article.path),
    }


def catalog_json(kb: KnowledgeBase, mode: str, model: str | None, reader: Reader = OWNER) -> dict[str, Any]:
    """``GET /api/index``: the catalog ``reader`` may see, grouped by topic, in catalog order."""
    catalog = kb.catalog().visible_to(reader)
    topics: dict[str, list[dict[str, str]]] = {}
    for entry in catalog.entries:
        topics.setdefault(entry.topic, []).append(entry.record("path", "title", "summary"))
    return {
        "mode": mode,
        "model": model,
        "articles": len(catalog),
        "topics": [{"topic": name, "pages": pages} for name, pages in topics.items()],
        "warnings": catalog.warnings[:50] if reader.admin else [],  # warnings name files
    }


# -- routes -------------------------------------------------------------------------------------


async def index_endpoint(request: Request) -> Response:
    state = request.app.state.kaas
    try:
        data = await anyio.to_thread.run_sync(catalog_json, state.kb, state.mode, state.settings.model,
                                              reader_of(request))
    except KaasError as exc:
        return error_response(exc, reader_of(request))
    return JSONResponse(data, headers={"Cache-Control": "no-store"})


async def page_endpoint(request: Request) -> Response:
    state = request.app.state.kaas
    raw_path = request.path_params["path"]
    try:
        if request.method in ("PUT", "POST"):
            return await _save(request, raw_path)

        reader = reader_of(request)

        def read() -> dict[str, Any]:
            return page_json(state.kb, load_page(state.kb, raw_path, reader), reader)

        data = await anyio.to_thread.run_sync(read)
    except KaasError as exc:
        return error_response(exc, reader_of(request))
    return Response(json.dumps(data, ensure_ascii=False), media_type="application/json",
                    headers={"Cache-Control": "no-store"})


async def _save(request: Request, raw_path: str) -> Response:
    state = request.app.state.kaas
    kb: KnowledgeBase = state.kb
    reader = reader_of(request)

    def locate() -> tuple[str, Path]:  # file system work: in a worker thread, never on the event loop
        kb.require_wiki()
        if reader.admin:
            rel = normalize_wiki_path(raw_path)
            if is_generated(rel):
                raise UnsafePathError(f"{rel} is generated by kaas, not an article to edit")
            file = resolve_in(kb.wiki_dir, rel)
        else:
            # Readers edit the pages they may read; they do not create pages (a refused name would
            # tell them a hidden page is there). A page they may not read, a missing one and a
            # generated file are the same 404, before anything of the request is looked at.
            current = load_page(kb, raw_path, reader)
            rel, file = current.path, current.file
        if file.exists() and not file.is_file():  # a folder, a FIFO, a socket: never replaced by a save
            raise BadRequestError(f"{rel} is a folder or special file, not an article")
        if link_on_path(kb.wiki_dir, rel):  # an alias of another page: saving must not write into that page
            raise BadRequestError(f"{rel} is a symbolic link (or in a linked folder); kaas never writes through "
                                  "a link: edit the page it points to")
        return rel, file

    rel, file = await anyio.to_thread.run_sync(locate)
    payload = await read_json(request, MAX_SAVE_BODY_BYTES, "the article")
    if not isinstance(payload, dict) or not isinstance(payload.get("markdown"), str):
        raise BadRequestError("send {\"markdown\": <the article's full text>, \"version\": <from GET>}")
    expected = payload.get("version")
    if expected is not None and not isinstance(expected, str):
        raise BadRequestError("'version' must be a string")
    text = payload["markdown"].replace("\r\n", "\n").rstrip("\n") + "\n"
    edited = await anyio.to_thread.run_sync(validate_article_text, text, rel)  # parsing: CPU work, off the loop

    def write_and_index() -> bool:
        with CompileLock(kb.state_dir):
            if not reader.admin:
                # Checked again under the lock: an admin may have restricted the page meanwhile.
                current = load_page(kb, rel, reader)
                if edited.visibility != current.article.visibility:
                    raise ForbiddenError("only an admin can change who may read a page (the access field, "
                                         "or the kind, read and citations of a saved answer)")
            created = not file.exists()
            if not created and not file.is_file():  # became a folder or FIFO since the check above
                raise BadRequestError(f"{rel} is a folder or special file, not an article")
            if expected is not None:
                try:  # what is opened is checked: a FIFO swapped in since the check above is never waited on
                    current = read_regular_bytes(file, MAX_ARTICLE_BYTES + 1) if not created else b""
                except (NotRegularFileError, IsADirectoryError):
                    raise BadRequestError(f"{rel} is a folder or special file, not an article") from None
                except FileTooLargeError:
                    current = b""  # cannot be the version the client opened
                current_text = current.decode("utf-8", errors="replace")
                if text_version(current_text) != expected:
                    raise VersionConflictError(
                        f"{rel} changed on disk since it was opened; reload it and apply your edit again"
                    )
            try:
                write_article_text(kb.wiki_dir, rel, text)
            except OSError as exc:
                raise StorageError(f"{rel} was not saved: {StorageError.from_os_error(exc).message}") from None
            try:
                kb.reindex()
            except OSError as exc:
                raise StorageError(f"{rel} was saved, but the catalog could not be updated "
                                   f"({StorageError.from_os_error(exc).message}); run `kaas index`") from None
        return created

    async with state.save_lock:
        try:
            created = await anyio.to_thread.run_sync(write_and_index)
        except OSError as exc:  # reading the current text, taking the lock
            raise StorageError(f"{rel} was not saved: {StorageError.from_os_error(exc, 'access').message}") from None
        await anyio.to_thread.run_sync(state.watcher_seen_now)
    log.info("saved %s (%s)", rel, "created" if created else "edited")

    def reread() -> dict[str, Any]:
        page = load_page(kb, rel, reader)
        data = page_json(kb, page, reader)
        data["saved"] = True
        # The saved page's own warnings, and nothing of any other page (re-indexing reads them all).
        data["index_warnings"] = list(page.article.warnings)
        return data

    data = await anyio.to_thread.run_sync(reread)
    return Response(json.dumps(data, ensure_ascii=False), media_type="application/json",
                    status_code=201 if created else 200, headers={"Cache-Control": "no-store"})


async def preview_endpoint(request: Request) -> Response:
    """``POST /api/render`` ``{"path", "markdown"}``: the editor's preview, the HTML a save of this
    text would show, by the page view's renderer and sanitizer (``render_markdown``). Nothing is
    written. ``path`` is the page edited: one this reader may read (an admin: any article path,
    a new one too), and links are resolved from it as this reader may know them."""
    state = request.app.state.kaas
    reader = reader_of(request)
    try:
        payload = await read_json(request, MAX_SAVE_BODY_BYTES, "the article")
        if not isinstance(payload, dict) or not isinstance(payload.get("markdown"), str) \
                or not isinstance(payload.get("path"), str):
            raise BadRequestError("send {\"path\": <the page edited>, \"markdown\": <its text>}")

        def render() -> dict[str, Any]:
            kb: KnowledgeBase = state.kb
            if reader.admin:
                rel = normalize_wiki_path(payload["path"])
                if is_generated(rel):
                    raise UnsafePathError(f"{rel} is generated by kaas, not an article to edit")
            else:
                rel = load_page(kb, payload["path"], reader).path
            _meta, body = split_frontmatter(payload["markdown"].replace("\r\n", "\n"), rel)
            catalog = kb.catalog().visible_to(reader)
            rendered = render_markdown(body, from_path=rel, exists=_exists_in(kb, catalog, reader))
            return {"html": rendered.html, "toc": [entry.as_dict() for entry in rendered.toc],
                    "broken_links": rendered.broken_links}

        data = await anyio.to_thread.run_sync(render)
    except KaasError as exc:
        return error_response(exc, reader)
    return JSONResponse(data, headers={"Cache-Control": "no-store"})


# -- server-rendered pages ------------------------------------------------------------------------


def template_env(web_dir: Path) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(web_dir / "templates")),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _html_error(request: Request, exc: KaasError) -> HTMLResponse:
    exc = told(reader_of(request), exc)
    template = request.app.state.kaas.templates.get_template("error.html")
    return HTMLResponse(template.render(status=exc.http_status, message=exc.message), status_code=exc.http_status,
                        headers={"Cache-Control": "no-store"})


async def wiki_page_endpoint(request: Request) -> Response:
    state = request.app.state.kaas
    raw_path = request.path_params.get("path", "")
    reader = reader_of(request)
    try:
        if not raw_path:
            def render_catalog() -> str:  # every line of this reader's catalog: off the event loop
                catalog = state.kb.catalog().visible_to(reader)
                topics: dict[str, list] = {}
                for entry in catalog.entries:
                    topics.setdefault(entry.topic, []).append(entry)
                return state.templates.get_template("catalog.html").render(
                    topics=topics, count=len(catalog), href=wiki_href, mode=state.mode)

            html = await anyio.to_thread.run_sync(render_catalog)
            return HTMLResponse(html, headers={"Cache-Control": "no-store"})  # this reader's catalog

        def read() -> dict[str, Any]:
            return page_json(state.kb, load_page(state.kb, raw_path, reader), reader)

        html = await anyio.to_thread.run_sync(
            lambda: state.templates.get_template("article.html").render(page=read(), mode=state.mode))
    except KaasError as exc:
        return _html_error(request, exc)
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})
