"""What Forage's checks were calibrated to, per embedder and relevance signal: the similarity floors, the confirmation
an answer needs, the signal's calibration curve, and the judge's rates (the packaged model's as measured; an
uncalibrated model's). Each figure names the bench that measured it; docs/evidence.md has the tables."""

from __future__ import annotations

# (answer_similarity, topic_similarity) per embedder backend: cosine similarities of a requirement and a passage
# MiniLM: on BEIR SciFact train (bench/relevance_floors.py, docs/evidence.md) 90 % of relevant passages are at
# or above 0.43 and 98 % at or above 0.33. nomic-embed-text: not calibrated here (no Ollama); run the bench.
SIMILARITY: dict[str, tuple[float, float]] = {"minilm": (0.43, 0.33), "ollama": (0.5, 0.4), "openai": (0.5, 0.4)}
# The confirmation an 'answers' needs before it counts for coverage: similarity + CONFIRM_WORD_WEIGHT x the share of
# the requirement's content words the passage holds, at least this much. MiniLM: chosen on BEIR SciFact train as
# the loosest that credits at most 10 % of requirements whose relevant papers are not in the library
# (bench/coverage_signal.py, docs/evidence.md). Other embedders: not calibrated here, so no confirmation.
CONFIRMATION: dict[str, float] = {"minilm": 0.95}
CONFIRM_WORD_WEIGHT = 0.4
# The same two for the store's own score of a chunk (its vector or best 2-sentence window: forage.relevance_signal
# "store"), chosen by the same rules on the same SciFact train queries (bench/relevance_signal.py for the floors,
# bench/coverage_signal.py --signal store for the confirmation; docs/evidence.md). Only MiniLM is calibrated.
STORE_SIMILARITY: dict[str, tuple[float, float]] = {"minilm": (0.52, 0.40)}
STORE_CONFIRMATION: dict[str, float] = {"minilm": 1.0}
# The signal's calibration curve: P(a passage answers | similarity + CONFIRM_WORD_WEIGHT x word share = x) =
# sigmoid(intercept + slope x), fitted on the top 12 hybrid chunks of the 809 judged BEIR SciFact train claims, and the
# penalty a judge's log-likelihood ratio pays first (the least keeping false coverage <= 10 % on train for judges from
# (0.95, 0.05) to (0.6, 0.4)): bench/judge_credit.py, docs/evidence.md. The check weighs the judge by it
# (actors/steps/forage/credit.py). Only the store's score with MiniLM is fitted: the text's gives no relief.
ANSWER_CURVE: dict[tuple[str, str], tuple[float, float, float]] = {("store", "minilm"): (-7.826, 8.038, 1.3)}
# The coverage prior: P(the library answers a requirement | the scores of the passages shown to the judge) =
# sigmoid(intercept + w1 x log of their summed odds under the curve + w2 x the best score), one passage per document
# (its best), fitted on what the Forager showed simulated judges (1, 1), (0.8, 0.2), (0.6, 0.4) and (1, 0) for 200
# SciFact train claims each (`forage eval evidence --split train`, bench/coverage_prior.py, docs/evidence.md; the
# answerable ones and those whose relevant papers were held out weighted to count alike); a requirement's coverage is
# this prior times the Bayes factor of the judge's verdicts (actors/steps/forage/credit.py). Only where the curve is
# fitted.
COVERAGE_PRIOR: dict[tuple[str, str], tuple[float, float, float]] = {("store", "minilm"): (-14.1, -1.879, 16.654)}
# The judge's rates (true positive, false positive: the share of answering passages it calls answers, and of other
# passages) when forage.judge_tpr / judge_fpr are not set. An uncalibrated model's "answers" is taken to carry no
# information (the rates of a judge that calls every passage an answer): the check then asks of it what the floors
# ask of the signal alone.
UNCALIBRATED_JUDGE = (1.0, 1.0)
# The packaged embedded model's rates as `forage calibrate --llm embedded --queries 20` measured them (BEIR SciFact
# train: it called all 20 relevant passages and all 60 near others answers; docs/evidence.md, section 6): its runs
# use them unless the researcher's own `forage calibrate` of it is kept.
PACKAGED_JUDGE = {"tpr": 1.0, "fpr": 1.0, "calibrated": "2026-11-29",
                   "labelled_set": "beir-scifact:train (20 queries: 20 relevant passages, 60 others)"}
