"""The model side: one gateway for every LLM call, its cache, usage accounting and prompts."""
