"""Stage 3, ingesting: PDF Markdown into sections, token-window chunks with context lines, embedded and stored."""
