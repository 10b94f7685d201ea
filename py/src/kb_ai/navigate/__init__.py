"""Answering questions: select pages from the catalog, read them within a budget, answer with
citations, validate the citations. ``ask.ask_events`` is the one entry point every interface uses."""
