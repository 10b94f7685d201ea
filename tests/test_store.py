"""The wiki store: articles, safe paths, the catalog, init and config, on real files."""

from __future__ import annotations

import datetime as dt
import os
import time

import pytest

from kb_ai.config import load_settings
from kb_ai.errors import ArticleFormatError, ConfigError, EmptyCatalogError, NoWikiError, PageNotFoundError, UnsafePathError
from kb_ai.store.articles import load_article, parse_article, render_article, write_article
from kb_ai.store.catalog import build_catalog, parse_master_index, render_master_index
from kb_ai.store.kb import KnowledgeBase, init_kb
from kb_ai.store.pages import load_page
from kb_ai.store.access import OWNER
from kb_ai.store.paths import normalize_wiki_path, safe_wiki_file, slugify

from helpers import write_page


def test_article_round_trip_keeps_key_order_and_body(tmp_path):
    text = (
        "---\nzeta: 1\ntitle: Reciprocal rank fusion\nsummary: Fusing rankings.\ntopic: retrieval\n"
        "tags: [ranking, fusion]\nupdated: 2026-11-30\n---\n# Reciprocal rank fusion\n\n  indented line\n\n---\n\ntrailing rule above\n"
    )
    article = parse_article(text, "retrieval/rrf.md")
    assert list(article.meta) == ["zeta", "title", "summary", "topic", "tags", "updated"]
    assert article.meta["updated"] == dt.date(2026, 11, 30)
    assert "  indented line" in article.body and "trailing rule above" in article.body
    write_article(tmp_path, "retrieval/rrf.md", article.meta, article.body)
    again = (tmp_path / "retrieval/rrf.md").read_text(encoding="utf-8")
    assert again == text
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".kaas-tmp-")]


def test_atomic_writes_keep_normal_permissions(tmp_path):
    write_article(tmp_path, "a/new.md", {"title": "New"}, "# New\n")
    assert (tmp_path / "a/new.md").stat().st_mode & 0o777 == 0o666 & ~_umask()
    (tmp_path / "a/new.md").chmod(0o640)
    write_article(tmp_path, "a/new.md", {"title": "New"}, "# Changed\n")
    assert (tmp_path / "a/new.md").stat().st_mode & 0o777 == 0o640


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def test_missing_fields_get_defaults_and_warnings():
    article = parse_article("# Hand Written Page\n\nThis page was written by hand. It has no frontmatter.\n", "notes/hand.md")
    assert article.title == "Hand Written Page"
    assert article.summary == "This page was written by hand."
    assert article.topic == "notes"
    assert any("no title" in w for w in article.warnings) and any("no summary" in w for w in article.warnings)
    bare = parse_article("just words without a heading or period", "my_page-name.md")
    assert bare.title == "My page name" and bare.topic == "general"


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("---\ntitle: [unclosed\n---\nbody\n", "malformed frontmatter"),
        ("---\n- a list\n- not a mapping\n---\nbody\n", "must be a mapping"),
        ("---\na: &x [1, 2]\nb: *x\n---\nbody\n", "aliases are not allowed"),
        ("---\ntitle: " + "x" * 70_000 + "\n---\nbody\n", "frontmatter larger"),
    ],
)
def test_bad_frontmatter_names_the_file(text, fragment):
    with pytest.raises(ArticleFormatError) as info:
        parse_article(text, "topic/broken.md")
    assert "topic/broken.md" in info.value.message and fragment in info.value.message


def test_non_utf8_article_is_reported(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "latin.md").write_bytes("# Caf\xe9\n".encode("latin-1"))
    with pytest.raises(ArticleFormatError, match="not UTF-8"):
        load_article(tmp_path, "t/latin.md")


@pytest.mark.parametrize(
    "raw", ["../secret.md", "a/../../x.md", "/etc/passwd.md", "C:/x.md", "a\\b.md", "%2e%2e/x.md", "a/.hidden.md", "a/b.txt", "", "a/\x00.md"]
)
def test_hostile_paths_are_refused(raw):
    with pytest.raises(UnsafePathError):
        normalize_wiki_path(raw)


def test_path_forms_people_and_models_write_are_normalized():
    assert normalize_wiki_path("wiki/a/b.md") == "a/b.md"
    assert normalize_wiki_path("./a/b.md#section") == "a/b.md"
    assert normalize_wiki_path("/wiki/a/b%20c.md") == "a/b c.md"
    assert slugify("Ünïcode & Friends: v2!") == "unicode-friends-v2"
    assert slugify("../../etc") == "etc"


def test_symlink_out_of_the_wiki_is_refused(tmp_path):
    wiki = tmp_path / "wiki"
    wiki.mkdir()
    outside = tmp_path / "secret.md"
    outside.write_text("---\ntitle: Secret\n---\nsecret")
    (wiki / "link.md").symlink_to(outside)
    with pytest.raises(UnsafePathError):
        safe_wiki_file(wiki, "link.md")
    assert build_catalog(wiki).entries == []


