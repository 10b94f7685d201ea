"""Readers for one document format each, turning it into the Markdown an article is made of.

``compile/readers.py`` dispatches on the file name and calls these: ``rst`` (reStructuredText,
with Sphinx's roles and directives), ``markdown_dialects`` (MkDocs/Material, GitHub alerts,
reference-style links), ``pdf_text`` (page furniture and broken lines of extracted PDF text),
``docx_text`` (Word paragraphs and tables in document order).
"""
