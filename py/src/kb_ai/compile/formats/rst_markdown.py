"""A docutils document tree written as Markdown (the article text of a reST source).

Blocks become Markdown blocks (sections -> ``#`` headings by depth, literal blocks -> fenced
code, admonitions -> quoted notes, tables -> pipe tables, lists, definition lists, field lists);
inline nodes become Markdown inline text (emphasis, code spans, links). Targets, comments,
substitution definitions, images, raw passages and docutils' own messages are left out. A
field list before the first section (``:orphan:``, ``:tocdepth:``, ``:Date:``) is page
metadata: its date is kept, the rest dropped.
"""

from __future__ import annotations

import re

from docutils import nodes

from kb_ai.store.inline_markup import escape_block_start, escape_heading, escape_text
from kb_ai.store.markdown_text import plain_text

# The title is the first section's, when nothing but page metadata, targets and directives that
# show nothing comes before it (text before it makes it a section, not the document's title).

ADMONITIONS = {
    "note": "Note", "warning": "Warning", "tip": "Tip", "important": "Important", "caution": "Caution",
    "danger": "Danger", "error": "Error", "hint": "Hint", "attention": "Attention", "seealso": "See also",
}
_SKIP = (nodes.comment, nodes.system_message, nodes.target, nodes.substitution_definition, nodes.raw,
         nodes.pending, nodes.image, nodes.footnote_reference, nodes.citation_reference)


_SPACE_BEFORE_STOP = re.compile(r"(?<=\w) ++(?=[.,;:!?](?:\s|$))")


def _escape_cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _images_only(node: nodes.Node) -> bool:
    """An element with images and no text of its own (alt texts are not text)."""
    return not any(text.astext().strip() for text in node.findall(nodes.Text))


# Bibliographic fields (docutils' docinfo) a reader may ask about: kept as "**Author:** name";
# an abstract or a dedication is a paragraph of its own. Other page metadata (":orphan:",
# ":tocdepth:") is dropped.
BIBLIOGRAPHIC = {"author", "authors", "organization", "organisation", "address", "contact", "version", "revision",
                 "status", "date", "copyright", "license", "licence", "maintainer", "maintainers"}
PARAGRAPH_FIELDS = {"abstract", "dedication"}
_SUBSTITUTION = re.compile(r"\|[^|\n]++\|")


