"""Charts beside the report (matplotlib, Agg; no display, no pyplot state): coverage per requirement per
iteration, sources by year, and the gap matrix as a heatmap. Each chart is a :class:`Figure` holding
PNG (base64) and SVG; :meth:`actors.steps.run.rundir.RunDir.save_report` writes them to
``runs/<run_id>/figures/<name>.png|svg`` and the report links them.
"""

from __future__ import annotations

import base64
import io
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import MaxNLocator

from messages.write import Figure, GapMatrix, SourceRef

DPI = 110


def _export(fig: MplFigure, name: str, caption: str) -> Figure:
    FigureCanvasAgg(fig)
    fig.tight_layout()
    png, svg = io.BytesIO(), io.StringIO()
    fig.savefig(png, format="png", dpi=DPI, metadata={"Software": None})
    fig.savefig(svg, format="svg", metadata={"Date": None, "Creator": None})
    return Figure(name=name, caption=caption, png_base64=base64.b64encode(png.getvalue()).decode("ascii"),
                  svg=svg.getvalue())


def coverage_chart(history: Sequence[Mapping[str, float]], labels: Mapping[str, str] | None = None) -> Figure:
    """One line per requirement: its coverage after each iteration (0 not covered, 0.5 partly, 1 answered)."""
    fig = MplFigure(figsize=(6.4, 3.0 + 0.22 * len(history and history[0])))
    ax = fig.add_subplot()
    ids = list(dict.fromkeys(r for it in history for r in it))
    xs = list(range(1, len(history) + 1))
    for k, rid in enumerate(ids):
        # lines with equal values would hide each other: each is nudged by a hair (the ticks stay exact)
        nudge = (k - (len(ids) - 1) / 2) * 0.012
        ys = [it.get(rid, 0.0) + nudge for it in history]
        name = f"{rid}: {textwrap.shorten((labels or {}).get(rid, ''), 60, placeholder='…')}".rstrip(": ")
        ax.plot(xs, ys, marker="o", label=name)
    ax.set_xlabel("iteration")
    ax.set_ylabel("coverage")
    ax.set_ylim(-0.08, 1.08)
    ax.set_yticks([0, 0.5, 1], ["0 not covered", "0.5 partly", "1 answered"], fontsize=8)
    ax.set_xticks(xs or [1])
    ax.set_title("Coverage per requirement per iteration")
    if ids:
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, frameon=False)
    return _export(fig, "coverage", "Coverage per requirement per iteration")


def years_chart(sources: Sequence[SourceRef]) -> Figure:
    """Bar chart: how many sources per publication year ('n.d.' for unknown years, last)."""
    counts = Counter(s.year for s in sources)
    years = sorted(y for y in counts if y is not None)
    labels = [str(y) for y in years] + (["n.d."] if None in counts else [])
    values = [counts[y] for y in years] + ([counts[None]] if None in counts else [])
    fig = MplFigure(figsize=(6.4, 3.2))
    ax = fig.add_subplot()
    ax.bar(range(len(labels)), values, color="#3a6ea5")
    ax.set_xticks(range(len(labels)), labels, rotation=45 if len(labels) > 8 else 0, fontsize=8)
    ax.set_ylabel("sources")
    ax.set_title("Sources by year")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    return _export(fig, "years", "Sources by publication year")


def gap_heatmap(matrix: GapMatrix) -> Figure:
    """Heatmap of the problem × method matrix: papers per cell, the count written in non-empty cells."""
    counts = [[len(c) for c in row] for row in matrix.cells]
    fig = MplFigure(figsize=(7.5, 1.4 + 0.42 * len(matrix.problems)))
    ax = fig.add_subplot()
    top = max(1, *(max(r) for r in counts))
    image = ax.imshow(counts, cmap="Blues", aspect="auto", vmin=0, vmax=top)
    ax.set_xticks(range(len(matrix.methods)),
                  [textwrap.shorten(m, 24, placeholder="…") for m in matrix.methods], rotation=40, ha="right",
                  fontsize=7)
    ax.set_yticks(range(len(matrix.problems)),
                  [textwrap.shorten(p, 30, placeholder="…") for p in matrix.problems], fontsize=7)
    for i, row in enumerate(counts):
        for j, value in enumerate(row):
            if value:
                ax.text(j, i, str(value), ha="center", va="center", fontsize=8,
                        color="white" if value > top / 2 else "black")
    ax.set_title("Problem × method gap matrix (papers per cell; blank = gap)")
    fig.colorbar(image, ax=ax, fraction=0.03, ticks=MaxNLocator(integer=True))
    return _export(fig, "gaps", "Problem × method gap matrix of the cited papers")
