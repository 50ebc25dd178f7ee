"""Stage 1, planning: the query into self-contained requirements and the search strings shown at approval."""
