"""Property-based tests (hypothesis) of the pure parts every other part trusts: article
frontmatter parsing/rendering, the catalog format, wiki paths and slugs, Markdown text helpers.

Generated inputs include unicode, YAML-special strings, ``---`` lines in bodies, brackets and
backslashes in titles; arbitrary text must never raise anything but kaas's own errors.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import tempfile
from pathlib import Path, PurePosixPath

import pytest

# Hypothesis keeps a cache folder (.hypothesis/) in the current directory: not in the working tree.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "kaas-hypothesis"))

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kb_ai.errors import ArticleFormatError, UnsafePathError
from kb_ai.store.articles import (
    RESERVED_NAMES,
    load_article,
    parse_article,
    render_article,
    split_frontmatter,
    write_article,
)
from kb_ai.store.catalog import Catalog, CatalogEntry, parse_master_index, render_master_index
from kb_ai.files import TEMP_PREFIX
from kb_ai.store.markdown_text import first_heading, first_sentence, plain_text, split_sections
from kb_ai.store.sentences import clip
from kb_ai.store.paths import MAX_SLUG_LENGTH, normalize_wiki_path, safe_wiki_file, slugify, topic_folder

# database=None: no .hypothesis/ folder in the working tree; failures found are kept as @example.
PROPS = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
FEWER = settings(PROPS, max_examples=100)
SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")

# Strings YAML (1.1, PyYAML) would read as something other than the same string if written plain.
YAML_SPECIAL = [
    "yes", "no", "Yes", "NO", "on", "off", "true", "False", "null", "Null", "~", "", "1e3", "1.0e3",
    "0x1F", "0o17", "012", "1_000", ".inf", "-.Inf", ".nan", "2026-01-31", "2026-01-31 10:00:00",
    "12:30:00", "- item", "? key", ": value", "a: b", "key: value # comment", "#hash", "&anchor",
    "*alias", "!tag", "!!python/object:os.system", "%YAML 1.2", "@at", "`tick", "|", ">", "'",
    '"', "'quoted'", '"double"', "{a: 1}", "[1, 2]", "---", "...", "--- x", "x\n---\ny",
    "tab\there", "trailing space ", " leading", "multi\nline\n\nparagraph", "\u2028sep", "nel\x85x",
    "bom\ufeff", "emoji 🚀", "ünïcödé", "日本語", "RTL \u202e text", "C:\\path\\x", "\\", "back\\slash",
]

special = st.sampled_from(YAML_SPECIAL)
any_text = st.one_of(special, st.text(max_size=60), st.builds(lambda a, b: a + b, special, st.text(max_size=20)))
nonblank = any_text.filter(lambda s: s.split() != [])

BODY_LINES = st.one_of(
    st.sampled_from(["---", "--- ", "----", "...", "---\t", "title: injected", "# Heading", "```", "", "   "]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r"), max_size=40),
)
bodies = st.lists(BODY_LINES, max_size=12).map("\n".join)

SCALARS = st.one_of(
    any_text,
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=False, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.dates(min_value=dt.date(1, 1, 1), max_value=dt.date(9999, 12, 31)),
)
extra_values = st.one_of(SCALARS, st.lists(any_text, max_size=4), st.lists(SCALARS, max_size=3))
extra_keys = any_text.filter(lambda k: k not in ("title", "summary", "topic"))


def _without_leading_blank_lines(body: str) -> str:
    """A body as it comes back: blank lines around it, and whitespace-only lines before its first
    line of text, are not kept (the frontmatter's closing ``---`` takes them; Markdown ignores them)."""
    lines = body.strip("\n").split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    return "\n".join(lines)


# YAML *values* that look like something PyYAML builds (a date, a number, a tagged scalar, a
# nested collection) with contents chosen to break the building: impossible dates and offsets,
# integers past Python's printable length in every base YAML 1.1 reads, words under typed tags,
# deep nesting, keys that are collections. Plain text rarely produces these.
_digits = st.text(alphabet="0123456789", min_size=1, max_size=6)
yaml_dates = st.builds(lambda y, m, d: f"{y:04d}-{m:02d}-{d:02d}",
                       st.integers(0, 9999), st.integers(0, 99), st.integers(0, 99))
yaml_timestamps = st.builds(
    lambda date, h, mi, sec, sign, oh: f"{date}T{h:02d}:{mi:02d}:{sec:02d}{sign}{oh:02d}:00",
    yaml_dates, st.integers(0, 99), st.integers(0, 99), st.integers(0, 99), st.sampled_from("+-"),
    st.integers(0, 99))
yaml_big_numbers = st.builds(lambda fmt, n: fmt(n), st.sampled_from([
    lambda n: "9" * n, lambda n: "-" + "1" * n, lambda n: "0x" + "f" * n, lambda n: "0b" + "1" * (4 * n),
    lambda n: "0" + "7" * n, lambda n: "1" + ":59" * n, lambda n: "1_" * n + "0",
    lambda n: f"1e{n}", lambda n: "." + "9" * n + "e999",
]), st.integers(1, 6000))
yaml_tagged = st.builds(lambda tag, text: f"{tag} {text!r}" if text else tag, st.sampled_from([
    "!!int", "!!float", "!!bool", "!!null", "!!timestamp", "!!binary", "!!str", "!!set", "!!omap",
    "!!pairs", "!!seq", "!!map", "!!merge", "!!value", "!!python/name:os.system", "!custom",
]), st.one_of(st.text(max_size=12), _digits, yaml_dates))
yaml_nested = st.builds(lambda opener, depth: opener * depth + "1" + {"[": "]", "{a: ": "}", "[{a: ": "}]"}[opener] * depth,
                        st.sampled_from(["[", "{a: ", "[{a: "]), st.integers(1, 2500))
yaml_values = st.one_of(yaml_dates, yaml_timestamps, yaml_big_numbers, yaml_tagged, yaml_nested,
                        st.sampled_from(YAML_SPECIAL), st.sampled_from([".nan", ".inf", "-.inf", "1e99999"]))
yaml_lines = st.one_of(
    st.builds(lambda key, value: f"{key}: {value}", st.sampled_from(["updated", "title", "tags", "n", "access"]), yaml_values),
    st.builds(lambda key, value: f"? {key}\n: {value}", st.sampled_from(["[a]", "{a: 1}", "[[a]]", "!!set {a: null}"]), yaml_values),
    st.builds(lambda value: f"<<: {value}", yaml_values),
)
yaml_frontmatters = st.builds(
    lambda lines, alias: "---\ntitle: T\n" + "\n".join(lines) + ("\nnote: '*'" if alias else "") + "\n---\nbody\n",
    st.lists(yaml_lines, min_size=1, max_size=3), st.booleans())  # a "*" selects the pure-Python loader


@pytest.mark.slow
@PROPS
@given(text=st.one_of(
    st.text(max_size=300),
    st.builds(lambda fm, body: f"---\n{fm}\n---\n{body}", st.text(max_size=120), st.text(max_size=60)),
    st.builds(lambda fm: f"---\n{fm}\n---\n", st.sampled_from(YAML_SPECIAL)),
    yaml_frontmatters,
))
@example("---\n&a [*a, *a]\n---\n")  # alias: refused, not expanded
@example("---\n- a\n- b\n---\nbody")  # a list, not a mapping
@example("---\n!!python/object/apply:os.system ['true']\n---\n")
@example("---\n? [a, b]\n: c\n---\n")  # a mapping key that is a list
@example("---\n\x00\n---\n")
@example("---\nupdated: 2026-13-45\n---\n")  # issue 12: ValueError from the date constructor
@example("---\nn: " + "1" * 5000 + "\n---\n")  # issue 12: the int digit limit
@example("---\nn: 0x" + "f" * 4000 + "\n---\n")  # built, but too long to print
@example("---\nf: !!bool maybe\n---\n")  # KeyError
@example("---\nt: !!timestamp never\n---\n")  # AttributeError
@example("---\nx: " + "[" * 3000 + "]" * 3000 + "\ny: '*'\n---\n")  # RecursionError (pure-Python loader)
@example("---\nx: " + "[" * 500 + "]" * 500 + "\n---\n")  # built, too deep to serialize
@example("---\nx: .nan\n---\n")  # not JSON
@example("---\ntitle: '\ud800'\n---\n")  # a lone surrogate (only from a JSON body)
def test_parsing_arbitrary_text_raises_only_our_errors(text):
    try:
        article = parse_article(text, "topic/page.md")
    except ArticleFormatError as exc:
        assert "topic/page.md" in exc.message and "\n" not in exc.message.strip()
        return
    assert isinstance(article.title, str) and article.title.strip()
    assert isinstance(article.summary, str) and isinstance(article.topic, str) and article.topic
    assert isinstance(article.body, str)
    assert all(isinstance(k, str) for k in article.meta)
    # Whatever parsed can be served (strict JSON, as browsers and MCP clients read it) and written back.
    json.dumps(article.frontmatter_json, allow_nan=False)
    parse_article(render_article(article.meta, article.body), "topic/page.md")
    article.tags, article.sources, article.cited_paths  # noqa: B018


@PROPS
@given(title=nonblank, summary=nonblank, topic=nonblank, body=bodies,
       extra=st.dictionaries(extra_keys, extra_values, max_size=4))
@example(title="yes", summary="null", topic="1e3", body="---\ntitle: evil\n---\nafter", extra={"no": "on"})
@example(title="a: b", summary="'quoted' \"and\" # not a comment", topic="---", body="x\n---\n\n---", extra={})
@example(title="x\n---\ny", summary="- item", topic="~", body="...", extra={"tags": ["yes", "null", "---"]})
@example(title="\u2028sep", summary="nel\x85x", topic="bom\ufeff", body="\u2028", extra={"updated": dt.date(2026, 1, 31)})
def test_render_then_parse_round_trips(title, summary, topic, body, extra):
    meta = {"title": title, "summary": summary, "topic": topic, **extra}
    text = render_article(meta, body)
    article = parse_article(text, "t/p.md")
    assert article.meta == meta
    assert article.title == " ".join(title.split())
    assert article.summary == clip(summary, 400)
    assert article.topic == " ".join(topic.split())
    assert _without_leading_blank_lines(article.body) == _without_leading_blank_lines(body)
    assert not [w for w in article.warnings if "no title" in w or "no summary" in w]
    # Rewriting what was read (as compile and lint --fix do) changes nothing any more.
    again = render_article(article.meta, article.body)
    assert render_article(parse_article(again, "t/p.md").meta, parse_article(again, "t/p.md").body) == again
    if not body[:1].isspace():
        assert again == text


@FEWER
@given(title=nonblank, body=bodies, extra=st.dictionaries(extra_keys, extra_values, max_size=3))
def test_write_article_round_trips_through_the_disk(title, body, extra):
    with tempfile.TemporaryDirectory() as tmp:
        wiki = Path(tmp) / "wiki"
        meta = {"title": title, "summary": "s", **extra}
        write_article(wiki, "notes/page.md", meta, body)
        article = load_article(wiki, "notes/page.md")
        assert article.meta == meta
        assert _without_leading_blank_lines(article.body) == _without_leading_blank_lines(body)
        assert article.topic == "notes"  # no topic key: the folder
        assert not list(wiki.rglob(f"{TEMP_PREFIX}*"))


@pytest.mark.parametrize("name", sorted(RESERVED_NAMES))
def test_write_article_refuses_reserved_names(tmp_path, name):
    with pytest.raises(ArticleFormatError):
        write_article(tmp_path / "wiki", name, {"title": "x"}, "x")
    assert not (tmp_path / "wiki" / name).exists()


@PROPS
@given(fm=st.text(max_size=200))
def test_split_frontmatter_raises_only_article_format_errors(fm):
    try:
        meta, body = split_frontmatter(f"---\n{fm}\n---\nbody\n", "x.md")
    except ArticleFormatError:
        return
    assert isinstance(meta, dict) and isinstance(body, str)


# -- catalog ------------------------------------------------------------------------------------

def _folded(s: str) -> str:
    return " ".join(s.split())


titles = st.one_of(
    st.sampled_from(["[x]", "a]b", "[", "]", "\\", "a\\", "\\]", "x](y.md)", "[A](b.md) — c", "日本語", "🚀"]),
    st.text(max_size=40),
).map(_folded).filter(bool)
summaries = st.one_of(
    st.sampled_from(["— dash", "-- two", "- one", ": colon", "a — b — c", "–", "—", "", "](x.md)"]),
    st.text(max_size=60),
)
segment = st.builds(lambda a, b: a + b, st.sampled_from("abc019"), st.text("abz09_-", max_size=12))
entries = st.builds(
    lambda topic, folder, slug, title, summary: CatalogEntry(f"{folder}/{slug}.md", title, summary, topic),
    st.one_of(segment, titles), segment, segment, titles, summaries,
)


@FEWER
@given(st.lists(entries, max_size=12, unique_by=lambda e: e.path))
@example([CatalogEntry("a/b.md", "[x] \\ y]", "— starts with a dash", "a")])
@example([CatalogEntry("a/b.md", "t", "", "## not a topic"), CatalogEntry("a/c.md", "u", "x", "## not a topic")])
def test_master_index_round_trips(entries):
    text = render_master_index(Catalog(entries))
    parsed = parse_master_index(text)
    assert not parsed.warnings
    got = {e.path: e for e in parsed.entries}
    assert set(got) == {e.path for e in entries}
    for entry in entries:
        back = got[entry.path]
        assert back.title == entry.title
        assert back.summary == _folded(entry.summary)
        assert back.topic == _folded(entry.topic)
    assert render_master_index(parsed) == text


@PROPS
@given(st.text(max_size=400))
@example("- [a](../../etc/passwd.md) — x\n- [b](/etc/x.md)\n- [c](a.md)\n- [c](a.md)\n## \n- [\\](x.md)")
def test_parse_master_index_never_raises_and_keeps_only_safe_paths(text):
    catalog = parse_master_index(text)
    for entry in catalog.entries:
        assert normalize_wiki_path(entry.path) == entry.path
    assert len({e.path for e in catalog.entries}) == len(catalog.entries)


# -- paths --------------------------------------------------------------------------------------

hostile_paths = st.one_of(
    st.text(max_size=60),
    st.sampled_from([
        "../../etc/passwd", "../../etc/passwd.md", "/etc/x.md", ".kaas/state.md", "wiki/../../x.md",
        "a/\x00b.md", "a\\..\\b.md", "%2e%2e/x.md", "%2e%2e%2fx.md", "..%2fx.md", "C:/x.md", "c:\\x.md",
        "~/x.md", "./a/./b.md", "a//b.md", "/wiki/a.md", "wiki/a.md", "a.md#frag", "a.md?q=1",
        "..", ".", "", "/", "a/.hidden.md", ".md", "a/..md", "%00.md", "a%2f..%2f..%2fb.md",
        "%252e%252e/x.md", " a.md", "a.md ", "\u202eevil.md", "a/b/../c.md",
    ]),
    st.lists(st.sampled_from(["..", ".", "", "a", "b.md", ".kaas", "wiki", "%2e%2e", "\\", "x.md"]),
             min_size=1, max_size=5).map("/".join),
)


def _assert_safe_rel(rel: str) -> None:
    assert isinstance(rel, str) and rel
    assert not rel.startswith("/") and "\\" not in rel and not re.match(r"^[A-Za-z]:", rel)
    assert not any(ord(ch) < 32 for ch in rel)
    parts = rel.split("/")
    assert all(p and p not in (".", "..") and not p.startswith(".") for p in parts)
    assert PurePosixPath(rel).as_posix() == rel and rel.endswith(".md")


@PROPS
@given(hostile_paths)
def test_normalize_wiki_path_is_safe_or_refuses(raw):
    try:
        rel = normalize_wiki_path(raw)
    except UnsafePathError as exc:
        assert exc.message
        return
    _assert_safe_rel(rel)


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=hostile_paths)
def test_safe_wiki_file_stays_inside_the_wiki(tmp_path, raw):
    wiki = tmp_path / "wiki"
    wiki.mkdir(exist_ok=True)
    try:
        rel, file = safe_wiki_file(wiki, raw)
    except UnsafePathError:
        return
    _assert_safe_rel(rel)
    root = wiki.resolve()
    assert root in file.parents and file == (root / rel).resolve()


