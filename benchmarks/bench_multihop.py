"""Multi-hop reading (issue 16): all gold pages read, by rounds, offline and with a stub model.

    .venv/bin/python benchmarks/bench_multihop.py [--hotpotqa-kb DIR] [--limit N]

1. A 3- and 4-hop check written here (not HotpotQA): fictional chains (a novel names its author,
   the author's page names a town, the town's page names the river; a film, its director, a city,
   a university; a locomotive, its maker, the founder; a chain joined by wiki links instead of
   names), each question naming only the first page, every chain a distractor for the others,
   plus pages that share the questions' words. `kaas eval` offline with 1, 2 and 3 rounds.
2. The same with a stub model (a fake OpenAI-compatible endpoint, respx, no network) that judges
   relevance by title: it selects the catalog pages whose title the question names, and in a
   further round the pages whose title the pages read name. Proves the loop, counts the calls
   and tokens; it is not a measure of any real model's judgement.
3. With --hotpotqa-kb (a KB kept by `bench_hotpotqa.py --keep DIR`): HotpotQA with the stub model,
   1 and 2 rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the stub model's fake endpoint (tests/llm_fakes.py)

from kb_ai.config import Settings  # noqa: E402
from kb_ai.navigate.ask import build_service  # noqa: E402
from kb_ai.quality.eval import run_eval  # noqa: E402
from kb_ai.quality.eval_questions import load_questions  # noqa: E402
from kb_ai.store.articles import render_article  # noqa: E402
from kb_ai.store.kb import KnowledgeBase  # noqa: E402

from llm_fakes import API_BASE, MODEL, FakeOpenAI, all_text, chat_json, chat_sse  # noqa: E402

SYLLABLES = ["ka", "lo", "ve", "ran", "tis", "mor", "del", "qua", "bri", "sen", "ol", "ur", "fen", "gal", "ith", "dor"]


_USED: set[str] = set()


def name(rng: random.Random, parts: int = 2) -> str:
    """A made-up name, never the same twice in one run."""
    while True:
        made = "".join(rng.choice(SYLLABLES) for _ in range(parts)).capitalize()
        if made not in _USED:
            _USED.add(made)
            return made


def person(rng):
    return f"{name(rng)} {name(rng, 3)}"


def page(path: str, title: str, summary: str, body: str) -> tuple[str, str, str, str]:
    return path, title, summary, f"# {title}\n\n{body}"


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def chains(rng: random.Random) -> tuple[list[tuple], list[dict]]:
    """(pages, questions): 8 chains of each kind (32 questions: 24 of 3 hops, 8 of 4)."""
    pages, questions = [], []
    for i in range(8):
        # novel -> author (mention) -> town (mention) -> river
        novel, author, town, river = f"The {name(rng)} Letters", person(rng), f"{name(rng)}ford", f"{name(rng)} River"
        pages += [page(f"books/{slug(novel)}.md", novel, f"A novel published in {1900 + i}.",
                       f"{novel} is a novel published in {1900 + i}. It was written by {author}."),
                  page(f"people/{slug(author)}.md", author, "A writer and schoolteacher.",
                       f"{author} was a schoolteacher and writer, born in {town}."),
                  page(f"places/{slug(town)}.md", town, "A market town.",
                       f"{town} is a market town on the banks of the {river}.")]
        questions.append({"question": f"Which river runs by the town where the author of the novel {novel} was born?",
                          "gold_pages": [novel, author, town], "answer": river, "hops": 3})
        # locomotive -> maker (mention) -> founder (mention) -> instrument
        loco, firm, founder, instrument = f"{name(rng)} Class {i + 2}", f"{name(rng)} Works", person(rng), rng.choice(
            ["cello", "oboe", "harp", "bassoon"])
        pages += [page(f"rail/{slug(loco)}.md", loco, "A steam locomotive class.",
                       f"The {loco} is a class of steam locomotive built by {firm}."),
                  page(f"firms/{slug(firm)}.md", firm, "An engineering firm.",
                       f"{firm} is an engineering firm founded in {1850 + i} by {founder}."),
                  page(f"people/{slug(founder)}.md", founder, "An engineer.",
                       f"{founder} was an engineer who played the {instrument} in an amateur orchestra.")]
        questions.append({"question": f"What instrument did the founder of the company that built the {loco} play?",
                          "gold_pages": [loco, firm, founder], "answer": instrument, "hops": 3})
        # poem -> poet (wiki link, no name) -> village (link) -> fair
        poem, poet, village = f"Ode to {name(rng)}", person(rng), f"{name(rng)} Green"
        pages += [page(f"poems/{slug(poem)}.md", poem, "A poem in six stanzas.",
                       f"{poem} is a poem in six stanzas by [its poet](../people/{slug(poet)}.md)."),
                  page(f"people/{slug(poet)}.md", poet, "A poet.",
                       f"The poet spent a life in [a small village](../places/{slug(village)}.md)."),
                  page(f"places/{slug(village)}.md", village, "A village.",
                       f"{village} is a village known for its autumn fair of cheese.")]
        questions.append({"question": f"What is the fair of the village where the poet of {poem} lived known for?",
                          "gold_pages": [poem, poet, village], "answer": "cheese", "hops": 3})
        # film -> director -> city -> university -> founding year (4 hops)
        film, director, city, uni = f"{name(rng)} Nights", person(rng), f"{name(rng)}grad", f"University of {name(rng, 3)}"
        year = str(1600 + 13 * i)
        pages += [page(f"films/{slug(film)}.md", film, "A drama film.", f"{film} is a drama film directed by {director}."),
                  page(f"people/{slug(director)}.md", director, "A film director.",
                       f"{director} is a director who grew up in {city}."),
                  page(f"places/{slug(city)}.md", city, "A city.", f"{city} is a city and home of the {uni}."),
                  page(f"schools/{slug(uni)}.md", uni, "A university.", f"The {uni} was founded in {year}.")]
        questions.append({"question": f"In what year was the university of the city where the director of {film} grew up founded?",
                          "gold_pages": [film, director, city, uni], "answer": year, "hops": 4})
    # Pages that share the questions' words and name no chain page.
    pages += [
        page("misc/rivers-and-towns.md", "Rivers and towns", "Which river runs by which town.",
             "A town on a river: the river runs by the town, and an author born in the town often writes about the river."),
        page("misc/novel-prizes.md", "Novel prizes", "Prizes for the author of a novel.",
             "Each year the author of a novel born in a river town may win the prize."),
        page("misc/company-founders.md", "Company founders", "Founders of companies that built locomotives.",
             "A founder of a company that built a locomotive often played an instrument."),
        page("misc/village-fairs.md", "Village fairs", "What the fair of each village is known for.",
             "The fair of a village is known for what the village makes; a poet lived in many a village."),
        page("misc/universities.md", "Universities by city", "In what year each university of a city was founded.",
             "The university of a city where a director grew up was founded in a year long ago."),
        page("misc/film-directors.md", "Film directors", "Where the director of a film grew up.",
             "The director of a film grew up in a city with a university."),
    ]
    return pages, questions


def write_kb(root: Path, pages: list[tuple], questions: list[dict]) -> Path:
    for path, title, summary, body in pages:
        file = root / "wiki" / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(render_article({"title": title, "summary": summary, "topic": path.split("/")[0]}, body),
                        encoding="utf-8")
    KnowledgeBase(root).reindex()
    target = root / "questions.jsonl"
    target.write_text("".join(json.dumps({k: v for k, v in q.items() if k != "hops"}) + "\n" for q in questions),
                      encoding="utf-8")
    return target


# -- the stub model --------------------------------------------------------------------------------

_LINE = re.compile(r"^- \[(?P<title>[^\]]+)\]\((?P<path>[^)]+)\)", re.MULTILINE)


def _catalog(text: str) -> list[tuple[str, str]]:
    block = text[text.index("<catalog"):text.index("</catalog>")]
    return [(m["title"], m["path"]) for m in _LINE.finditer(block)]


def title_judge(body: dict):
    """Selection: catalog pages whose title the question names (else the first line shown).
    Further round: catalog pages whose title the pages read name. Answer: cites the pages given."""
    text = all_text(body)
    if body.get("stream"):
        pages = re.findall(r'<page path="([^"]+)" title="([^"]+)">', text)
        return chat_sse(["From the pages read: "] + [f"[{t}]({p}) " for p, t in pages], usage=(len(text) // 4, 30))
    question = re.search(r"^Question: (.*)$", text, re.MULTILINE)[1].casefold()
    catalog = _catalog(text)
    if "You look for more pages" in text:
        read = " ".join(re.findall(r"<page [^>]*>\n(.*?)\n</page>", text, re.DOTALL)
                        + re.findall(r"^Catalog pages it names: (.*)$", text, re.MULTILINE)).casefold()
        chosen = [p for t, p in catalog if t.casefold() in read]
        return chat_json(json.dumps({"paths": chosen, "why": "titles named by the pages read"}),
                         prompt_tokens=len(text) // 4, completion_tokens=10 + 10 * len(chosen))
    chosen = [p for t, p in catalog if t.casefold() in question] or [p for _, p in catalog[:1]]
    return chat_json(json.dumps({"paths": chosen}), prompt_tokens=len(text) // 4, completion_tokens=10 + 10 * len(chosen))


# -- runs ------------------------------------------------------------------------------------------

def run(settings: Settings, questions_file: Path, limit: int | None, model: bool) -> dict:
    questions = load_questions(questions_file)[:limit]
    start = time.perf_counter()
    if model:
        with FakeOpenAI() as fake:
            fake.add(title_judge, when=None, repeat=True)
            report = asyncio.run(run_eval(build_service(settings), questions))
    else:
        report = asyncio.run(run_eval(build_service(settings), questions))
    summary = report.summary()
    summary["seconds"] = time.perf_counter() - start
    summary["by_hops"] = {}
    return {"summary": summary, "results": report.results}


def shortlist_check(root: Path, questions: list[dict], budget: int) -> tuple[float, float, int]:
    """The lines a model is shown when the catalog is over ``budget``: for each hop after the
    first, is the next page of the chain among them — in the shortlist built from the question
    alone (round 1), and in the one built from the question and the chain's pages read so far (the
    further round's, ``follow_up_shortlist``)? Returns (share from the question, share after reading, hops)."""
    from kb_ai.navigate.follow_up import follow_up_shortlist
    from kb_ai.navigate.navigator import LexicalIndexCache
    from kb_ai.navigate.read import read_pages
    from kb_ai.navigate.select import shortlist

    kb = KnowledgeBase(root)
    catalog = kb.require_catalog()
    lexical = LexicalIndexCache(kb.wiki_dir, None).get(catalog)
    from_question = after_reading = hops = 0
    for q in questions:
        chain = [catalog.by_title[t.casefold()] for t in q["gold_pages"]]
        first = {e.path for e in shortlist(catalog, q["question"], budget, lexical)[0]}
        for k in range(1, len(chain)):
            pages, _ = read_pages(kb, chain[:k], 12_000, q["question"], catalog=catalog)
            shown = {e.path for e in follow_up_shortlist(catalog, q["question"], pages, budget, lexical)[0]}
            from_question += chain[k] in first
            after_reading += chain[k] in shown
            hops += 1
    return from_question / hops, after_reading / hops, hops


