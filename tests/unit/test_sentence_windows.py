"""Sentence windows: the short runs of sentences a chunk is also embedded as (embed.window_sentences)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from actors.steps.text import sentence_window_spans, sentence_windows


def test_every_run_of_consecutive_sentences_in_order() -> None:
    text = "Heat cuts yield. Drought   makes it worse.\nIrrigation helps (Smith et al. 2020). Shade does not."
    assert sentence_windows(text, 2) == [
        "Heat cuts yield. Drought makes it worse.",
        "Drought makes it worse. Irrigation helps (Smith et al. 2020).",
        "Irrigation helps (Smith et al. 2020). Shade does not.",
    ]
    assert sentence_windows(text, 3)[0] == ("Heat cuts yield. Drought makes it worse. "
                                            "Irrigation helps (Smith et al. 2020).")
    assert len(sentence_windows(text, 1)) == 4


def test_a_text_no_longer_than_one_window_is_its_own_window() -> None:
    assert sentence_windows("One sentence. Two sentences.", 2) == []
    assert sentence_windows("Only one.", 2) == []
    assert sentence_windows("", 2) == []
    assert sentence_windows("One. Two. Three.", 0) == []  # windows off


def test_window_similarity_takes_each_rows_best_window_and_skips_rows_without() -> None:
    import math

    import numpy as np
    import pyarrow as pa

    from infra.store.lance_schema import window_similarity

    column = pa.array([[[1, 0], [0, 1]], None, [], [[1, 1]], [[-1, 0], [0, -2]]],
                      type=pa.list_(pa.list_(pa.float32(), 2)))
    query = np.array([2.0, 0.0])  # lengths do not matter: cosine
    best = window_similarity(column, query).tolist()
    assert best[0] == 1.0 and best[1] == best[2] == -math.inf
    assert math.isclose(best[3], 1 / math.sqrt(2), rel_tol=1e-6) and best[4] == 0.0
    # a slice (what a chunked column holds) and a chunked column answer the same per row
    assert window_similarity(column.slice(1), query).tolist() == best[1:]
    assert window_similarity(pa.chunked_array([column.slice(0, 2), column.slice(2)]), query).tolist() == best
    assert window_similarity(pa.array([None, []], type=column.type), query).tolist() == [-math.inf, -math.inf]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["Heat", "cuts", "yield.", "Dr.", "Smith", "found", "3.5", "t/ha!", "Why?", "e.g.",
                                 "(2020).", "no"]), max_size=40),
       st.lists(st.sampled_from([" ", "  ", "\n", " \n\t"]), min_size=40, max_size=40), st.integers(1, 3))
def test_window_spans_hold_exactly_the_windows_sentences(words, gaps, size) -> None:
    """Each span, read from the original text and whitespace-normalised, is its window: what an embedder pooling the
    span reads is what the window says (whatever the spacing and line breaks between the words)."""
    text = "".join(word + gap for word, gap in zip(words, gaps))
    spans = sentence_window_spans(text, size)
    assert [" ".join(text[start:end].split()) for start, end in spans] == sentence_windows(text, size)
    assert all(not text[start].isspace() and not text[end - 1].isspace() for start, end in spans)
