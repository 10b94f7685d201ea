"""The ``kaas`` command line. Thin: it parses options, calls the services, prints results.

Errors a person can cause are one line on stderr and a non-zero exit, never a traceback.
Everything printed goes through ``cli.output.say`` (text: no escape sequence or control
character of a page, a source, a model reply or a file name reaches the terminal) or ``say_json``
(the exact JSON value, with the controls JSON leaves raw escaped); log lines through the same
filter (``untrusted_text.terminal_safe``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from kb_ai import __version__
from kb_ai.cli.context import _fail, _offline, _reader, _settings, kb_option, setup_logging
from kb_ai.cli.output import say, say_json
from kb_ai.errors import KaasError, StorageError


class _KaasGroup(click.Group):
    """A file-system error that escapes a command (disk full, permission denied) is a one-line
    message and exit 1, like every other error a person can hit, not a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except OSError as exc:
            _fail(StorageError.from_os_error(exc, "write" if _is_write_error(exc) else "access"))


def _is_write_error(exc: OSError) -> bool:
    import errno

    return exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG)


@click.group(cls=_KaasGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--kb", type=click.Path(file_okay=False, path_type=Path), default=None, envvar="KAAS_KB",
              help="Knowledge base folder (default: current folder).")
@click.option("-v", "--verbose", is_flag=True, help="Log more to stderr.")
@click.version_option(__version__, prog_name="kaas")
@click.pass_context
def cli(ctx: click.Context, kb: Path | None, verbose: bool) -> None:
    """KaaS: compile documents into a Markdown wiki and ask it questions with cited answers."""
    setup_logging(verbose)
    ctx.obj = {"kb": kb}


@cli.command()
@kb_option
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.pass_context
def init(ctx: click.Context, directory: Path | None) -> None:
    """Create a knowledge base skeleton (raw/, wiki/, kaas.toml) in DIRECTORY."""
    from kb_ai.store.kb import init_kb

    target = directory or ctx.obj["kb"] or Path.cwd()
    try:
        created = init_kb(target)
    except (KaasError, OSError) as exc:
        _fail(exc if isinstance(exc, KaasError) else KaasError(f"cannot create {target}: {exc}"))
    for path in created:
        say(f"created {path}")
    if not created:
        say(f"{target} is already a knowledge base; nothing changed")
    say("")
    say(next_steps(target))


def next_steps(target: Path) -> str:
    """What a new user does after ``kaas init``: add sources, compile, ask."""
    kb = "" if Path(target).resolve() == Path.cwd().resolve() else f" --kb {_shell_word(str(target))}"
    return (
        "next:\n"
        f"  1. put documents (md, rst, txt, html, pdf, docx, pptx, xlsx, csv, odt, epub, rtf, zip/tar) in {Path(target) / 'raw'}/, or: kaas{kb} add FILE|URL ...\n"
        f"  2. kaas{kb} compile\n"
        f"  3. kaas{kb} ask \"your question\"   (or kaas{kb} serve for the chat in a browser)"
    )


def _shell_word(text: str) -> str:
    import shlex

    return shlex.quote(text)


@cli.command()
@kb_option
@click.argument("sources", nargs=-1, required=True, metavar="PATH|URL...")
@click.option("--to", "folder", default="", metavar="FOLDER",
              help="Folder inside raw/ to put files in (its name is the articles' topic hint).")
@click.option("--replace", is_flag=True,
              help="A file whose name is taken replaces it (a revision) instead of being stored as NAME-2.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per source.")
@click.pass_context
def add(ctx: click.Context, sources: tuple[str, ...], folder: str, replace: bool, as_json: bool) -> None:
    """Copy files or folders, or fetch web pages (http/https URLs), into raw/; then run `kaas compile`.

    A folder is copied recursively into raw/[FOLDER/]NAME/, by the rules compile reads raw/ by:
    what is not a document (images, code, build files, hidden files, what raw/.kaasignore
    ignores) is left out and reported by reason. A web page is stored as Markdown in raw/web/
    with its title, source_url and fetched_at; adding the same URL again updates that file (a
    revision). Exit 1 if any source was refused."""
    from kb_ai.store.kb import KnowledgeBase

    kb = KnowledgeBase(_settings(ctx).kb)
    if not kb.raw_dir.is_dir():
        _fail(KaasError(f"no raw/ folder in {kb.root} (run `kaas init` there, or pass --kb DIR)"))
    tally = {"failed": 0, "stored": 0}
    for source in sources:
        _add_one(kb.raw_dir, source, folder, replace, as_json, tally)
    if tally["stored"] and not as_json:
        say("next: kaas compile", err=True)
    sys.exit(1 if tally["failed"] else 0)


