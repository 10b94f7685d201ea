"""What a model wrote, checked against what it was given: deterministic, no model.

Three checks of the model path of compile (the offline writer copies its sources and needs none):

* ``facts_of`` / ``missing_facts``: a source's *informative content* — its numbers (with their
  currency or unit), dates, weekday and month names, code identifiers (in backticks), names
  (capitalised words not starting a sentence, CamelCase, ALLCAPS) and its key terms (words the
  source repeats that few other documents of the corpus use) — and which of them an article
  does not hold (text normalised: case, Markdown emphasis and punctuation ignored). The write
  stage retries an article that dropped more than ``allowed_missing`` of a source's facts once,
  naming them, then keeps the offline article for it (``write.ArticleWriter``).
* ``share``: an update target must share at least ``UPDATE_MIN_SHARE`` of its title,
  summary and topic terms (IDF-weighted) with the source (measured on the test corpora and a real 0.5B model's
  plans, docs/benchmarks.md "Model-path compile checks"); the planner turns any other update
  into a create (``planners.resolve_plan``).
* ``summary_contradicts``: a number or amount the summary states that the body does not.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

from kb_ai.store.words import STOP_WORDS

MAX_FACTS = 40  # per source: enough to notice a dropped section, few enough to name in a retry
MAX_KEY_TERMS = 8
KEY_TERM_DF = 0.1  # a key term is in at most this share of the corpus's documents
MISSING_SHARE = 0.05  # an article may miss this share of a source's facts (rounded down)
UPDATE_MIN_SHARE = 0.5

_UNITS = (r"%|percent|ms|s|sec|seconds?|minutes?|min|hours?|h|days?|weeks?|months?|years?|kb|mb|gb|tb|"
          r"users?|seats?|requests?|rps|px|usd|eur|gbp")
_AMOUNT = re.compile(r"(?<![\w.])([$€£]\s?)?(\d+(?:[.,:]\d+)*)(\s?(?:" + _UNITS + r"))?(?![\w])", re.I)
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_CALENDAR = re.compile(r"\b(monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|february|march|"
                       r"april|june|july|august|september|october|november|december)s?\b", re.I)
_CODE = re.compile(r"`([^`\n]{2,60})`")
_NAME = re.compile(r"(?<![\w.'-])([A-Z][a-z]+[A-Z]\w*|[A-Z]{2,}\d*|[A-Z][a-z]{2,}(?:[-_][A-Za-z]+)*)(?![\w'-])")
_SENTENCE_START = re.compile(r"(?:^|[.!?:]\s+|\n\s*(?:[-*+>#|]+\s*|\d+[.)]\s*)?)$")
_WORD = re.compile(r"[a-z][a-z0-9_-]{4,}")
_NORMAL = re.compile(r"[`*_~\[\]()<>\"'“”‘’|#]+")


@dataclass
class Facts:
    """A source's informative content: each item as it is written, and how it is looked for."""

    items: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.items)


def normalised(text: str) -> str:
    """Text as facts are looked for in it: case-folded, emphasis, code ticks, brackets and
    quotes removed, whitespace collapsed (so ``**$12**`` holds ``$12``)."""
    return " " + " ".join(_NORMAL.sub(" ", text.casefold()).split()) + " "


def _amounts(text: str) -> list[str]:
    found = []
    for match in _AMOUNT.finditer(text):
        currency, number, unit = match.group(1) or "", match.group(2), (match.group(3) or "").strip()
        if not currency and not unit and len(number.replace(".", "").replace(",", "")) < 2:
            continue  # "step 1", "2 options": a single bare digit says little
        found.append(f"{currency.strip()}{number}" + (f" {unit}" if unit else ""))
    return found


def _names(text: str) -> list[str]:
    found = []
    for match in _NAME.finditer(text):
        word = match.group(1)
        if word.casefold() in STOP_WORDS:
            continue
        plain_capital = word[0].isupper() and word[1:].islower()
        if plain_capital and _SENTENCE_START.search(text[max(0, match.start() - 40):match.start()]):
            continue  # the first word of a sentence or list item is capitalised anyway
        found.append(word)
    return found


def key_terms(text: str, document_frequency: Counter[str] | None, documents: int) -> list[str]:
    """Words ``text`` uses at least twice that at most ``KEY_TERM_DF`` of the corpus's documents
    use (by inverse document frequency, most distinctive first)."""
    if not document_frequency or documents < 5:
        return []
    counts = Counter(w for w in _WORD.findall(text.casefold()) if w not in STOP_WORDS)
    limit = max(1, int(documents * KEY_TERM_DF))
    rare = [(w, c * math.log(documents / document_frequency.get(w, 1))) for w, c in counts.items()
            if c >= 2 and document_frequency.get(w, 1) <= limit]
    return [w for w, _ in sorted(rare, key=lambda x: (-x[1], x[0]))[:MAX_KEY_TERMS]]


