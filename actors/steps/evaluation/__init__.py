"""Benchmarks of retrieval and evidence scored without an LLM, and the LLM judge of a written report."""