def row(label: str, out: dict, hops: list[int] | None = None) -> str:
    s = out["summary"]
    cells = [label, f"{s['all_gold_read'] * 100:.1f}%", f"{s['selection_recall'] * 100:.1f}%", f"{s['pages_read_mean']:.2f}"]
    if hops is not None:
        for h in sorted(set(hops)):
            rs = [r for r, n in zip(out["results"], hops, strict=True) if n == h]
            cells.append(f"{sum(1 for r in rs if r.all_gold_read) / len(rs) * 100:.0f}% of {len(rs)}")
    cells += [f"{s['answer_contains_gold'] * 100:.1f}%" if s["answer_contains_gold"] is not None else "—",
              f"{s['llm_calls_per_question']:.2f}",
              f"{s['prompt_tokens_per_question']:,.0f} + {s['completion_tokens_per_question']:,.0f}"]
    rounds = "; ".join(f"r{n}: {r['gold_read_per_question']:.2f} gold, {r['llm_calls_per_question']:.2f} calls"
                       for n, r in s["rounds"].items())
    return "| " + " | ".join(cells + [rounds]) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hotpotqa-kb", type=Path, default=None, help="a KB kept by bench_hotpotqa.py --keep DIR")
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    print(f"# Multi-hop — {platform.node()} {platform.machine()} {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        pages, questions = chains(random.Random(16))
        qfile = write_kb(Path(tmp), pages, questions)
        hops = [q["hops"] for q in questions][: args.limit]
        print(f"\n## 3- and 4-hop check ({len(pages)} pages, {len(questions)} questions)\n")
        print("| run | all gold read | recall | pages read | 3 hops | 4 hops | answer contains gold | LLM calls | tokens | per round |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
        for model in (False, True):
            for rounds in (1, 2, 3, 4):
                base = dict(kb=Path(tmp), max_rounds=rounds, max_calls=8)
                settings = Settings(**base, model=MODEL, api_base=API_BASE, api_key="sk-test", cache=False,
                                    max_retries=0) if model else Settings(**base)
                out = run(settings, qfile, args.limit, model)
                print(row(f"{'stub model' if model else 'offline'}, {rounds} round{'s' if rounds > 1 else ''}", out, hops))
        print("\n| select budget | next page of the chain in the shortlist from the question | ... from the question and the pages read | hops |")
        print("| ---: | ---: | ---: | ---: |")
        for budget in (300, 600, 1_200):
            before, after, count = shortlist_check(Path(tmp), questions[: args.limit], budget)
            print(f"| {budget:,} tokens | {before * 100:.1f}% | {after * 100:.1f}% | {count} |")
    if args.hotpotqa_kb:
        qfile = args.hotpotqa_kb / "questions.jsonl"
        print(f"\n## HotpotQA with the stub model ({args.limit or 500} questions)\n")
        print("| run | all gold read | recall | pages read | answer contains gold | LLM calls | tokens | per round |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
        for rounds in (1, 2):
            settings = Settings(kb=args.hotpotqa_kb, max_rounds=rounds, model=MODEL, api_base=API_BASE,
                                api_key="sk-test", cache=False, max_retries=0)
            out = run(settings, qfile, args.limit, True)
            print(row(f"stub model, {rounds} round{'s' if rounds > 1 else ''}", out))


if __name__ == "__main__":
    main()
