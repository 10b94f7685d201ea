"""Prompt files: one Jinja2 file per prompt in ``prompts/``, with a ``system`` and a ``user`` block.

Lookup order: ``KAAS_PROMPTS_DIR`` (settings.prompts_dir), the copy shipped inside the installed
package (``kb_ai/prompts``), then the source checkout's ``prompts/``. A prompt's version is the
hash of its file, so state that depends on a prompt can notice when it changes.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from pathlib import Path

import jinja2

from kb_ai.errors import ConfigError
from kb_ai.resources import shipped_dir


# Closing tags of the elements prompts wrap data in (prompts/*.md): text from pages, catalogs,
# conversations and answers must not be able to close its element and pose as instructions.
_DATA_CLOSERS = re.compile(r"</(catalog|pages?|topics|conversation|answer)", re.IGNORECASE)


def delimit_data(text: str) -> str:
    """Keep data inside its delimiters: ``</page>`` in a page becomes ``<\\/page>``."""
    return _DATA_CLOSERS.sub(r"<\\/\1", text)


def default_prompts_dir() -> Path:
    found = shipped_dir("prompts", "answer.md")
    if found is None:
        raise ConfigError("prompt files not found: reinstall kaas or set KAAS_PROMPTS_DIR")
    return found


class PromptLibrary:
    """Loads and renders prompt files. Rendering never puts untrusted text into template syntax:
    page and source text are passed as variables, so a ``{{`` inside a source stays literal."""

    def __init__(self, directory: Path | None = None):
        self.directory = Path(directory) if directory else default_prompts_dir()
        if not self.directory.is_dir():
            raise ConfigError(f"prompts folder not found: {self.directory}")
        self._env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(self.directory)),
            undefined=jinja2.StrictUndefined,
            autoescape=False,
            keep_trailing_newline=False,
            trim_blocks=True,
            lstrip_blocks=True,
        )

    def _file(self, name: str) -> Path:
        path = self.directory / f"{name}.md"
        if not path.is_file():
            raise ConfigError(f"prompt file missing: {path}")
        return path

    def version(self, name: str) -> str:
        """Short content hash of the prompt file."""
        return hashlib.sha256(self._file(name).read_bytes()).hexdigest()[:12]

    def render(self, name: str, **variables) -> list[dict[str, str]]:
        """Render a prompt into chat messages: [system, user]."""
        self._file(name)
        template = self._env.get_template(f"{name}.md")
        context = template.new_context(variables)
        messages = []
        for role in ("system", "user"):
            if role not in template.blocks:
                raise ConfigError(f"prompt {name}.md has no {{% block {role} %}}")
            text = "".join(template.blocks[role](context)).strip()
            messages.append({"role": role, "content": text})
        return messages


@lru_cache(maxsize=8)
def prompt_library(directory: str | None = None) -> PromptLibrary:
    return PromptLibrary(Path(directory) if directory else None)
