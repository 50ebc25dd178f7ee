"""PDF backend selection (ingest.parser auto / pymupdf / marker), the GPU an Ingestor asks Ray for,
and the parts of the Marker adapter that need no Marker: its model-folder check (on real folders)
and the reading of Marker's paginated Markdown.

The Marker adapter itself is tested in tests/real/test_marker_parser.py where marker-pdf and its
models exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.options import cluster_gpu_count, ingestor_gpus, ingestor_pool_size, options_for
from infra.errors import ConfigError
from infra.pdf import build_parser, resolve_parser
from infra.pdf.marker import (FONT_FILE, LAYOUT_DIR, ORDER_DIR, marker_importable, model_cache_dir, models_present,
                              page_boxes, split_pages)
from infra.pdf.pymupdf import PyMuPDFParser
from infra.settings import Settings

MARKER_INSTALLED = marker_importable()


def model_folder(root: Path, *, weights: bool = True, font: bool = True, order: bool = False) -> Path:
    """A folder laid out as ``python -m infra.pdf.marker fetch`` leaves it (file contents are not read)."""
    layout = root / LAYOUT_DIR
    layout.mkdir(parents=True)
    (layout / "config.json").write_text('{"arch": "rf-detr"}')
    if weights:
        (layout / "rfdetr_layout.pth").write_bytes(b"\0" * 16)
    if order:
        (root / ORDER_DIR).mkdir()
        (root / ORDER_DIR / "config.json").write_text("{}")
        (root / ORDER_DIR / "rfdetr_order.pth").write_bytes(b"\0")
    if font:
        (root / FONT_FILE).write_bytes(b"\0")
    return root


def settings(parser: str = "auto", **ingest: object) -> Settings:
    return Settings.load(ingest={"parser": parser, **ingest})


# ---------------------------------------------------------------- the model folder


def test_model_cache_dir_follows_the_environment(tmp_path: Path) -> None:
    assert model_cache_dir({"MODEL_CACHE_DIR": str(tmp_path)}) == tmp_path
    assert model_cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "datalab" / "models"


def test_models_present_checks_the_real_folder(tmp_path: Path) -> None:
    ok, why = models_present(tmp_path / "missing")
    assert not ok and "does not exist" in why
    ok, why = models_present(tmp_path)  # exists, empty
    assert not ok and LAYOUT_DIR in why and "python -m infra.pdf.marker fetch" in why

    no_weights = model_folder(tmp_path / "a", weights=False)
    assert models_present(no_weights)[0] is False
    no_font = model_folder(tmp_path / "b", font=False)
    ok, why = models_present(no_font)
    assert not ok and FONT_FILE in why

    ok, why = models_present(model_folder(tmp_path / "c"))
    assert ok and "reading order" not in why
    ok, why = models_present(model_folder(tmp_path / "d", order=True))
    assert ok and "with reading order" in why


# ---------------------------------------------------------------- auto selection


def test_auto_without_models_picks_pymupdf(tmp_path: Path) -> None:
    for env in ({"MODEL_CACHE_DIR": str(tmp_path / "nowhere")}, {"MODEL_CACHE_DIR": str(tmp_path)}):
        backend, why = resolve_parser(settings("auto"), env)
        assert backend == "pymupdf"
        assert "no Marker models" in why


def test_auto_with_models_picks_marker_only_where_it_is_installed(tmp_path: Path) -> None:
    env = {"MODEL_CACHE_DIR": str(model_folder(tmp_path))}
    backend, why = resolve_parser(settings("auto"), env)
    if MARKER_INSTALLED:
        assert backend == "marker" and str(tmp_path) in why
    else:
        assert backend == "pymupdf"
        assert "marker-pdf is not installed" in why and "forage[marker]" in why


def test_an_explicit_parser_is_taken_as_asked(tmp_path: Path) -> None:
    env = {"MODEL_CACHE_DIR": str(tmp_path / "nowhere")}
    assert resolve_parser(settings("pymupdf"), env)[0] == "pymupdf"
    assert resolve_parser(settings("marker"), env)[0] == "marker"
    env = {"MODEL_CACHE_DIR": str(model_folder(tmp_path / "m"))}
    assert resolve_parser(settings("pymupdf"), env)[0] == "pymupdf"  # models present do not override it


def test_build_parser_auto_builds_pymupdf_without_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_CACHE_DIR", str(tmp_path))
    parser = build_parser(settings("auto", max_pages=7))
    assert isinstance(parser, PyMuPDFParser)
    assert parser.max_pages == 7 and parser.name.startswith("pymupdf4llm-")


@pytest.mark.skipif(MARKER_INSTALLED, reason="marker-pdf is installed here: the missing-install message cannot show")
def test_marker_asked_for_but_not_installed_says_how_to_install(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_CACHE_DIR", str(model_folder(tmp_path)))
    with pytest.raises(ConfigError, match=r"pip install 'forage\[marker\]'"):
        build_parser(settings("marker"))


# ---------------------------------------------------------------- GPUs for Marker Ingestors


def test_marker_ingestors_ask_for_a_gpu_where_the_cluster_has_one(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_CACHE_DIR", str(tmp_path / "nowhere"))
    marker = settings("marker")
    assert options_for("ingestor", marker, cluster_gpus=2)["num_gpus"] == 1.0
    assert "num_gpus" not in options_for("ingestor", marker, cluster_gpus=0)
    assert options_for("ingestor", settings("marker", marker_gpus=0.5), cluster_gpus=2)["num_gpus"] == 0.5
    assert ingestor_gpus(marker, cluster_gpus=0.25) == 0.25  # never more than the cluster has
    # PyMuPDF Ingestors, and auto without models, never hold a GPU
    assert "num_gpus" not in options_for("ingestor", settings("pymupdf"), cluster_gpus=4)
    assert "num_gpus" not in options_for("ingestor", settings("auto"), cluster_gpus=4)
    # other roles are untouched
    for role in ("forager", "writer", "searcher"):
        assert "num_gpus" not in options_for(role, marker, cluster_gpus=4)
    # the other Ingestor options stay as they were
    opts = options_for("ingestor", marker, cluster_gpus=1)
    assert opts["max_concurrency"] == 1 and opts["max_task_retries"] == 0


def test_pymupdf_ingestors_embed_on_a_gpu_share_when_asked() -> None:
    from infra.embed.minilm import resolve_device

    embedding = settings("pymupdf", embed_gpus=0.25, pool_size=4)
    assert options_for("ingestor", embedding, cluster_gpus=2)["num_gpus"] == 0.25
    assert "num_gpus" not in options_for("ingestor", embedding, cluster_gpus=0)  # no GPUs: it embeds on its CPU
    assert ingestor_pool_size(embedding, cluster_gpus=2) == 4  # parsing stays on CPUs: the setting
    assert ingestor_pool_size(settings("pymupdf", embed_gpus=1.0, pool_size=4), cluster_gpus=2) == 2  # one per GPU
    # an Ingestor's embedder goes where its share is: Ray hides the GPUs from a process without one
    assert resolve_device("cpu") == "cpu" and resolve_device("cuda:1") == "cuda:1"
    import torch

    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="device"):
        Settings.load().updated(embed={"device": "tpu"})


def test_without_ray_the_cluster_has_no_gpus() -> None:
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("a Ray session is running in this process (its GPUs are what it reports)")
    assert cluster_gpu_count() == 0.0


# ---------------------------------------------------------------- Marker's paginated Markdown

SEP = "-" * 48


def test_split_pages_drops_the_page_marks_and_records_spans() -> None:
    paginated = (f"\n\n{{0}}{SEP}\n\n# A Title\n\nAnna Smith, Bo Lee\n\n## Abstract\n\nWe study things.\n\n"
                 f"{{1}}{SEP}\n\n## 1 Introduction\n\nText on page two.\n\n"
                 f"{{2}}{SEP}\n\n\n\n{{3}}{SEP}\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    markdown, spans = split_pages(paginated)
    assert "{0}" not in markdown and SEP not in markdown
    assert [page for page, _, _ in spans] == [1, 2, 4]  # the empty third page has no span
    assert markdown[spans[0][1]:spans[0][2]].startswith("# A Title")
    assert markdown[spans[1][1]:spans[1][2]] == "## 1 Introduction\n\nText on page two."
    assert markdown[spans[2][1]:spans[2][2]] == "| a | b |\n|---|---|\n| 1 | 2 |"
    assert all(a < b for _, a, b in spans) and spans[-1][2] <= len(markdown)


def test_split_pages_without_marks_is_one_page() -> None:
    markdown, spans = split_pages("# T\n\nbody\n")
    assert spans == ((1, 0, len("# T\n\nbody")),) and markdown == "# T\n\nbody\n"
    assert split_pages("") == ("", ())


def test_page_boxes_mark_headings() -> None:
    boxes = page_boxes("# A Title\n\nAnna Smith, Bo Lee\n\n## Abstract\n\nWe study.")
    assert boxes == [("section-header", "# A Title"), ("text", "Anna Smith, Bo Lee"),
                     ("section-header", "## Abstract"), ("text", "We study.")]


def test_the_ingestor_pool_follows_the_gpus_ray_sees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_CACHE_DIR", str(tmp_path / "nowhere"))
    assert ingestor_pool_size(settings("marker"), cluster_gpus=4) == 4  # one Marker Ingestor per GPU
    assert ingestor_pool_size(settings("marker", marker_gpus=0.5), cluster_gpus=3) == 6
    assert ingestor_pool_size(settings("marker"), cluster_gpus=1) == 1  # a second would wait forever for a GPU
    assert ingestor_pool_size(settings("marker"), cluster_gpus=0.5) == 1  # the share is cut to what there is
    pool = settings("pymupdf").ingest.pool_size
    assert ingestor_pool_size(settings("marker"), cluster_gpus=0) == pool  # no GPUs: Marker on CPUs, the setting
    assert ingestor_pool_size(settings("pymupdf"), cluster_gpus=8) == pool  # CPU parsing: the setting
