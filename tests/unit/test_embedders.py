"""Embedders: MiniLM in-process (tokenizer always; the model itself in the slow tests) and Ollama
against a real loopback HTTP server speaking Ollama's /api/embed (tests/loopback_ollama.py)."""

from __future__ import annotations

import math
import pickle

import pytest

from infra.embed import build_embedder
from infra.embed.base import Windowed
from infra.embed.minilm import MiniLMEmbedder
from infra.embed.ollama import OllamaEmbedder
from infra.errors import LLMTimeout, LLMUnavailable
from infra.settings import Settings
from tests.minilm import score_tolerance
from tests.loopback_ollama import LoopbackOllama, closed_loopback_url, fake_embedding, hang, http_error, \
    install_real_llm_guard

NOMIC = "nomic-embed-text"


# ---------------------------------------------------------------- MiniLM tokenizer (no model load)

def test_minilm_token_spans_are_wordpieces_of_the_text() -> None:
    embedder = MiniLMEmbedder()
    text = "Tokenization of PDFs, naïvely: 42!"
    spans = embedder.token_spans(text)
    pieces = [text[a:b].lower() for a, b in spans]
    assert pieces == ["token", "ization", "of", "pdf", "s", ",", "naïve", "ly", ":", "42", "!"]
    assert embedder._model is None  # the tokenizer alone does not load the model


def test_minilm_token_spans_are_not_truncated_and_have_no_special_tokens() -> None:
    embedder = MiniLMEmbedder()
    text = " ".join(["evidence"] * 700)
    spans = embedder.token_spans(text)
    assert len(spans) == 700  # tokenizer.json ships truncation at 128: switched off
    assert all(text[a:b] == "evidence" for a, b in spans)
    assert embedder.token_spans("") == []


def test_minilm_metadata_without_loading_and_pickles() -> None:
    embedder = MiniLMEmbedder(batch_size=8)
    assert (embedder.name, embedder.dim, embedder.max_tokens) == ("all-MiniLM-L6-v2", 384, 256)
    embedder.token_spans("warm the tokenizer")
    clone = pickle.loads(pickle.dumps(embedder))
    assert clone._model is None and clone.batch_size == 8
    assert clone.token_spans("warm the tokenizer") == embedder.token_spans("warm the tokenizer")


def test_minilm_precision_is_checked_and_resolved() -> None:
    from infra.embed.minilm import resolve_precision
    from infra.errors import ConfigError

    assert resolve_precision("fp32") == "fp32" and resolve_precision("bf16") == "bf16"
    assert resolve_precision("auto", device="cuda") == "fp32"
    assert resolve_precision("auto") in ("fp32", "bf16")  # by what this CPU computes natively
    with pytest.raises(ConfigError, match="precision must be one of"):
        MiniLMEmbedder(precision="int8")  # type: ignore[arg-type]
    assert build_embedder(Settings.load().updated(embed={"precision": "fp32"})).precision == "fp32"


@pytest.mark.slow
def test_minilm_bfloat16_vectors_match_float32() -> None:
    """bfloat16 (what 'auto' picks on a CPU with native bfloat16) changes a vector by a cosine of under 1e-3 from
    float32, so one store may hold vectors from nodes of either kind."""
    texts = ["Deep venous thrombosis prophylaxis in trauma patients.",
             "A JavaScript just-in-time compiler with trace trees. " * 20]
    exact = MiniLMEmbedder(precision="fp32").embed(texts)
    half = MiniLMEmbedder(precision="bf16").embed(texts)
    cosines = [sum(a * b for a, b in zip(x, y, strict=True)) for x, y in zip(exact, half, strict=True)]
    assert all(c > 0.999 for c in cosines), cosines
    assert exact != half  # bfloat16 really computed


@pytest.mark.slow
def test_minilm_embeds_unit_vectors_offline() -> None:
    embedder = MiniLMEmbedder(batch_size=2)
    texts = ["Deep venous thrombosis prophylaxis in trauma patients.",
             "Preventing blood clots in injured patients.",
             "A JavaScript just-in-time compiler with trace trees."]
    vectors = embedder.embed(texts)
    assert len(vectors) == 3 and all(len(v) == 384 for v in vectors)
    assert all(abs(math.sqrt(sum(x * x for x in v)) - 1.0) < 1e-4 for v in vectors)

    def cos(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b))

    assert cos(vectors[0], vectors[1]) > cos(vectors[0], vectors[2]) + 0.2
    # alone vs in a batch of two (other padding): equal within the precision's rounding (tests/minilm.py)
    assert embedder.embed(texts[:1])[0] == pytest.approx(vectors[0], abs=score_tolerance(embedder))
    assert embedder.embed([]) == []
    assert embedder.max_tokens == 256


def dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def pooling():
    """MiniLM with ``embed.window_vectors = 'pooled'`` (late chunking), in the suite's precision."""
    from tests.minilm import configured_precision

    return MiniLMEmbedder(precision=configured_precision(), pool_windows=True)  # type: ignore[arg-type]


@pytest.mark.slow
def test_minilm_embeds_each_window_as_a_text_by_default(minilm) -> None:
    """``embed.window_vectors = 'separate'`` (the default): a window is the lead and its sentences, read alone."""
    text = "Notes — Results\nHeat cuts yield. Drought makes it worse. Shade helps."
    item = Windowed(text, len("Notes — Results\n"), ((16, text.index(" Shade")), (text.index("Drought"), len(text))))
    assert item.window_texts() == ["Notes — Results\nHeat cuts yield. Drought makes it worse.",
                                   "Notes — Results\nDrought makes it worse. Shade helps."]
    before = minilm.inputs_read
    vectors = minilm.embed_windowed([item])
    assert minilm.inputs_read - before == 3 and not minilm.windows_pooled
    for got, alone in zip(vectors, minilm.embed([text, *item.window_texts()]), strict=True):
        assert got == pytest.approx(alone, abs=score_tolerance(minilm))


@pytest.mark.slow
def test_minilm_pools_sentence_windows_from_the_chunks_own_forward_pass(pooling) -> None:
    """Late chunking: a chunk's vector as :meth:`embed` gives it and each window's from the same pass (one model input
    per chunk), each window's vector about its own sentences."""
    minilm = pooling
    lead = "Field notes — Results\n"
    body = ("Heat stress reduces wheat yield in dry summers. Drought makes the loss worse. "
            "Sourdough fermentation relies on lactic acid bacteria. Yeast releases carbon dioxide that raises bread.")
    text = lead + body
    sentences = [body.index(s) for s in ("Heat", "Drought", "Sourdough", "Yeast")] + [len(body)]
    windows = tuple((len(lead) + sentences[i], len(lead) + sentences[i + 2] - (i + 2 < 4)) for i in range(3))
    items = [Windowed(text, len(lead), windows), Windowed("A chunk without windows.")]
    before = minilm.inputs_read
    vectors = minilm.embed_windowed(items)
    assert minilm.inputs_read - before == 2  # the windows cost no forward pass of their own
    assert len(vectors) == 2 + 3 and all(abs(math.sqrt(dot(v, v)) - 1) < 1e-4 for v in vectors)
    alone = minilm.embed([item.text for item in items])
    for late, own in zip(vectors[:2], alone, strict=True):
        assert late == pytest.approx(own, abs=score_tolerance(minilm))
    wheat, bread = minilm.embed(["wheat yield losses under heat and drought", "bread fermentation by bacteria"])
    first, _, last = vectors[2:]
    assert dot(first, wheat) > dot(last, wheat) + 0.1 and dot(last, bread) > dot(first, bread) + 0.1
    assert items[0].window_texts()[0] == lead + body[:sentences[2] - 1]


@pytest.mark.slow
def test_minilm_embeds_a_window_its_pass_did_not_reach_on_its_own(pooling) -> None:
    """A window past the model's 256 tokens (none of its tokens read in the chunk's pass) is embedded as a text."""
    minilm = pooling
    head = "Filler words about nothing in particular. " * 60  # well past 256 tokens
    tail = "Coral bleaching follows marine heat waves."
    text = head + tail
    item = Windowed(text, 0, ((len(head), len(text)),))
    before = minilm.inputs_read
    own, window = minilm.embed_windowed([item])
    assert minilm.inputs_read - before == 2  # the chunk's pass, then the window's own
    assert window == pytest.approx(minilm.embed([tail])[0], abs=score_tolerance(minilm))
    assert own == pytest.approx(minilm.embed([text])[0], abs=score_tolerance(minilm))


# ---------------------------------------------------------------- Ollama (loopback server)

@pytest.fixture
def guard(monkeypatch: pytest.MonkeyPatch) -> None:
    install_real_llm_guard(monkeypatch)


@pytest.fixture
def server(guard: None):
    with LoopbackOllama(models=(NOMIC,), embed_dim=768, hang_limit_s=5.0) as srv:
        yield srv


def embed_bodies(srv: LoopbackOllama) -> list[dict]:
    return [r.body for r in srv.requests if r.path == "/api/embed"]


def test_ollama_embeds_in_batches_with_fixed_context(server: LoopbackOllama) -> None:
    embedder = OllamaEmbedder(host=server.url, model=NOMIC, batch_size=2, timeout_s=10)
    texts = [f"text number {i}" for i in range(5)]
    vectors = embedder.embed(texts)
    assert vectors == [pytest.approx(fake_embedding(t, 768)) for t in texts]
    bodies = embed_bodies(server)
    assert [b["input"] for b in bodies] == [texts[0:2], texts[2:4], texts[4:5]]
    assert all(b["model"] == NOMIC and b["truncate"] is True and b["options"] == {"num_ctx": 2048} for b in bodies)
    assert (embedder.dim, embedder.max_tokens, embedder.name) == (768, 2048, "ollama:nomic-embed-text")
    assert embedder.embed([]) == []


