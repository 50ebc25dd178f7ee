"""Stage 5, writing: the cited report, its comparison records and charts."""
