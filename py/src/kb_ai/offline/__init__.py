"""The offline engine: lexical (BM25) ranking and extractive answers, no model needed."""
