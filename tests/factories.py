"""What tests build their inputs with, in one place: hand-made documents and chunks (for the Foragers, the Writer
and the ask tool), documents and vectors for the store contract, and PDFs laid out with PyMuPDF.

Helpers only (no fixtures: those live in the conftest.py of the folder that uses them); test modules import from
here, never from one another."""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infra.store.base import ChunkRecord, DocumentRecord, Hit, SectionKind, Store

DIM = 384

# ---------------------------------------------------------------- documents a step reads

Section = tuple[str, str] | tuple[str, str, str]  # (section_path, text) or (section_path, section_kind, text)


def make_doc(name: str, title: str, sections: Sequence[Section], **meta: Any) -> tuple[DocumentRecord,
                                                                                     list[ChunkRecord]]:
    """A document named ``name`` (its id the name's sha256) with one chunk per section, in order; ``meta`` sets the
    record's other fields (authors, year, abstract ...; origin defaults to the file name)."""
    doc_id = hashlib.sha256(name.encode()).hexdigest()
    meta.setdefault("origin", f"{name}.pdf")
    markdown, chunks = "", []
    for ordinal, section in enumerate(sections):
        path, text = section[0], section[-1]
        kind = {"section_kind": section[1]} if len(section) == 3 else {}
        start = len(markdown)
        markdown += text + "\n\n"
        chunks.append(ChunkRecord(chunk_id=f"{doc_id[:16]}:{ordinal}", doc_id=doc_id, ordinal=ordinal, text=text,
                                  section_path=path, char_start=start, char_end=start + len(text),
                                  token_count=len(text.split()), **kind))
    doc = DocumentRecord(doc_id=doc_id, key=f"file:/library/{name}.pdf", title=title,
                         sections=tuple(dict.fromkeys(s[0] for s in sections)), markdown=markdown,
                         parser="hand-made", n_chunks=len(chunks), **meta)
    return doc, chunks


# ---------------------------------------------------------------- the store contract's documents and vectors

def unit(i: int, dim: int = DIM) -> list[float]:
    """The i-th basis vector."""
    vec = [0.0] * dim
    vec[i] = 1.0
    return vec


def mix(*parts: tuple[int, float], dim: int = DIM) -> list[float]:
    """A unit vector from (axis, weight) pairs."""
    vec = [0.0] * dim
    for axis, weight in parts:
        vec[axis] += weight
    norm = math.sqrt(sum(v * v for v in vec))
    return [v / norm for v in vec]


def hash_vec(text: str, dim: int = DIM) -> list[float]:
    """Hashed bag-of-words: a deterministic stand-in for an embedder (same words → close vectors)."""
    vec = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        vec[int(hashlib.md5(word.encode()).hexdigest(), 16) % dim] += 1.0
    if not any(vec):
        vec[0] = 1.0
    norm = math.sqrt(sum(v * v for v in vec))
    return [v / norm for v in vec]


def store_doc(doc_id: str, texts: Sequence[str], *, key: str | None = None,
             paths: Sequence[str] | None = None, kinds: Sequence[SectionKind] | None = None,
             title: str = "A title") -> tuple[DocumentRecord, list[ChunkRecord]]:
    """A document with one chunk per text, chunk ids '<doc_id[:16]>:<ordinal>'."""
    paths = list(paths) if paths is not None else ["Body"] * len(texts)
    kinds = list(kinds) if kinds is not None else ["body"] * len(texts)
    chunks, offset = [], 0
    for i, text in enumerate(texts):
        chunks.append(ChunkRecord(chunk_id=f"{doc_id[:16]}:{i}", doc_id=doc_id, ordinal=i, text=text,
                                  section_path=paths[i], section_kind=kinds[i], char_start=offset,
                                  char_end=offset + len(text), token_count=len(text.split()), pages=(1, i + 1)))
        offset += len(text) + 1
    doc = DocumentRecord(doc_id=doc_id, key=key or f"file:/library/{doc_id}.pdf", title=title,
                         authors=("Ada Lovelace", "Alan O'Turing"), year=2021, abstract="An abstract.",
                         sections=tuple(dict.fromkeys(paths)), markdown="\n".join(texts), parser="test",
                         flags=("ocr",), origin=f"{doc_id}.pdf")
    return doc, chunks


