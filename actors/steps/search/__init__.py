"""Stage 2, searching: the local library by relevance, OpenAlex and arXiv candidates and how they are scored."""
