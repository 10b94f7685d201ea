"""Quality tooling: ``kaas lint`` (checks on a wiki) and ``kaas eval`` (measured retrieval and answers)."""
