"""Generate synthetic wikis for tests and benchmarks: realistic-looking titles, summaries and
bodies, each article carrying one invented proper name so questions can target it exactly."""

from __future__ import annotations

import random
from pathlib import Path

from kb_ai.store.articles import render_article

TOPICS = ["history", "engineering", "biology", "finance", "music", "geography", "medicine", "software",
          "law", "astronomy", "cooking", "sports", "linguistics", "architecture", "energy", "agriculture"]
NOUNS = ["protocol", "river", "festival", "bridge", "enzyme", "treaty", "algorithm", "reactor", "dialect",
         "cathedral", "orchestra", "glacier", "vaccine", "exchange", "satellite", "harvest", "league", "compiler"]
ADJECTIVES = ["northern", "ancient", "modular", "coastal", "digital", "baroque", "volcanic", "federal",
              "organic", "solar", "medieval", "distributed", "tropical", "municipal", "quantum", "rural"]
SYLLABLES = ["ka", "lo", "mer", "vin", "tas", "zor", "bel", "qui", "dra", "nop", "sul", "fex", "ran", "tu", "gil", "pho"]
VERBS = ["was founded", "was first described", "was completed", "was ratified", "was discovered", "was rebuilt"]


def invented_name(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(3)).capitalize()


def generate_article(i: int, rng: random.Random) -> tuple[str, dict, str, str]:
    topic = TOPICS[i % len(TOPICS)]
    name = f"{invented_name(rng)}{i}"
    noun, adjective = rng.choice(NOUNS), rng.choice(ADJECTIVES)
    year = 1500 + rng.randrange(520)
    title = f"{name} {noun}"
    summary = f"The {adjective} {noun} known as {name}: origin, structure and significance."
    body = (
        f"# {title}\n\nThe {name} {noun} {rng.choice(VERBS)} in {year} in the {adjective} region. "
        f"It is one of the best documented examples of a {adjective} {noun}.\n\n"
        f"## History\n\nRecords of {name} describe how the {noun} changed over the following decades. "
        f"Local accounts mention {invented_name(rng)} and {invented_name(rng)} as its early stewards.\n\n"
        f"## Structure\n\nThe {noun} has {rng.randrange(2, 40)} principal parts, arranged in a {adjective} pattern. "
        f"Surveys measured a length of {rng.randrange(10, 9000)} metres.\n"
    )
    path = f"{topic}/{name.lower()}-{noun}.md"
    meta = {"title": title, "summary": summary, "topic": topic, "tags": [noun, adjective], "updated": "2026-11-30"}
    return path, meta, body, name


def generate_wiki(root: Path, count: int, seed: int = 7) -> list[tuple[str, str]]:
    """Write ``count`` articles under ``root/wiki`` and return [(path, invented name)]."""
    rng = random.Random(seed)
    made = []
    for i in range(count):
        path, meta, body, name = generate_article(i, rng)
        file = root / "wiki" / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(render_article(meta, body), encoding="utf-8")
        made.append((path, name))
    return made


DEPOTS = ["Northfield", "Southport", "Eastgate", "Westbrook", "Central", "Harbour", "Airport", "Hilltop",
          "Riverside", "Valley", "Lakeside", "Forest", "City"]
DEPOT_QUESTION = "Which depot has the cold-weather test chamber?"


def generate_depot_wiki(root: Path) -> None:
    """A 13-page wiki of bus depots; only Northfield has the cold-weather test chamber (the wiki
    the issue's 'kaas ask' hang was seen on has this shape). Indexed."""
    from helpers import build_kb

    pages = []
    for i, name in enumerate(DEPOTS):
        extra = (" It has the cold-weather test chamber, which cools whole buses to minus 40 degrees."
                 if name == "Northfield" else "")
        body = (f"# {name} depot\n\n{name} depot keeps buses running.{extra} It opened in {1950 + 5 * i}.\n\n"
                f"## Staff\n\nThe depot employs {30 + 7 * i} people in two shifts.\n")
        pages.append((f"depots/{name.lower()}.md", f"{name} depot", f"What {name} depot does and when it opened.", body,
                      {"topic": "depots"}))
    build_kb(root, *pages, sample=False)