def test_ollama_missing_model_says_how_to_pull_it(server: LoopbackOllama) -> None:
    embedder = OllamaEmbedder(host=server.url, model="mxbai-embed-large", timeout_s=10)
    with pytest.raises(LLMUnavailable) as err:
        embedder.embed(["x"])
    assert "ollama pull mxbai-embed-large" in str(err.value) and err.value.retryable is False
    with pytest.raises(LLMUnavailable, match="ollama pull mxbai-embed-large"):
        embedder.check()
    OllamaEmbedder(host=server.url, model=NOMIC).check()  # a pulled model passes


def test_ollama_unreachable_server_is_a_clear_retryable_error(guard: None) -> None:
    url = closed_loopback_url()
    embedder = OllamaEmbedder(host=url, timeout_s=5, retries=0)
    with pytest.raises(LLMUnavailable) as err:
        embedder.embed(["x"])
    assert url in str(err.value) and "ollama pull nomic-embed-text" in str(err.value)
    assert err.value.retryable is True


def test_ollama_retries_a_server_error_then_succeeds(server: LoopbackOllama) -> None:
    server.push_embed(http_error(500, "loading model"))
    embedder = OllamaEmbedder(host=server.url, timeout_s=10, retries=1, retry_wait_s=0)
    assert embedder.embed(["hello"]) == [pytest.approx(fake_embedding("hello", 768))]
    assert len(embed_bodies(server)) == 2


def test_ollama_gives_up_after_retries(server: LoopbackOllama) -> None:
    server.push_embed(http_error(503), http_error(503), http_error(503))
    embedder = OllamaEmbedder(host=server.url, timeout_s=10, retries=2, retry_wait_s=0)
    with pytest.raises(LLMUnavailable) as err:
        embedder.embed(["hello"])
    assert err.value.retryable is True and len(embed_bodies(server)) == 3


def test_ollama_hung_server_times_out(server: LoopbackOllama) -> None:
    server.push_embed(hang())
    embedder = OllamaEmbedder(host=server.url, timeout_s=0.3, retries=0)
    with pytest.raises(LLMTimeout) as err:
        embedder.embed(["hello"])
    assert err.value.retryable is True


def test_ollama_unknown_model_size_is_probed(guard: None) -> None:
    with LoopbackOllama(models=("my-embedder",), embed_dim=12) as srv:
        embedder = OllamaEmbedder(host=srv.url, model="my-embedder", timeout_s=10)
        assert embedder.dim == 12
        assert len(embedder.embed(["a", "b"])[1]) == 12


def test_ollama_wrong_vector_size_is_refused(guard: None) -> None:
    with LoopbackOllama(models=(NOMIC,), embed_dim=16) as srv:
        with pytest.raises(LLMUnavailable, match="size"):
            OllamaEmbedder(host=srv.url, timeout_s=10).embed(["a"])


def test_ollama_token_spans_use_the_bert_uncased_wordpiece() -> None:
    text = "Retrieval-augmented generation of paraphrases."
    assert OllamaEmbedder().token_spans(text) == MiniLMEmbedder().token_spans(text)


# ---------------------------------------------------------------- factory

def test_build_embedder_follows_settings() -> None:
    assert isinstance(build_embedder(Settings.load()), MiniLMEmbedder)
    settings = Settings.load(embed={"backend": "ollama", "host": "http://127.0.0.1:1", "model": NOMIC,
                                    "batch_size": 7})
    embedder = build_embedder(settings)
    assert isinstance(embedder, OllamaEmbedder)
    assert (embedder.host, embedder.model, embedder.batch_size) == ("http://127.0.0.1:1", NOMIC, 7)


def test_a_server_embeds_each_window_as_a_text_behind_the_lead(server: LoopbackOllama) -> None:
    embedder = OllamaEmbedder(host=server.url, model=NOMIC, timeout_s=10)
    text = "Title — Abstract\nOne.  Two.\nThree."
    one, two, three = (text.index(s) for s in ("One.", "Two.", "Three."))
    item = Windowed(text, len("Title — Abstract\n"), ((one, two + 4), (two, three + 6)))
    vectors = embedder.embed_windowed([item, Windowed("Plain.")])
    inputs = [text for body in embed_bodies(server) for text in body["input"]]
    assert inputs == ["Title — Abstract\nOne.  Two.\nThree.", "Plain.", "Title — Abstract\nOne. Two.",
                      "Title — Abstract\nTwo. Three."]
    assert len(vectors) == 4
