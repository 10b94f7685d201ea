"""Storage: the knowledge-base folder, articles, the catalog, safe paths and atomic files."""
