"""Tools on a finished run or the store: ask, verify citations, export."""