def corpus_frequencies(texts: list[str]) -> Counter[str]:
    """How many of ``texts`` use each word (for ``key_terms``)."""
    frequency: Counter[str] = Counter()
    for text in texts:
        frequency.update(set(_WORD.findall(text.casefold())))
    return frequency


def facts_of(text: str, document_frequency: Counter[str] | None = None, documents: int = 0) -> Facts:
    """The informative items of a source's text, in order of first appearance, each once
    (case-folded), at most ``MAX_FACTS``: dates, amounts, calendar words, code, names, key terms."""
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    seen: set[str] = set()
    items: list[str] = []
    candidates = (_DATE.findall(text) + _amounts(_DATE.sub(" ", text)) + [m.group(0) for m in _CALENDAR.finditer(text)]
                  + [c.strip() for c in _CODE.findall(text)] + _names(text)
                  + key_terms(text, document_frequency, documents))
    for item in candidates:
        key = normalised(item).strip()
        if key and key not in seen and not any(key in s.split() for s in seen if " " in s):
            seen.add(key)
            items.append(item)
    return Facts(items[:MAX_FACTS])


def holds(normal_text: str, item: str) -> bool:
    """Whether ``normal_text`` (``normalised``) states ``item`` as a whole word or phrase."""
    key = normalised(item).strip()
    if not key:
        return True
    plural = "(?:s|es)?" if key[-1].isalpha() else ""  # "Tuesday" is held by "Tuesdays"
    if re.search(r"(?<![\w$€£])" + re.escape(key) + plural + r"(?![\w])", normal_text):
        return True
    if key.endswith("s") and re.search(r"(?<![\w])" + re.escape(key[:-1]) + r"(?![\w])", normal_text):
        return True  # "Tuesdays" / "Tuesday"
    return False


def missing_facts(facts: Facts, text: str) -> list[str]:
    """The items of ``facts`` that ``text`` (an article) does not hold."""
    normal = normalised(text)
    return [item for item in facts.items if not holds(normal, item)]


def allowed_missing(facts: Facts) -> int:
    """How many of a source's facts an article may leave out: ``MISSING_SHARE`` of them, rounded
    down (a short source: none)."""
    return int(len(facts) * MISSING_SHARE)


def summary_contradicts(summary: str, body: str) -> list[str]:
    """The amounts, numbers and dates ``summary`` states that ``body`` does not (a summary saying
    $9 of a page that says $12)."""
    normal = normalised(body)
    stated = _DATE.findall(summary) + _amounts(_DATE.sub(" ", summary))
    return [item for item in stated if not holds(normal, item)]


def term_frequencies(texts: list[str]) -> Counter[str]:
    """How many of ``texts`` use each term (``offline.text.tokenize``: stemmed, stop words
    dropped), for ``share``'s weights."""
    from kb_ai.offline.text import tokenize  # noqa: PLC0415 (the stemmer only when planning)

    frequency: Counter[str] = Counter()
    for text in texts:
        frequency.update(set(tokenize(text[:SHARE_SOURCE_CHARS])))
    return frequency


SHARE_SOURCE_CHARS = 10_000


def share(source_text: str, target_text: str, frequency: Counter[str] | None = None, documents: int = 0) -> float:
    """The share of ``target_text``'s terms (an article's title, summary and topic) that
    ``source_text`` uses, each term weighted by its inverse document frequency in the corpus
    (``frequency`` of ``documents``; equal weights below 5 documents), so that a generic word
    ("server", "request") counts for little; 1.0 for a target with no terms."""
    from kb_ai.offline.text import tokenize  # noqa: PLC0415

    target = set(tokenize(target_text))
    if not target:
        return 1.0
    source = set(tokenize(source_text[:SHARE_SOURCE_CHARS]))
    use_idf = frequency is not None and documents >= 5
    weights = {t: math.log((documents + 1) / (frequency.get(t, 0) + 1)) if use_idf else 1.0 for t in target}
    total = sum(weights.values())
    if total <= 0:
        return 1.0
    return sum(w for t, w in weights.items() if t in source) / total


def affinity(source, target_text: str, frequency: Counter[str] | None = None, documents: int = 0) -> float:
    """How much a source (``ingest.Source``) and an article (its title, summary and topic) are
    about one subject: the larger of the share of the article's terms the source uses and the
    share of the source's title terms the article's words use (``share``, IDF-weighted)."""
    return max(share(f"{source.title}\n{source.text}", target_text, frequency, documents),
               share(target_text, source.title, frequency, documents))
