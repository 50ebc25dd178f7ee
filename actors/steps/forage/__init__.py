"""Stage 4, foraging: one requirement's retrieval, judging, relevance check, deep dives and earned coverage."""
