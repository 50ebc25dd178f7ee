"""The Writer's world: three hand-made papers on how leaves turn light into chemical energy (A: the light reactions,
B: sun and shade leaves, C: the Calvin cycle), a LanceDB store holding them, four requirements with their coverages
and the drafts a scripted model writes, as the Writer's, grounding, comparison and ask tests read them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actors.steps.schemas import OverviewDraft, SectionDraft
from infra.settings import Settings
from messages.forage import Evidence, RequirementCoverage
from messages.plan import Requirement, ResearchQuery
from messages.write import WriteRequest
from tests.factories import make_doc

A = make_doc("a", "Light Reactions of Photosynthesis", [
    ("Introduction", "Plants depend on sunlight. This study examines how leaves use it."),
    ("Results > Light capture", ("## Light capture\nChlorophyll in photosystem II absorbs photons. The light "
                                 "reactions split water and produce ATP and NADPH.")),
], authors=("Ada Lovelace", "Alan Turing"), year=2020, origin="a.pdf")
B = make_doc("b", "Notes on [Leaf] *Energy*", [
    ("Body", ("Leaves of sun-exposed plants hold more chlorophyll per area than shade leaves do, which "
              "increases the share of absorbed light that ends up as chemical energy in the Calvin cycle and "
              "beyond; the effect was strongest in young leaves measured at noon in midsummer under clear sky "
              "conditions.")),
])
C = make_doc("c", "The Calvin Cycle", [
    ("Results", "The Calvin cycle uses ATP and NADPH to fix carbon dioxide into sugars."),
], authors=("Melvin Calvin",), year=1950, origin="doi:10.1000/calvin")


def leaf_store(path: Path, embedder: Any) -> Any:
    """A LanceDB store at ``path`` holding A, B and C embedded by ``embedder``."""
    from infra.store.lancedb import LanceStore

    store = LanceStore(path, dim=384)
    for record, chunks in (A, B, C):
        store.upsert_document(record, chunks, embedder.embed([c.text for c in chunks]))
    return store


RUN = "run-write"
QUERY = ResearchQuery(run_id=RUN, text="How do plants turn sunlight into chemical energy?")


R1 = Requirement(id="R1", text="How does chlorophyll capture light energy?")
R2 = Requirement(id="R2", text="How is the captured energy stored in sugars?")
R3 = Requirement(id="R3", text="Which leaf pigments besides chlorophyll matter?")
R4 = Requirement(id="R4", text="How fast do leaves adapt to shade?")


def ev(doc, tag: str, motive: str, *ordinals: int) -> Evidence:
    record, chunks = doc
    return Evidence(doc_id=record.doc_id, title=record.title, tag=tag, motive=motive, summary=f"About {record.title}.",
                    chunk_ids=tuple(chunks[o].chunk_id for o in ordinals))


def coverages() -> tuple[RequirementCoverage, ...]:
    return (
        RequirementCoverage(run_id=RUN, requirement=R1, iteration=2, coverage=1.0, evidence=(
            ev(A, "answers", "Photosystem II absorbs photons and splits water.", 1),
            ev(B, "interesting", "Sun leaves hold more chlorophyll.", 0))),
        RequirementCoverage(run_id=RUN, requirement=R2, iteration=2, coverage=1.0, evidence=(
            ev(C, "answers", "The Calvin cycle fixes carbon with ATP and NADPH.", 0),
            ev(A, "answers", "ATP and NADPH come from the light reactions.", 1, 0))),
        RequirementCoverage(run_id=RUN, requirement=R3, iteration=2, coverage=0.0),
        RequirementCoverage(run_id=RUN, requirement=R4, iteration=2, status="failed", coverage=0.0,
                            error="RuntimeError: forager died"),
    )


def request(covs=None) -> WriteRequest:
    return WriteRequest(run_id=RUN, query=QUERY, coverages=covs if covs is not None else coverages(), iterations=2)


def settings(**write) -> Settings:
    """Without regeneration, comparison and charts unless asked: the tests below script one draft per section."""
    return Settings.load().updated(write={"regenerate_sections": False, "comparison": False, "charts": False,
                                          **write})


OVERVIEW = OverviewDraft(title="Photosynthetic Energy Capture",
                         overview="Plants capture light with chlorophyll and store it in sugars [4].")


def draft(mechanism: str, evidence: list[tuple[str, list[int]]], mechanism_sources=()) -> SectionDraft:
    return SectionDraft(mechanism=mechanism, mechanism_sources=list(mechanism_sources),
                        evidence=[{"sentence": s, "sources": n} for s, n in evidence])


def section(markdown: str, heading: str) -> str:
    part = markdown.split(f"## {heading}\n", 1)[1]
    return part.split("\n## ", 1)[0]


R2_DRAFT = draft("Sugars store the energy of ATP and NADPH", [("The Calvin cycle fixes carbon", [1])])
