"""Ingest edge cases that lost or garbled text, or kept a source failing on every compile
(red-team finding B13): the text cut counted characters while the article limit counts bytes;
a long single line was cut to nothing; a NUL past the first 8 KB reached the article; one stray
byte turned a UTF-8 file into Windows-1252 mojibake; UTF-16 was "binary"; titles without Latin
letters became ``untitled``, ``untitled-2``, ... in whatever order the sources came."""

from __future__ import annotations

from click.testing import CliRunner

from kb_ai.cli import cli
from kb_ai.compile.ingest import SkippedSource, Source, read_source, walk_raw
from kb_ai.store.articles import MAX_ARTICLE_BYTES


def put(kb, rel: str, data: bytes):
    file = kb / "raw" / rel
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_bytes(data)


def read(kb, rel: str):
    [raw] = [r for r in walk_raw(kb) if r.path == f"raw/{rel}"]
    return read_source(raw)


def compile_offline(kb):
    return CliRunner().invoke(cli, ["--kb", str(kb), "compile", "--offline"])


def test_non_ascii_text_is_cut_to_fit_an_article_and_compiles(tmp_path):
    put(tmp_path, "notes/cyr.txt", ("Привет мир, это длинный текст.\n" * 40_000).encode("utf-8"))  # 2.5 MB
    source = read(tmp_path, "notes/cyr.txt")
    assert isinstance(source, Source)
    assert len(source.text.encode("utf-8")) < MAX_ARTICLE_BYTES * 0.9
    assert any("text cut at" in note and "bytes" in note for note in source.notes), source.notes
    result = compile_offline(tmp_path)
    assert result.exit_code == 0, result.output
    [article] = list((tmp_path / "wiki" / "notes").glob("*.md"))
    assert article.stat().st_size < MAX_ARTICLE_BYTES


def test_a_title_then_one_long_line_keeps_the_line(tmp_path):
    put(tmp_path, "notes/one-line.md", b"# Title\n\n" + b"word " * 600_000)  # 3 MB, one line
    source = read(tmp_path, "notes/one-line.md")
    assert isinstance(source, Source), source.reason if isinstance(source, SkippedSource) else ""
    assert source.title == "Title" and source.text.count("word") > 100_000


def test_a_nul_past_the_first_8_kb_is_removed_and_noted(tmp_path):
    put(tmp_path, "notes/nul.txt", b"Plain words here. " * 1_000 + b"\x00" + b"More words after.\n")
    source = read(tmp_path, "notes/nul.txt")
    assert isinstance(source, Source) and "\x00" not in source.text and "More words after." in source.text
    assert "1 NUL character removed" in source.notes
    result = compile_offline(tmp_path)
    assert result.exit_code == 0, result.output


def test_one_stray_byte_does_not_turn_utf8_into_windows_1252(tmp_path):
    put(tmp_path, "notes/menu.md", "# Café menu\n\nCrème brûlée and café au lait.\n".encode("utf-8") + b"\xff tail\n")
    source = read(tmp_path, "notes/menu.md")
    assert isinstance(source, Source) and source.title == "Café menu"
    assert "Crème brûlée" in source.text
    assert any("not UTF-8" in note and "U+FFFD" in note for note in source.notes), source.notes


def test_utf16_text_is_read(tmp_path):
    text = "# Notes\n\nSaved by Notepad: words and more words.\r\n"
    put(tmp_path, "notes/bom.txt", b"\xff\xfe" + text.encode("utf-16-le"))
    put(tmp_path, "notes/nobom.txt", text.encode("utf-16-le"))
    for name in ("bom.txt", "nobom.txt"):
        source = read(tmp_path, f"notes/{name}")
        assert isinstance(source, Source), source.reason if isinstance(source, SkippedSource) else ""
        assert "Saved by Notepad" in source.text


def test_titles_without_latin_letters_get_stable_distinct_slugs(tmp_path):
    put(tmp_path, "notes/zametki.md", "# Заметки\n\nПервый текст о работе.\n".encode("utf-8"))
    put(tmp_path, "notes/日記.md", "# 日記\n\n今日は良い天気でした。とても楽しい一日。\n".encode("utf-8"))
    put(tmp_path, "notes/其他.md", "# 其他\n\n这是另一篇中文笔记，内容不同。\n".encode("utf-8"))
    result = compile_offline(tmp_path)
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in (tmp_path / "wiki" / "notes").glob("*.md"))
    assert len(names) == 3 and "zametki.md" in names, names  # the file name when the title has no Latin
    others = [n for n in names if n != "zametki.md"]
    assert all(n.startswith("untitled-") and len(n) == len("untitled-12345678.md") for n in others), names