def test_catalog_render_parse_round_trip(tmp_path):
    wiki = tmp_path / "wiki"
    write_page(wiki, "b/two.md", "Two [draft]", "Second page — with a dash.", "# Two\n")
    write_page(wiki, "a/one.md", "One", "First page.", "# One\n")
    write_page(wiki, "b/three.md", None, None, "# Three\n\nWritten by hand. More text.")
    catalog = build_catalog(wiki)
    text = render_master_index(catalog)
    assert text.index("## a") < text.index("## b")
    assert "- [Two \\[draft\\]](b/two.md) — Second page — with a dash." in text
    parsed = parse_master_index(text)
    assert [(e.path, e.title, e.summary, e.topic) for e in parsed.entries] == [
        (e.path, e.title, e.summary, e.topic) for e in catalog.entries
    ]
    assert any("b/three.md: no title" in w for w in catalog.warnings)


def test_malformed_article_is_skipped_by_index_with_its_name(tmp_path):
    wiki = tmp_path / "wiki"
    write_page(wiki, "a/good.md", "Good", "Fine.", "# Good\n")
    (wiki / "a" / "bad.md").write_text("---\ntitle: [oops\n---\n")
    result = KnowledgeBase(tmp_path).reindex()
    assert result.articles == 1
    assert any("a/bad.md" in w and "malformed" in w for w in result.warnings)
    assert "index: 1 articles in 1 topics" in (wiki / "log.md").read_text()


def test_catalog_store_reloads_when_master_index_changes(sample_kb):
    first = sample_kb.catalog()
    assert sample_kb.catalog() is first  # cached while unchanged
    write_page(sample_kb.wiki_dir, "ops/new.md", "New page", "Added later.", "# New page\n")
    time.sleep(0.01)
    sample_kb.reindex()
    second = sample_kb.catalog()
    assert second is not first and "ops/new.md" in second


def test_catalog_lines_for_missing_files_are_dropped(sample_kb):
    os.remove(sample_kb.wiki_dir / "ops/deployment.md")
    text = sample_kb.master_index.read_text() + "\n- [Evil](../../etc/passwd.md) — nope\n"
    sample_kb.master_index.write_text(text)
    catalog = sample_kb.catalog()
    assert "ops/deployment.md" not in catalog
    assert len(catalog) == 3
    assert any("does not exist" in w for w in catalog.warnings)
    assert any("leaves the wiki" in w for w in catalog.warnings)


def test_kb_errors(tmp_path):
    kb = KnowledgeBase(tmp_path)
    with pytest.raises(NoWikiError):
        kb.catalog()
    (tmp_path / "wiki").mkdir()
    with pytest.raises(EmptyCatalogError):
        kb.require_catalog()
    with pytest.raises(PageNotFoundError):
        load_page(kb, "a/missing.md", OWNER)


def test_init_creates_skeleton_and_never_overwrites(tmp_path):
    created = init_kb(tmp_path / "kb")
    names = {p.name for p in created}
    assert {"raw", "wiki", "kaas.toml", "master-index.md"} <= names
    (tmp_path / "kb" / "kaas.toml").write_text('model = "openai/x"\n')
    assert init_kb(tmp_path / "kb") == []
    assert (tmp_path / "kb" / "kaas.toml").read_text() == 'model = "openai/x"\n'


def test_settings_env_overrides_toml(tmp_path):
    (tmp_path / "kaas.toml").write_text('model = "openai/from-toml"\nkaas_api_base = "http://127.0.0.1:1/v1"\nread_budget = 5000\n')
    settings = load_settings(tmp_path, env={})
    assert settings.model == "openai/from-toml" and settings.api_base == "http://127.0.0.1:1/v1"
    assert settings.read_budget == 5000 and not settings.offline
    settings = load_settings(tmp_path, env={"KAAS_MODEL": "openai/from-env", "KAAS_READ_BUDGET": "7000"})
    assert settings.model == "openai/from-env" and settings.read_budget == 7000
    assert load_settings(tmp_path / "nothing", env={}).offline


@pytest.mark.parametrize("toml, message", [("model = [", "not valid TOML"), ("colour = 1", "unknown setting"), ("max_pages = -1", "invalid value")])
def test_bad_settings_are_clear_errors(tmp_path, toml, message):
    (tmp_path / "kaas.toml").write_text(toml)
    with pytest.raises(ConfigError, match=message):
        load_settings(tmp_path, env={})


def test_render_article_without_meta_is_just_the_body():
    assert render_article({}, "# T\n\nx\n\n") == "# T\n\nx\n"


def test_plain_text_keeps_underscores_inside_words():
    from kb_ai.store.markdown_text import plain_text

    assert plain_text("Set `KAAS_MODEL` and _max_pages_ or **bold** [link](x.md).") == "Set KAAS_MODEL and max_pages or bold link."


def test_zero_retries_is_a_valid_setting(tmp_path):
    assert load_settings(tmp_path, env={"KAAS_MAX_RETRIES": "0"}).max_retries == 0
    with pytest.raises(ConfigError):
        load_settings(tmp_path, env={"KAAS_MAX_PAGES": "0"})