def _add_one(raw_dir: Path, source: str, folder: str, replace: bool, as_json: bool, tally: dict[str, int]) -> None:
    """One argument of ``kaas add``: a URL, a folder or a file; what was stored is counted in
    ``tally`` (``stored``: added or updated), what was refused too (``failed``)."""
    from kb_ai.compile.add import add_file, add_folder
    from kb_ai.compile.fetch import add_url

    def refused(message: str, **extra: str) -> None:
        tally["failed"] += 1
        if as_json:
            say_json(json.dumps({"source": source, **extra, "error": message}, ensure_ascii=False))
        else:
            say(f"kaas: error: {message}", err=True)

    try:
        if source.lower().startswith(("http://", "https://")) or "://" in source:
            results = [add_url(raw_dir, source)]
        elif Path(source).is_dir():
            done = add_folder(raw_dir, Path(source), folder=folder, replace=replace)
            results = done.added
            for file, message in done.refused:
                refused(message, file=file)
            _say_left_out(source, done.left_out, as_json)
            if not done.added and not done.refused:
                refused(f"{source}: nothing in it is a document kaas compile reads")
        else:
            results = [add_file(raw_dir, Path(source), folder=folder, replace=replace)]
    except KaasError as exc:
        refused(exc.message)
        return
    for added in results:
        tally["stored"] += added.status in ("added", "updated")
        if as_json:
            say_json(json.dumps({"source": source, **added.to_json()}, ensure_ascii=False))
        else:
            extra = f" ({added.title})" if added.title else ""
            note = f"; {added.note}" if added.note else ""
            say(f"{added.status} {added.path}{extra}{note}")


def _say_left_out(source: str, groups: list[dict], as_json: bool) -> None:
    """What a folder held that is not a document: one line per reason."""
    if not groups:
        return
    if as_json:
        say_json(json.dumps({"source": source, "left_out": groups}, ensure_ascii=False))
        return
    from kb_ai.compile.kaasignore import left_out_lines
    from kb_ai.compile.report import LEFT_OUT_HINT

    for line in left_out_lines(groups):
        say(f"{source}: {line}", err=True)
    say(f"{source}: {LEFT_OUT_HINT}", err=True)


@cli.command()
@kb_option
@click.pass_context
def index(ctx: click.Context) -> None:
    """Rebuild wiki/master-index.md from the articles' frontmatter."""
    from kb_ai.store.kb import KnowledgeBase

    settings = _settings(ctx)
    try:
        kb = KnowledgeBase(settings.kb)
        result = kb.reindex()
        from kb_ai.offline.lexical import save_keyword_index

        save_keyword_index(kb)  # the catalog's snapshot and keyword index: the first question loads them
    except KaasError as exc:
        _fail(exc)
    for warning in result.warnings:
        say(f"kaas: warning: {warning}", err=True)
    state = "written" if result.written else "unchanged"
    say(f"indexed {result.articles} articles in {result.topics} topics: wiki/master-index.md {state}")


@cli.command(name="compile")
@kb_option
@click.option("--full", is_flag=True, help="Reprocess every source, not only new and changed ones.")
@click.option("--dry-run", is_flag=True, help="Print the plan and an estimate of LLM calls and cost; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--offline", is_flag=True, help="Ignore any configured model: deterministic structuring.")
@click.pass_context
def compile_command(ctx: click.Context, full: bool, dry_run: bool, as_json: bool, offline: bool) -> None:
    """Compile raw/ into wiki/ (incremental: unchanged sources cost nothing).

    \b
    Exit status:
      0  everything that needed compiling was compiled (skipped files and
         duplicates are listed in the report, they are not failures)
      1  some source or article failed or was left alone (model errors,
         refused model output, an article changed on disk meanwhile, an
         unreachable server): the report says which and why, finished work
         is saved, the next run retries
      2  usage or configuration error (no raw/ folder, unknown model,
         missing API key, rejected credentials)
      3  another compile holds the lock on this knowledge base
    """
    from kb_ai.compile.pipeline import run_compile

    settings = _settings(ctx)
    if offline:
        settings = _offline(settings)
    from kb_ai.compile.report import CompileInterrupted, render_interrupted

    try:
        report = run_compile(settings, full=full, dry_run=dry_run)
    except KaasError as exc:
        _fail(exc)
    except CompileInterrupted as stopped:  # Ctrl-C: what was saved, not click's bare "Aborted!"
        if as_json:
            say_json(json.dumps({**stopped.report.to_dict(), "exit_code": stopped.exit_code}, ensure_ascii=False,
                                indent=2))
        else:
            say(render_interrupted(stopped.report))
        sys.exit(stopped.exit_code)
    if as_json:
        say_json(json.dumps(report.to_dict(), ensure_ascii=False, indent=2))
    else:
        say(report.render_text())
    sys.exit(report.exit_code)


@cli.command()
@kb_option
@click.option("--user", "user_name", default=None, metavar="NAME",
              help="Act as this user of kaas.toml: the tools see only the pages their groups may read.")