def put(store: Store, doc: DocumentRecord, chunks: Sequence[ChunkRecord],
        vectors: Sequence[Sequence[float]] | None = None) -> None:
    store.upsert_document(doc, chunks, vectors if vectors is not None else [hash_vec(c.text) for c in chunks])


def cid(doc_id: str, ordinal: int) -> str:
    return f"{doc_id[:16]}:{ordinal}"


def ids(hits: Sequence[Hit] | Sequence[ChunkRecord]) -> list[str]:
    return [h.chunk.chunk_id if isinstance(h, Hit) else h.chunk_id for h in hits]


def open_store(kind: str, path: str, **options: Any) -> Store:
    """Open a store of ``kind``; top-level so that worker processes can call it."""
    if kind == "lancedb":
        from infra.store.lancedb import LanceStore

        return LanceStore(path, dim=DIM, **options)
    if kind == "weaviate":
        from infra.store.weaviate import WeaviateStore

        # one library per test, the same in every worker process (str hashes differ between processes)
        library = "T" + hashlib.sha256(path.encode()).hexdigest()[:20]
        return WeaviateStore.from_url(os.environ["WEAVIATE_URL"], library=library, dim=DIM,
                                      grpc_port=int(os.environ.get("WEAVIATE_GRPC_PORT", "50051")), **options)
    raise ValueError(kind)


# ---------------------------------------------------------------- PDFs


def html_pdf(path: Path, html: str, *, repeat: int = 1, metadata: dict[str, str] | None = None) -> Path:
    """``html`` (``repeat`` times) laid out on A4 pages by PyMuPDF's Story engine; ``metadata`` written into the
    file's info dictionary (title, author, creationDate ...)."""
    import pymupdf

    story = pymupdf.Story(html=html * repeat)
    writer = pymupdf.DocumentWriter(str(path))
    mediabox = pymupdf.paper_rect("a4")
    more = True
    while more:
        device = writer.begin_page(mediabox)
        more, _ = story.place(mediabox + (50, 50, -50, -50))
        story.draw(device)
        writer.end_page()
    writer.close()
    if metadata:
        doc = pymupdf.open(path)
        doc.set_metadata(metadata)
        doc.saveIncr()
        doc.close()
    return path


def page_pdf(path: Path, title: str, paragraphs: Sequence[str]) -> Path:
    """One page: ``title`` in 16 pt, then each paragraph in a 10 pt box below it (no info dictionary)."""
    import pymupdf

    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((72, 72), title, fontsize=16)
    y = 110
    for para in paragraphs:
        page.insert_textbox(pymupdf.Rect(72, y, 520, y + 140), para, fontsize=10)
        y += 150
    doc.save(path)
    return path


WHEAT_TITLE = "Heat Stress in Wheat Crops"
WHEAT_TEXT_TITLE = "Heat stress and wheat yield"  # the same subject as a document given as text (title, abstract)
WHEAT_ABSTRACT = ("Heat stress reduces wheat yield through faster grain filling and lower photosynthesis. " * 6
                  + "Irrigation at flowering softens the loss in dry years. " * 4).strip()
WHEAT_SENTENCE = "Heat stress reduces wheat yield through faster grain filling and lower photosynthesis. "


def wheat_html(extra: str = "") -> str:
    """A short paper on heat stress in wheat: title, authors, abstract, introduction (``extra`` ends its second
    paragraph), methods, references."""
    para = WHEAT_SENTENCE * 8
    return (f"<h1>{WHEAT_TITLE}</h1><p>Ada Lovelace, Alan Turing</p><h2>Abstract</h2><p>{para}</p>"
            f"<h2>1 Introduction</h2><p>{para}</p><p>{para}{extra}</p><h2>2 Methods</h2><h3>2.1 Field trials</h3>"
            f"<p>{para}</p><h2>References</h2><p>[1] A. Author. A paper about wheat. Journal of Crops, 2001.</p>"
            "<p>[2] B. Author. Another paper. 2002.</p>")


def wheat_pdf(path: Path, extra: str = "") -> Path:
    """:func:`wheat_html` as a PDF whose info dictionary names the title, both authors and 2021."""
    return html_pdf(path, wheat_html(extra), metadata={"title": WHEAT_TITLE, "author": "Ada Lovelace; Alan Turing",
                                                       "creationDate": "D:20210304"})
