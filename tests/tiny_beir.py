"""A tiny BEIR data set (corpus, queries, test and train qrels) written to a folder, as `forage eval retrieval` and
`forage eval evidence` read one: small enough to embed in seconds, with graded and ungraded relevance."""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = [
    ("d1", "Low-dose aspirin and the prevention of myocardial infarction",
     ("In a randomized trial of 22,000 physicians, taking aspirin every other day reduced the risk of a first "
     "heart attack by 44 percent. Gastrointestinal bleeding was slightly more frequent with aspirin.")),
    ("d2", "Vitamin D supplements and hip fractures in older women",
     "Daily vitamin D with calcium did not lower the rate of hip fractures among women over 70 in this trial."),
    ("d3", "CRISPR editing of pigmentation genes in zebrafish embryos",
     "Injected Cas9 ribonucleoproteins disrupted the slc24a5 gene and produced golden zebrafish larvae."),
    ("d4", "Insecticide-treated bed nets and malaria in African children",
     ("Villages given insecticide-treated bed nets saw fewer mosquito bites and a fall in malaria cases "
     "and child deaths.")),
    ("d5", "Coffee drinking and the risk of liver cirrhosis",
     "People who drank four cups of coffee a day had a lower risk of alcoholic cirrhosis of the liver."),
    ("d6", "Deep brain stimulation of the subthalamic nucleus in Parkinson disease",
     "Electrodes in the subthalamic nucleus reduced tremor and rigidity in patients with Parkinson disease."),
    ("d7", "Methicillin-resistant Staphylococcus aureus in hospital wards",
     "MRSA infections spread between patients on surgical wards; screening and isolation cut transmission."),
    ("d8", "Sleep deprivation and memory consolidation",
     ("Students kept awake all night remembered fewer word pairs the next day than students who slept: "
     "sleep consolidates memory.")),
    ("d9", "Statins and LDL cholesterol",
     "Statin therapy lowered LDL cholesterol by a third and reduced major cardiovascular events."),
    ("d10", "Gut microbiota and obesity in germ-free mice",
     ("Germ-free mice colonized with bacteria from obese donors gained more fat than mice given lean donors' "
     "microbiota.")),
]
QUERIES = {
    "q1": "Does aspirin prevent heart attacks?",
    "q2": "Bed nets protect children from malaria carried by mosquitoes",
    "q3": "Staying awake all night harms memory",
    "q4": "Antibiotic-resistant Staphylococcus infections in hospitals",
    "q5": "Gut bacteria make mice obese",
}
TEST_QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td9\t1\nq2\td4\t1\nq3\td8\t1\n"
TRAIN_QRELS = "query-id\tcorpus-id\tscore\nq4\td7\t1\nq5\td10\t1\n"


def write_beir(folder: Path, *, train: bool = True) -> Path:
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": x, "metadata": {}}) + "\n" for i, t, x in CORPUS))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in QUERIES.items()))
    (folder / "qrels" / "test.tsv").write_text(TEST_QRELS)
    if train:
        (folder / "qrels" / "train.tsv").write_text(TRAIN_QRELS)
    return folder
