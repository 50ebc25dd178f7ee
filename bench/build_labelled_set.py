"""Build the labelled set Forage ships for `forage calibrate` (actors/steps/evaluation/labelled/), a BEIR folder.

Its passages are the chunks Forage's own ingestion made of the 13 CC BY papers among the shared PDFs
(``../shared/data/pdfs`` and ``pdfs-extra``; SOURCE.md there lists each file's licence), with the author-list
appendices of the ATLAS/CMS paper left out. Its 19 questions were written by reading those passages, one fact each
(a number, a place, a finding), on 11 of the papers; a passage is labelled relevant when it states that fact. The
labels were found by a pattern per question over every passage of the paper, then read one by one: the patterns'
hits a reader would not call an answer are listed in ``EXCLUDE``, answering passages the pattern missed in
``INCLUDE`` (the reasons beside them).

Usage: forage library add <the 13 PDFs> --store DIR, then
       python bench/build_labelled_set.py --store DIR [--out actors/steps/evaluation/labelled]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra.settings import Settings  # noqa: E402
from infra.store import build_store  # noqa: E402
from infra.store.base import ChunkFilter  # noqa: E402

# question id -> (a fragment of the paper's title, the question, the pattern that marks a passage stating the fact)
QUESTIONS: dict[str, tuple[str, str, str]] = {
    "higgs-mass": ("Higgs", "What Higgs boson mass did the combined ATLAS and CMS Run 1 measurement obtain?",
                   r"125\.09"),
    "sh3-affinity": ("SH3", "Where are the Pbs2 mutations that increase binding to the Sho1 SH3 domain located?",
                     r"increase affinity are situated outside|"
                     r"increas\w* (binding )?(affinity|strength).{0,150}outside"),
    "gck-coverage": ("glucokinase", "What share of all possible glucokinase missense and nonsense variants did the "
                                    "multiplexed yeast assay measure?", r"97\s?%"),
    "gck-hypoactive": ("glucokinase", "Where in the glucokinase structure are hypoactive variants concentrated?",
                       r"hypoactive variants (are )?(concentrated|enriched|located)|concentrated at buried"),
    "gck-correlates": ("glucokinase", "What do the glucokinase variant activity scores correlate with?",
                       r"(activity )?scores correlate with|correlat\w+ with in vitro catalytic efficiency"),
    "moucheti-larvae": ("Anopheles", "Where do Anopheles moucheti larvae develop?",
                        r"larvae develop in and around floating|breeding site for _?Anopheles moucheti_? larvae"),
    "nili-larvae": ("Anopheles", "Where do Anopheles nili larvae thrive?", r"[Ll]arvae thrive at the sunny edge"),
    "tuner-microphonics": ("Tuner", "What level of microphonics was measured on the dressed 3.9 GHz cavity at the "
                                    "Fermilab horizontal test stand?", r"400 Hz"),
    "tuner-piezo": ("Tuner", "How many piezo actuators does the fast tuner of the LCLS-II 3.9 GHz cavity use?",
                    r"2 encapsulated piezos|two-piezo|two (encapsulated )?piezo"),
    "mcp-abortion": ("USA aid", "How did abortion rates change in sub-Saharan countries highly exposed to the Mexico "
                                "City Policy while it was in effect?", r"4·8 abortions|4\.8 abortions"),
    "mcp-contraception": ("USA aid", "How did modern contraception use change in highly exposed countries while the "
                                     "Mexico City Policy was in effect?", r"3·15 percentage|3\.15 percentage"),
    "asgard-ancestor": ("Asgard", "What optimal growth temperature is inferred for the Asgard archaeal ancestor of "
                                  "eukaryotes?", r"53 °C"),
    "asgard-lasca": ("Asgard", "What optimal growth temperature is inferred for the Last Asgard Common Ancestor?",
                     r"LAsCA, OGT 65\.5"),
    "ace-selectivity": ("Fragment", "How selective is compound 33RE for the N-domain of ACE over the C-domain?",
                        r"927"),
    "dvt-ivc": ("deep venous", "What complications do inferior vena cava filters cause in trauma patients?",
                r"filters? (can )?migrat|migrat\w+.{0,80}(filter|vena cava)|penetrat\w+ the vessel|IVC penetration|"
                r"insertion related complications"),
    "dvt-evidence": ("deep venous", "Which thromboprophylaxis does level one evidence support for trauma patients?",
                     r"[Ll]evel (one|I|1) evidence"),
    "vespa-language": ("VESPA", "In which programming languages is the VESPA software written?",
                       r"python and Perl|Python and Perl"),
    "wheat-stress": ("wheat", "What heat stress regime was applied to the wheat genotypes after anthesis?",
                     r"35:28"),
    "smart-matrix": ("Smart Cities", "What tool does the Smart Cities article propose to score the technologies of "
                                     "a Smart City?", r"analysis matrix"),
}
# (question id, chunk number within its paper): pattern hits that do not answer, answering passages it missed
EXCLUDE: dict[str, set[int]] = {
    "dvt-ivc": {7},  # filter migration rates in non-trauma patients: not what the question asks
}
INCLUDE: dict[str, set[int]] = {
    "gck-hypoactive": {28},  # "active site and buried residues were mutation-sensitive"
}
LEFT_OUT_SECTIONS = re.compile(r"^[A-Z] The (ATLAS|CMS) Collaboration")  # thousands of author names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True, help="a store holding the 13 CC BY papers")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent
                    / "actors/steps/evaluation/labelled")
    args = ap.parse_args()
    store = build_store(Settings.load().updated(store={"path": args.store}))
    passages: list[dict] = []
    for doc in sorted(store.list_documents(), key=lambda d: d.title):
        for chunk in store.chunks(ChunkFilter(doc_ids=(doc.doc_id,)), limit=100_000):
            if not LEFT_OUT_SECTIONS.match(chunk.section_path.split(">")[-1].strip()):
                passages.append({"_id": chunk.chunk_id, "title": doc.title, "text": chunk.text})
    qrels: list[tuple[str, str]] = []
    for qid, (paper, _, pattern) in QUESTIONS.items():
        found = re.compile(pattern, re.IGNORECASE)
        ids = {p["_id"] for p in passages if paper.lower() in p["title"].lower()
               and found.search(" ".join(p["text"].split()))}
        paper_ids = {p["_id"] for p in passages if paper.lower() in p["title"].lower()}
        number = {int(i.rsplit(":", 1)[1]): i for i in paper_ids}
        ids -= {number[n] for n in EXCLUDE.get(qid, set())}
        ids |= {number[n] for n in INCLUDE.get(qid, set())}
        if not ids:
            raise SystemExit(f"{qid}: no passage found (another parser revision?)")
        qrels += [(qid, i) for i in sorted(ids)]
    (args.out / "qrels").mkdir(parents=True, exist_ok=True)
    with (args.out / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for p in passages:
            f.write(json.dumps(p, ensure_ascii=False) + "\n")
    with (args.out / "queries.jsonl").open("w", encoding="utf-8") as f:
        for qid, (_, text, _) in QUESTIONS.items():
            f.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")
    with (args.out / "qrels" / "test.tsv").open("w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{c}\t1\n" for q, c in qrels))
    print(f"{len(passages)} passages of {len({p['title'] for p in passages})} papers, {len(QUESTIONS)} questions, "
          f"{len(qrels)} relevant passages -> {args.out}")


if __name__ == "__main__":
    main()