class MarkdownWriter:
    def __init__(self) -> None:
        self.title: str | None = None
        self.date: str | None = None
        self._docinfo: list[str] = []  # fields of a field list before the title, shown after it

    def render(self, document: nodes.document) -> str:
        blocks = self._children(document, depth=0, top=True)
        if self._docinfo:  # no title section took them
            blocks[:0] = self._docinfo
        self.title = self.title or None
        text = "\n\n".join(b for b in blocks if b.strip())
        return text.strip() + "\n" if text.strip() else ""

    # -- blocks --------------------------------------------------------------------------------

    def _children(self, node: nodes.Node, depth: int, top: bool = False) -> list[str]:
        out: list[str] = []
        seen_section = False
        for child in node.children:
            if top and not seen_section and isinstance(child, (nodes.field_list, nodes.docinfo)):
                self._metadata(child)
                continue
            if isinstance(child, nodes.section):
                seen_section = True
            blocks = self._block(child, depth)
            if top and not seen_section and any(b.strip() for b in blocks):
                self.title = self.title or ""  # text before the first section: that section is no title
            out.extend(blocks)
        return out

    def _block(self, node: nodes.Node, depth: int) -> list[str]:
        if isinstance(node, _SKIP):
            return []
        if isinstance(node, nodes.section):
            return self._section(node, depth)
        if isinstance(node, nodes.title):
            return [f"{'#' * min(6, depth + 1)} {escape_heading(self._inline(node))}"]
        if isinstance(node, (nodes.paragraph, nodes.line)):
            if _images_only(node):
                return []  # "|Build Status| |PyPI|" badges: images are not kept
            text = self._inline(node).strip()
            return [escape_block_start(text)] if text else []
        if isinstance(node, nodes.rubric):
            return [f"**{self._inline(node)}**"]
        if isinstance(node, (nodes.literal_block, nodes.doctest_block)):
            return [self._code(node)]
        if isinstance(node, nodes.math_block):
            return ["```math\n" + node.astext().strip("\n") + "\n```"]
        if isinstance(node, nodes.Admonition):
            return [self._admonition(node, depth)]
        if isinstance(node, (nodes.bullet_list, nodes.enumerated_list)):
            return [self._list(node, depth)]
        if isinstance(node, nodes.definition_list):
            return self._definitions(node, depth)
        if isinstance(node, nodes.field_list):
            return self._fields(node, depth)
        if isinstance(node, nodes.option_list):
            return self._options(node)
        if isinstance(node, nodes.table):
            return [self._table(node)]
        if isinstance(node, nodes.block_quote):
            inner = self._children(node, depth)
            return [self._quote("\n\n".join(inner))] if inner else []
        if isinstance(node, (nodes.topic, nodes.sidebar)):
            return [self._admonition(node, depth)]
        if isinstance(node, nodes.line_block):
            lines = [escape_block_start(self._inline(line).strip()) for line in node.findall(nodes.line)]
            return ["  \n".join(line for line in lines if line.strip())]
        if isinstance(node, nodes.transition):
            return ["---"]
        if isinstance(node, nodes.figure):
            return [f"*{self._inline(c)}*" for c in node.children if isinstance(c, nodes.caption)]
        if isinstance(node, (nodes.footnote, nodes.citation)):
            label = next((c.astext() for c in node.children if isinstance(c, nodes.label)), "")
            inner = [b for c in node.children if not isinstance(c, nodes.label) for b in self._block(c, depth)]
            return [f"[{label}] " + "\n\n".join(inner)] if inner else []
        if isinstance(node, nodes.Text):
            return [escape_block_start(escape_text(node.astext()))] if node.astext().strip() else []
        if isinstance(node, nodes.Inline) and _images_only(node):
            return []  # a linked block image (".. image:: badge.svg" with ":target:")
        if isinstance(node, nodes.Inline):
            text = self._inline_one(node).strip()
            return [text] if text else []
        if isinstance(node, nodes.TextElement):  # a caption, an attribution, a term out of place
            text = self._inline(node).strip()
            return [text] if text else []
        if isinstance(node, nodes.Element):
            return self._children(node, depth)
        return []

    def _metadata(self, node: nodes.Node) -> None:
        """A field list before the first section: page metadata. Its date is the page's; its
        bibliographic fields (author, version, copyright ...) are shown under the title."""
        from kb_ai.compile.readers import normalize_date  # noqa: PLC0415 (readers imports this module)

        for field in node.findall(nodes.field):
            name = field.children[0].astext().strip().lower() if field.children else ""
            if name in ("date", "updated", "last updated", "revised") and len(field.children) > 1:
                self.date = self.date or normalize_date(field.children[1].astext())
        if isinstance(node, nodes.field_list):
            self._docinfo.extend(self._fields(node, 0, docinfo=True, only_known=True))

    def _section(self, node: nodes.section, depth: int) -> list[str]:
        out: list[str] = []
        document_title = False
        opening = True  # still before the first block of the section (where docinfo stands)
        for child in node.children:
            if isinstance(child, nodes.title):
                heading = self._inline(child).strip()
                if self.title is None and heading:  # the first section, with nothing before it
                    self.title = plain_text(heading)
                    document_title = True
                out.append(f"{'#' * min(6, depth + 1)} {escape_heading(heading)}")
                if document_title and self._docinfo:
                    out.extend(self._docinfo)
                    self._docinfo = []
                continue
            if document_title and opening and isinstance(child, nodes.field_list):
                out.extend(self._fields(child, depth + 1, docinfo=True))  # the document's docinfo
                continue
            if not isinstance(child, _SKIP):
                opening = False
            out.extend(self._block(child, depth + 1))
        return out

    def _code(self, node: nodes.Element) -> str:
        language = node.get("language") or ""
        if not language:
            classes = [c for c in node.get("classes", []) if c != "code"]
            language = classes[0] if classes else ("python" if isinstance(node, nodes.doctest_block) else "")
        text = node.astext().strip("\n")
        fence = "```"
        while fence in text:
            fence += "`"
        return f"{fence}{language}\n{text}\n{fence}"

    def _admonition(self, node: nodes.Element, depth: int) -> str:
        label = ADMONITIONS.get(node.tagname, "")
        titles = [c for c in node.children if isinstance(c, nodes.title)]
        if titles:
            label = self._inline(titles[0]).strip()
        inner = [b for c in node.children if not isinstance(c, nodes.title) for b in self._block(c, depth)]
        body = "\n\n".join(inner)
        if label:
            if label.endswith((":", ".", "?", "!")):
                lead = f"**{label}**"
            else:
                lead = f"**{label}:**" if body and "\n" not in inner[0] and not inner[0].startswith(("```", ">", "- ", "|")) \
                    else f"**{label}**"
            body = f"{lead} {body}" if body and lead.endswith(":**") else (f"{lead}\n\n{body}" if body else lead)
        return self._quote(body)

    @staticmethod
    def _quote(text: str) -> str:
        return "\n".join(("> " + line) if line.strip() else ">" for line in text.strip("\n").split("\n"))

    def _list(self, node: nodes.Element, depth: int) -> str:
        ordered = isinstance(node, nodes.enumerated_list)
        items: list[str] = []
        for number, item in enumerate(node.children, start=1):
            if not isinstance(item, nodes.list_item):
                continue
            marker = f"{number}." if ordered else "-"
            inner = "\n\n".join(self._children(item, depth)) or ""
            pad = " " * (len(marker) + 1)
            lines = inner.split("\n")
            text = marker + " " + lines[0] + "".join("\n" + (pad + line if line.strip() else "") for line in lines[1:])
            items.append(text)
        loose = any("\n\n" in item for item in items)
        return ("\n\n" if loose else "\n").join(items)

    def _definitions(self, node: nodes.Element, depth: int) -> list[str]:
        out: list[str] = []
        for item in node.children:
            if not isinstance(item, nodes.definition_list_item):
                continue
            terms = [self._inline(c).strip() for c in item.children if isinstance(c, nodes.term)]
            body = [b for c in item.children if isinstance(c, nodes.definition) for b in self._children(c, depth)]
            head = f"**{' / '.join(t for t in terms if t)}**"
            if body and not body[0].startswith(("```", ">", "- ", "|", "#")):
                out.append(f"{head}: {body[0]}")
                out.extend(body[1:])
            else:
                out.append(head)
                out.extend(body)
        return out

    def _fields(self, node: nodes.Element, depth: int, *, docinfo: bool = False, only_known: bool = False) -> list[str]:
        """A field list as "**name:** text" lines. ``docinfo``: the document's bibliographic
        fields (a field list opening it): names capitalized as docutils shows them ("Author"),
        an abstract as a paragraph, a field whose value is only an undefined substitution
        (Sphinx's ``|release|``) dropped; ``only_known``: other fields (``:orphan:``) too."""
        out: list[str] = []
        for field in node.children:
            if not isinstance(field, nodes.field) or len(field.children) < 2:
                continue
            name = self._inline(field.children[0]).strip()
            key = field.children[0].astext().strip().lower()
            if docinfo:
                value = field.children[1].astext().strip()
                if _SUBSTITUTION.fullmatch(value) and any(True for _ in field.children[1].findall(nodes.problematic)):
                    continue
                if key in PARAGRAPH_FIELDS:
                    out.extend(self._children(field.children[1], depth))
                    continue
                if only_known and key not in BIBLIOGRAPHIC:
                    continue
                if key in BIBLIOGRAPHIC and name.islower():
                    name = name[:1].upper() + name[1:]
            body = self._children(field.children[1], depth)
            if body and not body[0].startswith(("```", ">", "- ", "|", "#")):
                out.append(f"**{name}:** {body[0]}")
                out.extend(body[1:])
            else:
                out.append(f"**{name}:**")
                out.extend(body)
        return out

    def _options(self, node: nodes.Element) -> list[str]:
        out: list[str] = []
        for item in node.findall(nodes.option_list_item):
            groups = [c for c in item.children if isinstance(c, nodes.option_group)]
            descriptions = [c for c in item.children if isinstance(c, nodes.description)]
            names = groups[0].astext() if groups else ""
            text = " ".join(self._children(descriptions[0], 0)) if descriptions else ""
            out.append(f"- `{names}`: {text}".rstrip(": "))
        return ["\n".join(out)] if out else []

    def _table(self, node: nodes.table) -> str:
        rows: list[list[str]] = []
        header_rows = 0
        for group in node.findall(nodes.tgroup):
            for part in group.children:
                if isinstance(part, (nodes.thead, nodes.tbody)):
                    for row in part.children:
                        if not isinstance(row, nodes.row):
                            continue
                        cells = [_escape_cell(" ".join(self._children(entry, 0)).replace("\n", " "))
                                 for entry in row.children if isinstance(entry, nodes.entry)]
                        rows.append(cells)
                        if isinstance(part, nodes.thead):
                            header_rows += 1
            break
        if not rows:
            return ""
        width = max(len(r) for r in rows)
        rows = [r + [""] * (width - len(r)) for r in rows]
        head = rows[0] if header_rows else [""] * width
        body = rows[1:] if header_rows else rows
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * width) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in body]
        titles = [c for c in node.children if isinstance(c, nodes.title)]
        caption = f"**{self._inline(titles[0]).strip()}**\n\n" if titles else ""
        return caption + "\n".join(lines)

    # -- inline --------------------------------------------------------------------------------

    def _inline(self, node: nodes.Node) -> str:
        parts: list[str] = []
        for child in (node.children if isinstance(node, nodes.Element) else [node]):
            parts.append(self._inline_one(child))
        text = "".join(parts).replace("\n", " ")
        # a footnote mark left out leaves "widgets ." behind
        return _SPACE_BEFORE_STOP.sub("", text) if " " in text else text

    def _inline_one(self, node: nodes.Node) -> str:
        if isinstance(node, nodes.Text):
            # The text as written (str() keeps reST's backslash escapes as NUL characters), with
            # what Markdown would read as markup escaped: "__init__.py" is not bold "init".
            return escape_text(node.astext())
        if isinstance(node, nodes.image):  # in running text ("please |donate| to"): its alt text
            return " ".join(str(node.get("alt", "")).split())
        if isinstance(node, _SKIP):
            return ""
        if isinstance(node, nodes.problematic):  # markup docutils could not read: its text
            return escape_text(node.astext())
        if isinstance(node, nodes.literal):
            text = " ".join(node.astext().split())
            if not text:
                return ""
            ticks = "``" if "`" in text else "`"
            return f"{ticks}{text}{ticks}" if ticks == "`" else f"`` {text} ``"
        if isinstance(node, nodes.emphasis):
            inner = self._inline(node).strip()
            return f"*{inner}*" if inner else ""
        if isinstance(node, nodes.strong):
            inner = self._inline(node).strip()
            return f"**{inner}**" if inner else ""
        if isinstance(node, nodes.reference):
            text = self._inline(node).strip() or node.get("refuri", "")
            uri = node.get("refuri")
            if uri and text and not uri.startswith("#"):
                uri = uri.replace(" ", "%20").replace(")", "%29").replace("(", "%28")
                return f"[{text}]({uri})"
            return text
        if isinstance(node, nodes.math):
            return f"`{node.astext()}`"
        if isinstance(node, nodes.subscript):
            return self._inline(node)
        if isinstance(node, nodes.Element):
            return self._inline(node)
        return ""
