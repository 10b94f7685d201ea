"""``python -m kb_ai.cli ...``: the same as ``kaas ...``."""

from kb_ai.cli.commands import main

if __name__ == "__main__":
    main()
