"""What is a document: the one registry of the formats ``kaas compile`` reads, and of the files
that are not documents, used by compile (``ingest``), ``kaas add`` and the server's upload.

A file is judged by its type first, then by its content:

- **By name** (``reader_for``): the extension (or, for build files, the whole name) says which
  reader reads it. ``DEFAULT_RULES`` lists, in gitignore syntax, what is left out by type:
  images, fonts, stylesheets, source code, build and configuration files, audio and video,
  compiled binaries, hidden files and folders, build-output and tool folders. These are the
  first rules of ``raw/.kaasignore`` (``compile/kaasignore.py``): a user's ``!pattern`` there
  brings such a file back (source code and build files are then read as code).
- **By content** (``content_reason``): a text file whose extension does not tell (``.txt``, none,
  an unknown one) is read only when its text is prose: an SVG image, text that is mostly markup
  tags, or text that is mostly lines of code or configuration is left out, whatever its name.

A file left out is not an error: it is reported once per reason (``LEFT_OUT_REASONS``), with a
count and a few examples. Formats kaas cannot read (``.doc``, ``.xls``, ``.ppt``, ...) are
documents all the same: those are skipped one by one with their reason, so a user can convert
them.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

import pathspec

MARKDOWN_EXT = {".md", ".markdown", ".mdown", ".mkd"}
RST_EXT = {".rst", ".rest"}
# Text files that may be reST (Sphinx projects once named their sources ``index.txt``): read as
# reST when they use reST's own constructs and docutils reads them without an error.
RST_TEXT_EXT = {".txt", ".text"}
# Text read as written, without a content check: tables, data and logs are meant to be read.
PLAIN_EXT = {".json", ".yaml", ".yml", ".log", ".adoc"}
# Office formats, e-books and tables: read by ``formats/office.py`` (and ``formats/docx.py``).
OFFICE_READERS = {".docx": "docx", ".pptx": "pptx", ".xlsx": "xlsx", ".odt": "odt", ".epub": "epub",
                  ".rtf": "rtf", ".csv": "csv", ".tsv": "csv"}
# The readers that are handed the file's bytes (zip-based or binary), not decoded text.
BINARY_READERS = frozenset({"archive", "docx", "pdf", "pptx", "xlsx", "odt", "epub"})
TEXT_EXT = RST_TEXT_EXT | PLAIN_EXT | {".org"}
HTML_EXT = {".html", ".htm", ".xhtml"}
ARCHIVE_EXT = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
# Document formats kaas cannot read, and compressed files that are not archives: skipped one by
# one ("binary file (.doc)"), never taken for text.
BINARY_EXT = {
    ".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".webp", ".ico", ".heic", ".svgz",
    ".mp3", ".wav", ".flac", ".ogg", ".m4a", ".mp4", ".mov", ".avi", ".mkv", ".webm",
    ".exe", ".dll", ".so", ".dylib", ".bin", ".o", ".a", ".class", ".jar", ".pyc", ".wasm",
    ".gz", ".bz2", ".xz", ".7z", ".rar", ".zst", ".dmg", ".iso", ".img",
    ".doc", ".xls", ".ppt", ".ods", ".odp", ".sqlite", ".db",
    ".ttf", ".otf", ".woff", ".woff2", ".psd", ".ai", ".sketch", ".fig",
}
READABLE = ("Markdown, reStructuredText, text, Org, HTML, PDF, DOCX, PPTX, XLSX, CSV, ODT, EPUB, RTF "
            "and zip/tar archives")

HIDDEN_FILE, HIDDEN_FOLDER = "hidden file", "hidden folder"
TOOL_FOLDER = "build output or tool folder"
IMAGE, CODE, BUILD = "image", "source code", "build or configuration file"
SVG_CONTENT = "image (SVG content)"
MARKUP_CONTENT = "markup, not prose (by content)"
CODE_CONTENT = "code or configuration, not prose (by content)"
IGNORED = "ignored by raw/.kaasignore"


def _ext(*names: str) -> list[str]:
    return [f"*.{n}" for n in names]


# (reason, gitignore patterns), matched against the lower-cased path below raw/. A later group
# wins over an earlier one (``conf.py`` is a build file, not just source code).
_GROUPS: list[tuple[str, list[str]]] = [
    (IMAGE, _ext("svg", "svgz", "png", "jpg", "jpeg", "gif", "bmp", "tif", "tiff", "webp", "ico", "icns", "heic",
                 "heif", "avif", "psd", "ai", "eps", "xcf", "sketch", "fig", "drawio")),
    ("font", _ext("ttf", "otf", "woff", "woff2", "eot", "pfb", "afm")),
    ("stylesheet", _ext("css", "scss", "sass", "less", "styl", "xsl", "xslt")),
    (CODE, _ext("py", "pyi", "pyx", "pxd", "ipynb", "js", "mjs", "cjs", "jsx", "ts", "tsx", "vue", "svelte",
                "c", "h", "cc", "cpp", "cxx", "hpp", "hh", "hxx", "m", "mm", "cs", "fs", "java", "kt", "kts",
                "scala", "groovy", "go", "rs", "rb", "php", "pl", "pm", "swift", "lua", "r", "jl", "dart",
                "hs", "ml", "mli", "ex", "exs", "erl", "clj", "cljs", "elm", "nim", "zig", "f90", "f", "for",
                "sh", "bash", "zsh", "fish", "ps1", "psm1", "bat", "cmd", "vbs", "sql", "tcl", "asm", "s",
                "map", "tmpl", "j2", "jinja", "jinja2")),
    (BUILD, ["makefile", "gnumakefile", *_ext("mk", "cmake", "toml", "cfg", "ini", "conf", "properties",
                                               "lock", "gradle", "csproj", "sln", "vcxproj"),
             "cmakelists.txt", "dockerfile", "containerfile", "vagrantfile", "jenkinsfile", "procfile",
             "gemfile", "rakefile", "brewfile", "pipfile", "manifest.in", "conf.py", "setup.py", "noxfile.py",
             "fabfile.py", "make.bat", "requirements*.txt", "requirements*.in", "constraints*.txt",
             "package.json", "package-lock.json", "npm-shrinkwrap.json", "composer.json", "tsconfig*.json",
             "jsconfig.json", "pnpm-lock.yaml", "go.mod", "go.sum", "mkdocs.yml", "mkdocs.yaml",
             "_config.yml", "environment.yml", "environment.yaml", "docker-compose.yml",
             "docker-compose.yaml", "pom.xml", "build.xml"]),
    ("audio or video", _ext("mp3", "wav", "flac", "ogg", "oga", "m4a", "aac", "opus", "mid", "midi", "mp4",
                            "m4v", "mov", "avi", "mkv", "webm", "wmv")),
    ("compiled or binary file", _ext("exe", "dll", "so", "dylib", "o", "obj", "a", "lib", "class", "jar", "war",
                                     "pyc", "pyo", "pyd", "wasm", "mo", "pickle", "pkl", "npy", "npz",
                                     "parquet", "whl", "egg", "doctree")),
    (TOOL_FOLDER, ["_build/", "node_modules/", "__pycache__/", "site-packages/", "bower_components/",
                   "*.egg-info/", ".ipynb_checkpoints/"]),
    ("hidden", [".*"]),
]
# Source code, stylesheets and build files a user asks for (``!pattern``) are read as code; a
# document may include them (``literalinclude``) although they are not sources themselves.
_AS_CODE = {CODE, "stylesheet", BUILD}
INCLUDABLE_REASONS = frozenset(_AS_CODE)
LEFT_OUT_REASONS = frozenset({r for r, _ in _GROUPS if r != "hidden"} | {
    HIDDEN_FILE, HIDDEN_FOLDER, SVG_CONTENT, MARKUP_CONTENT, CODE_CONTENT, IGNORED})


def _compile_groups() -> tuple[pathspec.PathSpec, list[str]]:
    lines: list[str] = []
    reasons: list[str] = []
    for reason, patterns in _GROUPS:
        lines += patterns
        reasons += [reason] * len(patterns)
    return pathspec.GitIgnoreSpec.from_lines(lines), reasons


DEFAULT_RULES, _RULE_REASONS = _compile_groups()


def default_reason(rel: str, *, is_dir: bool = False) -> str | None:
    """Why the file (or folder) at ``rel`` (a path below raw/, or inside an archive) is not a
    document by its type, or None."""
    path = rel.lower().rstrip("/") + ("/" if is_dir else "")
    result = DEFAULT_RULES.check_file(path)
    if not result.include:
        return None
    reason = _RULE_REASONS[result.index]
    if reason == "hidden":
        return HIDDEN_FOLDER if is_dir else HIDDEN_FILE
    return reason


def is_left_out(reason: str | None) -> bool:
    """A reason that says the file is not a document (reported by group), not that it failed."""
    return reason in LEFT_OUT_REASONS


# ---------------------------------------------------------------------------------------------
# which reader


def reader_for(name: str) -> str | None:
    """The reader of a file by its name: ``archive``, ``docx``, ``pptx``, ``xlsx``, ``odt``,
    ``epub``, ``rtf``, ``csv`` (``.csv``, ``.tsv``), ``pdf``, ``html``, ``markdown``,
    ``rst``, ``org``, ``rst-or-text`` (``.txt``), ``plain`` (tables, data, logs), ``code``
    (source, stylesheets, build files: read only when asked for), ``text`` (no or an unknown
    extension: read when its content is prose); None for a format kaas cannot read."""
    lower = PurePosixPath(name).name.lower()
    suffix = PurePosixPath(lower).suffix
    if lower.endswith(ARCHIVE_EXT):
        return "archive"
    fixed = {**OFFICE_READERS, ".pdf": "pdf", ".org": "org"}
    if suffix in fixed:
        return fixed[suffix]
    if default_reason(lower) in _AS_CODE:
        return "code"
    if suffix in BINARY_EXT:
        return None
    for reader, exts in (("html", HTML_EXT), ("markdown", MARKDOWN_EXT), ("rst", RST_EXT),
                         ("rst-or-text", RST_TEXT_EXT), ("plain", PLAIN_EXT)):
        if suffix in exts:
            return reader
    return "text"


# What a code block of a file read as code is labelled with (the rest: its extension).
_FENCE_LANGUAGE = {".py": "python", ".js": "javascript", ".ts": "typescript", ".rs": "rust", ".rb": "ruby",
                   ".sh": "bash", ".yml": "yaml", ".h": "c", ".hpp": "cpp", ".cc": "cpp", ".md": "markdown"}


def fence_language(name: str) -> str:
    lower = PurePosixPath(name).name.lower()
    suffix = PurePosixPath(lower).suffix
    if lower in ("makefile", "gnumakefile") or suffix == ".mk":
        return "make"
    return _FENCE_LANGUAGE.get(suffix, suffix.lstrip("."))


# ---------------------------------------------------------------------------------------------
# by content

_SVG_ROOT = re.compile(r"\A(?:<\?xml[^>]{0,500}>\s*)?(?:<!--.{0,5000}?-->\s*|<!DOCTYPE[^>]{0,1000}>\s*)*<svg\b",
                       re.I | re.S)
_TAG = re.compile(r"</?[A-Za-z][\w:.-]{0,40}(?:\s[^<>]{0,2000})?/?>|<!--.{0,2000}?-->", re.S)
# A line that is code or configuration: a statement keyword, an assignment, a CSS declaration or
# selector, a bracket or semicolon ending it, a string item of a list.
_CODE_LINE = re.compile(
    r"""^\s*(?:(?:def|class|import|from\s+[\w.]+\s+import|return|elif|except|try:|finally:|raise|yield|async\s+def
        |\#include|\#define|\#if|\#endif|function|const|let|var|export|module\.exports|require\(|public|private
        |protected|static|package|func|fn|use\s|impl|struct|enum|interface|namespace|typedef|echo|set\s+-|fi$|done$
        |@[\w.]+\(?|\$\w+\s*=)\b
      |[\w.$\[\]"'-]+\s*[-+*/:|]?=\s*\S
      |[\w-]+\s*:\s*[^;\n]{0,200};\s*$
      |[^\n]{0,200}[{};]\s*$|[\[\]()]+,?\s*$|[\])]\s*[;,]?\s*$
      |["'][^"'\n]{0,200}["']\s*[,:]
    )""", re.X)
_WORD = re.compile(r"[^\W\d_]{2,}")
_SYMBOL = re.compile(r"[=(){}\[\]<>;:\"$_/\\|*#@`+~^%&]")


def _is_prose(line: str) -> bool:
    """A line of running text: five words or more, and hardly any of the symbols code is made of."""
    return len(_WORD.findall(line)) >= 5 and len(_SYMBOL.findall(line)) <= 0.05 * len(line.strip())


def content_reason(reader: str, text: str) -> str | None:
    """Why a text read by ``reader`` is not a document by its content, or None: an SVG image
    (whatever its name), or, for a file whose extension does not tell (``text``, ``rst-or-text``),
    text that is mostly markup tags or mostly lines of code or configuration. Prose with some
    code in it is a document: it is left out only when code lines are at least half of its
    lines and prose lines under a quarter."""
    head = text[:64_000].lstrip("\ufeff \t\r\n")
    if reader in ("code", "html", "rtf", "csv") or reader in BINARY_READERS:
        return None
    if _SVG_ROOT.match(head):
        return SVG_CONTENT
    if reader not in ("text", "rst-or-text"):
        return None
    visible = len(re.sub(r"\s+", "", head))
    tags = _TAG.findall(head)
    if len(tags) >= 5 and sum(len(re.sub(r"\s+", "", t)) for t in tags) >= 0.5 * visible:
        return MARKUP_CONTENT
    lines = [line for line in head.split("\n")[:2000] if line.strip()]
    if len(lines) < 3:
        return None
    code = prose = 0
    for line in lines:
        if _is_prose(line):
            prose += 1
        elif _CODE_LINE.match(line):
            code += 1
    if code >= 0.5 * len(lines) and prose < 0.25 * len(lines):
        return CODE_CONTENT
    return None