@click.pass_context
def mcp(ctx: click.Context, user_name: str | None) -> None:
    """Serve the MCP tools (ask, ask_and_save, read_page, list_pages) over stdio."""
    from kb_ai.server.mcp import run_stdio
    from kb_ai.store.kb import KnowledgeBase

    settings = _settings(ctx)
    reader = _reader(settings, user_name)
    if user_name:
        import functools

        from kb_ai.store.users import UserDirectory

        # Resolved on every tool call, as kaas.toml says then: a revoked user (or a users table
        # that is gone or broken) is refused at once, not at the next restart.
        reader = functools.partial(UserDirectory(settings.kb).reader_named, user_name)
        reader()  # an unknown user is a one-line error now, and the table has been seen
    try:
        KnowledgeBase(settings.kb).require_wiki()  # a wrong --kb is a one-line error, not a silent server
    except KaasError as exc:
        _fail(exc)
    run_stdio(settings, reader)


@cli.command()
@kb_option
@click.option("--json", "as_json", is_flag=True, help="Print the findings as one JSON object.")
@click.option("--fix", is_flag=True, help="Repair the mechanical findings: re-index, drop dead links (keeping their text).")
@click.option("--contradictions", is_flag=True, help="Also ask the model about contradictions between related articles.")
@click.option("--max-pairs", type=click.IntRange(1, 500), default=None,
              help="Article pairs the contradictions check may compare (default 20).")
@click.pass_context
def lint(ctx: click.Context, as_json: bool, fix: bool, contradictions: bool, max_pairs: int | None) -> None:
    """Check the wiki: broken links, orphans, index drift, summaries, duplicates, stale and oversized pages."""
    from kb_ai.quality.lint import run_lint

    settings = _settings(ctx)
    try:
        report = run_lint(settings, fix=fix, contradictions=contradictions, max_pairs=max_pairs)
    except KaasError as exc:
        _fail(exc)
    if as_json:
        say_json(report.to_json_text())
    else:
        say(report.render_text())
    sys.exit(report.exit_code)


@cli.command(name="eval")
@kb_option
@click.argument("questions_file", metavar="QUESTIONS.jsonl", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the full results (summary and every question) as JSON to this file.")
@click.option("--limit", type=click.IntRange(1, None), default=None, help="Evaluate only the first N questions.")
@click.option("--offline", is_flag=True, help="Ignore any configured model: lexical selection, extractive answers.")
@click.option("--delete-gold", is_flag=True,
              help="Measure abstention: ask the questions on a temporary copy of the wiki without their gold pages.")
@click.pass_context
def eval_command(ctx: click.Context, questions_file: Path, json_out: Path | None, limit: int | None, offline: bool,
                 delete_gold: bool) -> None:
    """Measure page selection, answers, citations and cost on QUESTIONS.jsonl."""
    from kb_ai.quality.eval import run_eval_file

    settings = _settings(ctx)
    if offline:
        settings = _offline(settings)

    def progress(done: int, total: int) -> None:
        if done % 50 == 0 and done < total:
            say(f"kaas: eval: {done}/{total} questions", err=True)

    try:
        report = run_eval_file(settings, questions_file, limit=limit, progress=progress, delete_gold=delete_gold)
        if json_out is not None:
            report.write_json(json_out)
    except KaasError as exc:
        _fail(exc)
    for warning in report.warnings:
        say(f"kaas: warning: {warning}", err=True)
    for line in report.error_lines():
        say(f"kaas: eval: {line}", err=True)
    say(report.render_table())
    sys.exit(report.exit_code)


@cli.command()
@kb_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.option("--questions", "questions_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the questions voted down as a QUESTIONS.jsonl for `kaas eval`.")
@click.pass_context
def feedback(ctx: click.Context, as_json: bool, questions_out: Path | None) -> None:
    """Which questions the wiki failed: the answers voted down in the chat UI (.kaas/feedback.jsonl).

    With --questions FILE, they are written as a file `kaas eval FILE` runs again (after the wiki
    was fixed, to see them answered)."""
    from kb_ai.quality.feedback import feedback_report
    from kb_ai.store.kb import KnowledgeBase

    from kb_ai.files import DamagedFileError

    try:
        report = feedback_report(KnowledgeBase(_settings(ctx).kb).state_dir)
    except DamagedFileError as exc:
        _fail(KaasError(f"cannot read .kaas/feedback.jsonl: {exc}"))
    if questions_out is not None:
        from kb_ai.files import atomic_write_text

        lines = [json.dumps({"id": f"feedback-{n}", "question": q.question}, ensure_ascii=False)
                 for n, q in enumerate(report.questions, start=1)]
        atomic_write_text(questions_out, "".join(line + "\n" for line in lines))
        say(f"kaas: wrote {len(lines)} questions to {questions_out} (kaas eval {questions_out})", err=True)
    if as_json:
        say_json(json.dumps(report.to_json(), ensure_ascii=False, indent=2))
    else:
        say(report.render_text())


from kb_ai.cli.ask import ask  # noqa: E402
from kb_ai.cli.serve import serve  # noqa: E402 (cheap: click only; the server loads on use)

cli.add_command(ask)
cli.add_command(serve)


def main() -> None:
    try:
        cli(prog_name="kaas")
    except KaasError as exc:  # a service error that escaped a command
        _fail(exc)

