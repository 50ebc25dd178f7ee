"""How well the comparison's label check tells a paper's right taxonomy labels from wrong ones (no LLM).

    .venv/bin/python bench/label_check.py                  # the 16 PDFs of ../shared/data/pdfs, MiniLM
    .venv/bin/python bench/label_check.py --pdfs DIR --truth FILE

The Writer's comparison asks the model for one problem label and one method label per cited paper; a weak model
picks the first label of each list or any other. :class:`actors.steps.write.compare.LabelCheck` checks a label
against the paper's own title and abstract: the taxonomy's labels are ranked by embedding similarity to that text
and a label is supported when it is among the ``top`` closest. Each PDF is parsed by the product's PyMuPDF parser
(first pages) and outlined as at ingestion, so the text is the title and abstract the comparison shows the model.
Truth: ``bench/data/paper_labels.json`` (acceptable labels per paper, assigned by hand; catch-all labels are never
ranked, so only specific labels count). Printed per axis and ``top``: the share of right labels the check keeps
(a right label marked unsupported is a false alarm in the report) and the share of wrong labels it marks.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from actors.steps.ingest.sections import outline  # noqa: E402
from actors.steps.write.compare import ABSTRACT_CHARS, LabelCheck, catch_all  # noqa: E402
from infra.settings import Settings  # noqa: E402


def paper_text(path: Path) -> str:
    """Title and abstract as the comparison shows them (``doc.abstract or doc.markdown``, first ABSTRACT_CHARS)."""
    from infra.pdf.pymupdf import PyMuPDFParser

    parsed = PyMuPDFParser(max_pages=2).parse(path)
    tree = outline(parsed.markdown, parsed.title)
    title = parsed.title or tree.title or path.stem
    abstract = " ".join((tree.abstract or parsed.markdown).split())[:ABSTRACT_CHARS]
    return f"{title}\n{abstract}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pdfs", type=Path, default=REPO.parent / "shared" / "data" / "pdfs")
    parser.add_argument("--truth", type=Path, default=REPO / "bench" / "data" / "paper_labels.json")
    parser.add_argument("--top", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    args = parser.parse_args()
    truth = json.loads(args.truth.read_text())["papers"]
    missing = [name for name in truth if not (args.pdfs / name).is_file()]
    if missing:
        print(f"not found in {args.pdfs}: {', '.join(missing)}", file=sys.stderr)
        return 2

    from infra.embed import build_embedder

    settings = Settings.load()
    embedder = build_embedder(settings)
    w = settings.write
    started = time.perf_counter()
    texts = {name: paper_text(args.pdfs / name) for name in truth}
    parse_s = time.perf_counter() - started
    check = LabelCheck(embedder, w.problem_labels, w.method_labels, top=1)
    started = time.perf_counter()
    ranked = {name: check.ranked(text) for name, text in texts.items()}
    rank_s = time.perf_counter() - started
    print(f"{len(texts)} papers ({parse_s:.1f} s to parse), embedder {getattr(embedder, 'name', '?')}, "
          f"{1000 * rank_s / len(texts):.0f} ms per paper to rank both taxonomies\n")
    print(f"{'axis':>7} {'top':>4} {'right labels kept':>18} {'wrong labels marked':>20}")
    for axis, index in (("problem", 0), ("method", 1)):
        for top in args.top:
            kept = right = marked = wrong = 0
            for name, labels in truth.items():
                order = ranked[name][index]
                acceptable = {label for label in labels[axis] if not catch_all(label)}
                for label in order:
                    if label in acceptable:
                        right += 1
                        kept += label in order[:top]
                    else:
                        wrong += 1
                        marked += label not in order[:top]
            print(f"{axis:>7} {top:>4} {f'{kept}/{right} ({kept / right:.2f})':>18} "
                  f"{f'{marked}/{wrong} ({marked / wrong:.2f})':>20}")
    print("\nper paper (closest problem / method label by the text; * acceptable):")
    for name, (problems, methods) in ranked.items():
        ok = truth[name]
        print(f"  {name[:34]:34} {problems[0]}{'*' if problems[0] in ok['problem'] else ''} / "
              f"{methods[0]}{'*' if methods[0] in ok['method'] else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