@PROPS
@given(st.text(max_size=200), st.sampled_from(["untitled", "answer", "x"]))
@example("../../etc/passwd", "untitled")
@example(".kaas", "untitled")
@example("ＡＢＣ ① ﬁ", "untitled")  # compatibility forms fold to ASCII
@example("-" * 200, "untitled")
@example("a" * 79 + "-b", "untitled")
@example("WIKI", "untitled")  # found by hypothesis: a topic folder "wiki" could not be addressed
def test_slugify_is_always_a_safe_slug(text, fallback):
    slug = slugify(text, fallback)
    assert SLUG.fullmatch(slug), slug
    assert len(slug) <= MAX_SLUG_LENGTH
    # "wiki/<path>" is how models and people name a page (the prefix is dropped), so a first
    # folder named "wiki" cannot be addressed: compile gives such a topic another folder.
    folder = topic_folder(slug)
    assert normalize_wiki_path(f"{folder}/{slug}.md") == f"{folder}/{slug}.md"
    assert slugify(slug, fallback) == slug  # idempotent


# -- markdown_text ------------------------------------------------------------------------------

@PROPS
@given(st.text(max_size=300), st.integers(min_value=2, max_value=300))
def test_clip_respects_the_limit_and_folds_whitespace(text, limit):
    out = clip(text, limit)
    assert len(out) <= limit
    assert "\n" not in out and "  " not in out
    if len(_folded(text)) <= limit:
        assert out == _folded(text)
    else:
        assert out.endswith("…")


@PROPS
@given(bodies)
def test_text_helpers_never_raise_and_stay_single_line(body):
    heading = first_heading(body)
    assert heading is None or "\n" not in heading
    sentence = first_sentence(body, 200)
    assert len(sentence) <= 200 and "\n" not in sentence
    assert "\n" not in plain_text(body)
    sections = split_sections(body)
    # Every non-blank line outside the sections' text would be lost content.
    joined = "\n".join(s.text for s in sections)
    for line in body.splitlines():
        if line.strip():
            assert line in joined
