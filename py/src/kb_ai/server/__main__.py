"""``python -m kb_ai.server [--kb DIR] [--host H] [--port N]``: the same as ``kaas serve``."""

from kb_ai.cli.serve import serve

if __name__ == "__main__":
    serve(prog_name="python -m kb_ai.server")
