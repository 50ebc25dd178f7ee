"""One MiniLM per node: actors embed through their node's EmbedEndpoint (actors/embed_endpoint.py)."""

from __future__ import annotations

import os
import sys

import pytest

from actors.embed_endpoint import ENDPOINT_PREFIX, actor_embedder, endpoint_name, shares_node_model
from actors.options import options_for
from infra.embed.base import Windowed
from infra.embed.minilm import MiniLMEmbedder
from infra.settings import Settings

TEXTS = ["Heparin prevents deep venous thrombosis after trauma.", "Leaves turn yellow in autumn.", ""]


class Probe:
    """What an actor (a Forager, an Ingestor) gets from ``actor_embedder`` in its own process."""

    def __init__(self, settings: Settings) -> None:
        self.embedder = actor_embedder(settings)

    def kind(self) -> str:
        return type(self.embedder).__name__

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self.embedder.embed(texts)

    def embed_windowed(self, items: list[Windowed]) -> list[list[float]]:
        return self.embedder.embed_windowed(items)

    def spans(self, text: str) -> list[tuple[int, int]]:
        return self.embedder.token_spans(text)

    def pid(self) -> int:
        return os.getpid()


def test_outside_ray_an_actor_embeds_itself_and_a_given_embedder_wins(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # no Ray in this process (the session's may be running)
    settings = Settings.load()
    assert not shares_node_model(settings)
    assert isinstance(actor_embedder(settings), MiniLMEmbedder)
    given = MiniLMEmbedder()
    assert actor_embedder(settings, given) is given


def test_endpoint_options_and_names_follow_the_settings() -> None:
    settings, node = Settings.load(), "ab" * 28
    opts = options_for("embed_endpoint", settings, name=endpoint_name(settings, node), endpoint_node=node)
    assert opts["lifetime"] == "detached" and opts["get_if_exists"] and opts["num_cpus"] == 0
    assert opts["max_restarts"] == -1 and opts["scheduling_strategy"].node_id == node
    assert opts["name"].startswith(ENDPOINT_PREFIX + node[:16])
    # other vectors, another model (both precisions named: the suite may run with FORAGE_EMBED__PRECISION set)
    fp32, bf16 = (settings.updated(embed={"precision": p}) for p in ("fp32", "bf16"))
    assert endpoint_name(bf16, node) != endpoint_name(fp32, node)


def _probe(ray):
    """Probe as a Ray actor class (shipped by value: the workers cannot import a test module)."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray.remote(Probe).options(num_cpus=0)


def test_actors_on_a_node_share_one_model_with_the_same_vectors(ray_cluster, minilm) -> None:
    ray = ray_cluster
    settings = Settings.load()
    probe = _probe(ray)
    first, second = probe.remote(settings), probe.remote(settings)
    assert ray.get([first.kind.remote(), second.kind.remote()]) == ["NodeEmbedder", "NodeEmbedder"]

    vectors = ray.get(first.embed.remote(TEXTS))
    expected = minilm.embed(TEXTS)  # the same model loaded in this process
    assert len(vectors) == 3 and all(len(v) == 384 for v in vectors)
    for got, want in zip(vectors, expected, strict=True):
        assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-4
    # the same batch gives the same bits (one text alone would be padded otherwise: under bf16 not bit-equal)
    assert ray.get(second.embed.remote(TEXTS)) == vectors
    assert ray.get(first.spans.remote(TEXTS[0])) == minilm.token_spans(TEXTS[0])  # cut in the actor itself
    assert ray.get(first.embed.remote([])) == []
    # a chunk and its sentence windows, pooled in the endpoint from the chunk's one pass
    text = TEXTS[0] + " " + TEXTS[1] + " Both are true."
    item = Windowed(text, 0, ((0, len(TEXTS[0]) + 1 + len(TEXTS[1])), (len(TEXTS[0]) + 1, len(text))))
    pooled = ray.get(first.embed_windowed.remote([item]))
    assert len(pooled) == 3
    for got, want in zip(pooled, minilm.embed_windowed([item]), strict=True):
        assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-4

    node = ray.get_runtime_context().get_node_id()
    endpoint = ray.get_actor(endpoint_name(settings, node), namespace="forage")
    endpoint_pid = ray.get(endpoint.warm.remote())
    assert endpoint_pid not in ray.get([first.pid.remote(), second.pid.remote()])  # one model, in the endpoint

    ray.kill(endpoint, no_restart=True)  # the endpoint is gone: the next call finds or creates another
    assert ray.get(first.embed.remote(TEXTS)) == vectors
    renewed = ray.get_actor(endpoint_name(settings, node), namespace="forage")
    assert renewed._actor_id != endpoint._actor_id

    own = probe.remote(settings.updated(embed={"shared": False}))
    assert ray.get(own.kind.remote()) == "MiniLMEmbedder"  # shared=False: each actor loads its own
    for handle in (first, second, own):
        ray.kill(handle)


@pytest.mark.parametrize("change", [{"backend": "ollama"}, {"device": "cuda"}, {"shared": False}])
def test_only_minilm_on_the_cpu_is_shared(ray_cluster, change) -> None:
    ray = ray_cluster
    settings = Settings.load().updated(embed=change)
    probe = _probe(ray).remote(settings)
    try:
        assert ray.get(probe.kind.remote()) != "NodeEmbedder"
    finally:
        ray.kill(probe)
