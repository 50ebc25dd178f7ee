"""Token windows inside sections, cut with the embedder's own tokenizer at exact character offsets.

Every chunk satisfies ``markdown[chunk.char_start:chunk.char_end] == chunk.text`` and holds at most
``max_tokens`` tokens, counted by re-tokenizing the chunk text itself (what the model will see).

Windows stay inside one section body (the heading line is not part of the text; the section path
is recorded on the chunk and put in front of the embedded text by the ingest step). A window of
``max_tokens`` tokens ends, by preference, at a paragraph break, else after a sentence, else between
words, as long as that keeps at least 60% of the window; the next window starts ``overlap`` tokens
earlier, moved forward to the next word start. Windows without a letter or digit are skipped.

The window size follows the embedder (``settings.chunk_window()``: 256/32 for MiniLM, 512/64 for
Ollama), capped so that the context line (title and section path, at most ``CONTEXT_TOKENS`` tokens)
and the model's two special tokens still fit in what the model reads (``embedder.max_tokens``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from actors.steps.ingest.sections import Section
from infra.embed.base import Embedder
from infra.errors import ConfigError
from infra.settings import Settings
from infra.store.base import ChunkRecord

CONTEXT_TOKENS = 32
CHUNK_CONTEXT_TOKENS = 64  # contextual retrieval: the LLM's context of a chunk, when ingest.contextual is on
SPECIAL_TOKENS = 2  # [CLS] and [SEP]
MIN_KEEP = 0.6
MIN_WINDOW = 16

TokenSpans = Callable[[str], list[tuple[int, int]]]


def window_for(settings: Settings, embedder: Embedder) -> tuple[int, int]:
    """(tokens per chunk, overlap) for this embedder: the settings' window, capped to fit the model
    (with contextual retrieval on, also the chunk's context of at most ``CHUNK_CONTEXT_TOKENS``)."""
    tokens, overlap = settings.chunk_window()
    reserved = SPECIAL_TOKENS + CONTEXT_TOKENS + (CHUNK_CONTEXT_TOKENS if settings.ingest.contextual else 0)
    budget = min(tokens, embedder.max_tokens - reserved)
    if budget < MIN_WINDOW:
        raise ConfigError(f"embedder {embedder.name} reads {embedder.max_tokens} tokens: too few for chunks "
                          f"(need at least {MIN_WINDOW + reserved})")
    return budget, max(0, min(overlap, budget // 2))


def context_line(title: str, section_path: str, token_spans: TokenSpans,
                 max_tokens: int = CONTEXT_TOKENS) -> str:
    """'<title> — <section path>' cut to ``max_tokens`` tokens, ending in a newline (put before chunk text)."""
    text = " — ".join(p for p in (title.strip(), section_path.strip()) if p)
    spans = token_spans(text)
    if len(spans) > max_tokens:
        text = text[:spans[max_tokens - 1][1]]
    return text + "\n" if text else ""


def chunk_context_line(context: str, token_spans: TokenSpans, max_tokens: int = CHUNK_CONTEXT_TOKENS) -> str:
    """A chunk's LLM context (contextual retrieval) cut to ``max_tokens`` tokens, ending in a newline
    (put between the context line and the chunk text); '' without one."""
    text = " ".join(context.split())
    if not text:
        return ""
    spans = token_spans(text)
    if len(spans) > max_tokens:
        text = text[:spans[max_tokens - 1][1]]
    return text + "\n"


def pages_for(char_start: int, char_end: int, page_spans: Sequence[tuple[int, int, int]]) -> tuple[int, ...]:
    """Page numbers whose Markdown span overlaps [char_start, char_end)."""
    return tuple(sorted({page for page, start, end in page_spans if start < char_end and end > char_start}))


def _boundary_scores(text: str, spans: Sequence[tuple[int, int]]) -> list[int]:
    """score[k] = how good it is to cut before token k: 3 paragraph, 2 sentence, 1 word, 0 inside a word."""
    scores = [3] * (len(spans) + 1)
    for k in range(1, len(spans)):
        gap = text[spans[k - 1][1]:spans[k][0]]
        if gap.count("\n") >= 2 and not gap.strip():
            scores[k] = 3
        elif gap and not gap.strip():
            last = text[spans[k - 1][1] - 1]
            scores[k] = 2 if last in ".!?" or "\n" in gap else 1
        elif gap.strip():  # characters the tokenizer skipped (control chars): still a boundary
            scores[k] = 1
        else:
            scores[k] = 0
    return scores


def _best_cut(scores: Sequence[int], start: int, hard_end: int, n: int, max_tokens: int) -> int:
    if hard_end >= n:
        return n
    low = start + max(1, int(MIN_KEEP * max_tokens))
    for wanted in (3, 2, 1):
        for k in range(hard_end, low - 1, -1):
            if scores[k] >= wanted:
                return k
    return hard_end


def _character_windows(text: str, a: int, b: int, token_spans: TokenSpans,
                       max_tokens: int) -> list[tuple[int, int, int]]:
    """Cut text[a:b] (one token of the whole text) into the longest pieces that fit ``max_tokens``."""
    out: list[tuple[int, int, int]] = []
    pos = a
    while pos < b:
        end = b
        while end > pos + 1 and len(token_spans(text[pos:end])) > max_tokens:
            end -= 1
        if any(ch.isalnum() for ch in text[pos:end]):
            out.append((pos, end, len(token_spans(text[pos:end]))))
        pos = end
    return out


def windows(text: str, token_spans: TokenSpans, max_tokens: int, overlap: int) -> list[tuple[int, int, int]]:
    """(char_start, char_end, n_tokens) of the token windows of ``text`` (offsets into ``text``)."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be positive")
    overlap = max(0, min(overlap, max_tokens - 1))
    spans = token_spans(text)
    n = len(spans)
    if n == 0:
        return []
    scores = _boundary_scores(text, spans)
    out: list[tuple[int, int, int]] = []
    i = 0
    while i < n:
        k = _best_cut(scores, i, min(i + max_tokens, n), n, max_tokens)
        while True:  # re-tokenized on its own the piece may split differently: make sure it fits
            a, b = spans[i][0], spans[k - 1][1]
            count = len(token_spans(text[a:b]))
            if count <= max_tokens or k - i <= 1:
                break
            k = max(i + 1, k - max(1, count - max_tokens))
        if count > max_tokens:  # one word piece that alone splits into more tokens than fit: cut by characters
            out.extend(_character_windows(text, a, b, token_spans, max_tokens))
            i = k
            continue
        if any(ch.isalnum() for ch in text[a:b]):
            out.append((a, b, count))
        if k >= n:
            break
        nxt = max(k - overlap, i + 1)
        while nxt < k and scores[nxt] == 0:  # start the next window at a word start
            nxt += 1
        i = nxt
    return out


def chunk_sections(doc_id: str, markdown: str, sections: Sequence[Section],
                   page_spans: Sequence[tuple[int, int, int]], token_spans: TokenSpans,
                   max_tokens: int, overlap: int) -> list[ChunkRecord]:
    """ChunkRecords for every section body, numbered in document order (``<doc_id[:16]>:<ordinal:05d>``)."""
    chunks: list[ChunkRecord] = []
    for section in sections:
        body = markdown[section.body_start:section.char_end]
        for a, b, count in windows(body, token_spans, max_tokens, overlap):
            start, end = section.body_start + a, section.body_start + b
            ordinal = len(chunks)
            chunks.append(ChunkRecord(
                chunk_id=f"{doc_id[:16]}:{ordinal:05d}", doc_id=doc_id, ordinal=ordinal,
                text=markdown[start:end], section_path=section.path, section_kind=section.kind,
                char_start=start, char_end=end, token_count=count, pages=pages_for(start, end, page_spans)))
    return chunks
