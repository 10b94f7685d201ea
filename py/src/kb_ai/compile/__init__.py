"""`kaas compile`: raw/ -> wiki/ in stages (ingest, dedup, plan, write, index, report).

The service function is ``kb_ai.compile.pipeline.run_compile``; design notes in docs/compile.md.
"""
