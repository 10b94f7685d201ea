"""Token estimates for budgeting prompts without loading a tokenizer.

Budgets are planned before any model is contacted (and in offline mode there is no model), so
kaas uses a fixed, slightly pessimistic estimate: one token per 3.5 characters of UTF-8 text
(English prose averages about 4 with OpenAI's tokenizers; code and non-Latin scripts fewer).
"""

from __future__ import annotations

CHARS_PER_TOKEN = 3.5


def estimate_tokens(text: str) -> int:
    return int(len(text) / CHARS_PER_TOKEN) + 1


def chars_for_tokens(tokens: int) -> int:
    return int(tokens * CHARS_PER_TOKEN)
