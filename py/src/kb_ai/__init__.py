"""KaaS: compile documents into a Markdown wiki and answer questions from it with citations."""

__version__ = "0.1.0"
