"""Sentence windows: the short runs of sentences a chunk is also embedded as (embed.window_sentences)."""

from __future__ import annotations

from actors.steps.text import sentence_windows


def test_every_run_of_consecutive_sentences_in_order() -> None:
    text = "Heat cuts yield. Drought   makes it worse.\nIrrigation helps (Smith et al. 2020). Shade does not."
    assert sentence_windows(text, 2) == [
        "Heat cuts yield. Drought makes it worse.",
        "Drought makes it worse. Irrigation helps (Smith et al. 2020).",
        "Irrigation helps (Smith et al. 2020). Shade does not.",
    ]
    assert sentence_windows(text, 3)[0] == "Heat cuts yield. Drought makes it worse. Irrigation helps (Smith et al. 2020)."
    assert len(sentence_windows(text, 1)) == 4


def test_a_text_no_longer_than_one_window_is_its_own_window() -> None:
    assert sentence_windows("One sentence. Two sentences.", 2) == []
    assert sentence_windows("Only one.", 2) == []
    assert sentence_windows("", 2) == []
    assert sentence_windows("One. Two. Three.", 0) == []  # windows off
