"""Fault injection: `kaas compile` killed with SIGKILL at a random moment, over many trials.

    .venv/bin/python benchmarks/bench_compile_kill.py [--trials 100] [--seed 1] [--sources 300] [--llm]

A generated corpus (``bench_compile.make_corpus``: Markdown, text and HTML notes in 25 folders,
2% exact copies) lives in a reference KB. Each trial:

1. changes the inputs: a few sources edited, some added, sometimes one deleted; about one trial
   in four also deletes wiki/ and .kaas/ (a first compile of everything), the others are
   incremental compiles on top of the previous trial's wiki;
2. copies the reference KB (raw/, wiki/, .kaas/) to a victim KB;
3. runs an uninterrupted ``kaas compile`` on the reference KB and times it (process start to
   exit, imports included);
4. starts ``kaas compile`` on the victim and sends it SIGKILL after a random delay drawn
   uniformly within that duration ("landed" = the process was still running);
5. checks the victim as the kill left it: every master-index.md line resolves, every article
   parses (``compile_checks.invariant_violations(complete=False)``);
6. runs ``kaas compile`` on the victim again: it must exit 0, leave a consistent KB
   (``invariant_violations``: catalog = articles, no temp file under wiki/ or .kaas/, no
   journal) and the same wiki as the uninterrupted run (every file and its content; the
   append-only wiki/log.md excepted, it records each run).

Offline mode by default; ``--llm`` compiles with a model: a deterministic fake OpenAI-compatible
server (``tests/fixtures/compile/fake_model.compile_responder`` served by
``server_fakes.ServerThread`` on 127.0.0.1) behind the real gateway and litellm, concurrency 1.

One line per trial, then a summary; exit status 1 on any violation. ``run_trials`` is also what
``tests/test_compile_kill_trials.py`` runs, with fewer trials and sources.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _folder in (REPO / "tests", REPO / "benchmarks"):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

from bench_compile import TOPICS, make_corpus, sentence
from compile_checks import invariant_violations, temp_files, wiki_snapshot

FRESH_SHARE = 0.25


@dataclass
class Trial:
    number: int
    scenario: str  # "fresh" or "incr"
    changes: str  # "+added ~edited -deleted"
    reference_seconds: float = 0.0
    delay: float = 0.0
    landed: bool = False  # the victim was still running when killed
    journal: bool = False  # the kill left a compile journal (work in progress)
    temp_left: int = 0  # temp files the kill left (the next compile must remove them)
    recovery_seconds: float = 0.0
    violations: list[tuple[str, str]] = field(default_factory=list)

    def line(self) -> str:
        outcome = "ok" if not self.violations else "FAIL " + ", ".join(sorted({k for k, _ in self.violations}))
        return (f"{self.number:4d} {self.scenario:5s} {self.changes:12s} kill {self.delay:5.2f}/{self.reference_seconds:5.2f} s "
                f"{'mid-run' if self.landed else 'after-end'} journal={'y' if self.journal else 'n'} "
                f"tmp={self.temp_left} {outcome}")


@dataclass
class Summary:
    trials: list[Trial]
    seconds: float

    @property
    def violations(self) -> Counter:
        return Counter(kind for t in self.trials for kind, _ in t.violations)

    def text(self) -> str:
        landed = [t for t in self.trials if t.landed]
        kinds = self.violations
        lines = [
            f"trials: {len(self.trials)} ({sum(t.scenario == 'fresh' for t in self.trials)} first compiles, "
            f"{sum(t.scenario == 'incr' for t in self.trials)} incremental) in {self.seconds:.0f} s",
            f"kills that landed mid-run: {len(landed)} (journal left: {sum(t.journal for t in landed)}, "
            f"temp files left: {sum(t.temp_left > 0 for t in landed)} trials / {sum(t.temp_left for t in landed)} files); "
            f"after the process ended: {len(self.trials) - len(landed)}",
            "violations: " + (", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) if kinds else "none"),
        ]
        return "\n".join(lines)


# -- inputs ----------------------------------------------------------------------------------------


def mutate(raw: Path, rng: random.Random, trial: int) -> str:
    """Edit, add and maybe delete a few sources. Returns "+added ~edited -deleted"."""
    files = sorted(p for p in raw.rglob("*") if p.is_file())
    edited = rng.sample(files, min(len(files), rng.randint(3, max(3, len(files) // 12))))
    for path in edited:
        extra = " ".join(sentence(rng) for _ in range(rng.randint(1, 3)))
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".html":
            text = text.replace("</article>", f"<p>Revision {trial}. {extra}</p></article>")
        else:
            text = text.rstrip("\n") + f"\n\nRevision {trial}. {extra}\n"
        path.write_text(text, encoding="utf-8")
    added = rng.randint(0, 4)
    for j in range(added):
        folder = raw / rng.choice(TOPICS)
        folder.mkdir(parents=True, exist_ok=True)
        title = f"Trial {trial} addition {j}"
        body = "\n\n".join(" ".join(sentence(rng) for _ in range(3)) for _ in range(rng.randint(1, 3)))
        (folder / f"added-{trial:04d}-{j}.md").write_text(f"# {title}\n\n{body}\n", encoding="utf-8")
    deleted = 0
    if rng.random() < 0.3:
        victim = rng.choice([p for p in files if p not in edited] or files)
        victim.unlink()
        deleted = 1
    return f"+{added} ~{len(edited)} -{deleted}"


# -- running kaas compile --------------------------------------------------------------------------


def compile_command(kb: Path) -> list[str]:
    return [sys.executable, "-m", "kb_ai", "compile", "--kb", str(kb)]


def compile_env(llm_base: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAAS_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    if llm_base:
        env.update({"KAAS_MODEL": "openai/test-model", "KAAS_API_BASE": llm_base, "KAAS_API_KEY": "sk-test",
                    "KAAS_CONCURRENCY": "1", "KAAS_MAX_RETRIES": "0", "DISABLE_AIOHTTP_TRANSPORT": "True"})
    return env


def run_to_end(kb: Path, env: dict[str, str]) -> tuple[int, float, str]:
    start = time.perf_counter()
    done = subprocess.run(compile_command(kb), env=env, capture_output=True, text=True, timeout=600, check=False)
    return done.returncode, time.perf_counter() - start, done.stderr


def run_and_kill(kb: Path, env: dict[str, str], delay: float) -> bool:
    """Start a compile, SIGKILL it after ``delay`` s. True when it was still running then."""
    process = subprocess.Popen(compile_command(kb), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        process.wait(timeout=delay)
        return False
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        return True


@contextlib.contextmanager
def fake_compile_model() -> Iterator[str]:
    """A deterministic OpenAI-compatible compile model on 127.0.0.1; yields its api_base."""
    from fixtures.compile.fake_model import compile_responder
    from server_fakes import ServerThread
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def completions(request: Request) -> Response:
        reply = compile_responder(await request.json())
        return Response(reply.content, status_code=reply.status_code, media_type="application/json")

    with ServerThread(Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])) as server:
        yield f"{server.url}/v1"


# -- the trials ------------------------------------------------------------------------------------


def snapshot_difference(got: dict[str, str], want: dict[str, str]) -> str:
    missing, extra = sorted(want.keys() - got.keys()), sorted(got.keys() - want.keys())
    changed = sorted(k for k in want.keys() & got.keys() if want[k] != got[k])
    parts = [f"{label} {len(items)} (e.g. {items[0]})" for label, items in
             (("missing", missing), ("extra", extra), ("changed", changed)) if items]
    return "; ".join(parts)


def one_trial(number: int, ref: Path, victim: Path, rng: random.Random, env: dict[str, str]) -> Trial:
    fresh = number == 0 or rng.random() < FRESH_SHARE
    trial = Trial(number, "fresh" if fresh else "incr", mutate(ref / "raw", rng, number))
    if fresh:
        for name in ("wiki", ".kaas"):
            shutil.rmtree(ref / name, ignore_errors=True)
    shutil.rmtree(victim, ignore_errors=True)
    shutil.copytree(ref, victim, symlinks=True)

    code, trial.reference_seconds, err = run_to_end(ref, env)
    if code != 0:
        trial.violations.append(("reference-compile-failed", (err.strip().splitlines() or ["?"])[-1]))
        return trial
    want = wiki_snapshot(ref)

    trial.delay = rng.uniform(0, trial.reference_seconds)
    trial.landed = run_and_kill(victim, env, trial.delay)
    trial.journal = (victim / ".kaas" / "journal.jsonl").exists()
    trial.temp_left = len(temp_files(victim))
    trial.violations += [(f"after-kill:{kind}", detail) for kind, detail in invariant_violations(victim, complete=False)]

    code, trial.recovery_seconds, err = run_to_end(victim, env)
    if code != 0:
        trial.violations.append(("recovery-exit-nonzero", f"exit {code}: {err.strip()[-300:]}"))
        return trial
    trial.violations += [(f"after-recovery:{kind}", detail) for kind, detail in invariant_violations(victim)]
    if (victim / ".kaas" / "journal.jsonl").exists():
        trial.violations.append(("after-recovery:journal-left", ".kaas/journal.jsonl"))
    difference = snapshot_difference(wiki_snapshot(victim), want)
    if difference:
        trial.violations.append(("wiki-differs-from-uninterrupted", difference))
    return trial


def run_trials(trials: int, seed: int, sources: int, *, llm: bool = False, workdir: Path | None = None,
               report: Callable[[str], None] = print) -> Summary:
    rng = random.Random(seed)
    start = time.perf_counter()
    done: list[Trial] = []
    with contextlib.ExitStack() as stack:
        tmp = Path(workdir) if workdir else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kaas-kill-")))
        llm_base = stack.enter_context(fake_compile_model()) if llm else None
        env = compile_env(llm_base)
        ref, victim = tmp / "reference", tmp / "victim"
        make_corpus(ref / "raw", sources, seed=seed)
        for number in range(trials):
            trial = one_trial(number, ref, victim, rng, env)
            done.append(trial)
            report(trial.line())
            for kind, detail in trial.violations[:5]:
                report(f"       {kind}: {detail}")
    return Summary(done, time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sources", type=int, default=300, help="sources in the generated corpus")
    parser.add_argument("--llm", action="store_true", help="compile with a (fake, loopback) model")
    args = parser.parse_args()
    print(f"# kaas compile killed with SIGKILL — {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}; {args.trials} trials, seed {args.seed}, "
          f"{args.sources} sources, {'llm (fake model)' if args.llm else 'offline'}", flush=True)
    summary = run_trials(args.trials, args.seed, args.sources, llm=args.llm,
                         report=lambda line: print(line, flush=True))
    print(summary.text())
    sys.exit(1 if summary.violations else 0)


if __name__ == "__main__":
    main()
