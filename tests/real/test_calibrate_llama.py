"""`forage calibrate` against a real OpenAI-compatible server: llama.cpp's (xllamacpp) with SmolLM2-135M
(tests/llama_server.py), over two queries of the tiny BEIR set: the judging prompt reaches the model, its verdicts
are scored against the qrels, the rates are kept for ``openai:smollm2-135m`` and a run of that model reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infra.judges import judges_file
from infra.settings import Settings
from tests.llama_server import LlamaServer
from tests.tiny_beir import write_beir

pytestmark = [pytest.mark.slow, pytest.mark.real_llm]


def test_calibrate_measures_smollm2_behind_llama_cpp(tmp_path: Path, monkeypatch) -> None:
    from gateway.cli import app

    beir = write_beir(tmp_path / "tiny")
    with LlamaServer(slots=1, n_ctx=4096) as server:
        env = {"FORAGE_LLM__BASE_URL": server.base_url, "FORAGE_LLM__API_KEY": server.api_key,
               "FORAGE_LLM__TIMEOUT_S": "120", "COLUMNS": "200"}
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        result = CliRunner().invoke(app, ["calibrate", "--llm", "openai", "--model", server.model, "--beir",
                                          str(beir), "--split", "test", "--queries", "2", "--near", "1"])
    assert result.exit_code == 0, result.output
    kept = json.loads(judges_file().read_text())[f"openai:{server.model}"]
    assert 0.0 <= kept["tpr"] <= 1.0 and 0.0 <= kept["fpr"] <= 1.0
    assert kept["relevant"] + kept["other"] >= 1 and kept["labelled_set"] == "tiny:test" and kept["queries"] == 2
    assert f"TPR {kept['tpr']:.2f}" in result.output and f"FPR {kept['fpr']:.2f}" in result.output
    settings = Settings.load(llm={"backend": "openai", "model": server.model})
    assert settings.judge_rates() == (kept["tpr"], kept["fpr"])
