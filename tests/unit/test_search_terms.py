"""Search strings: what may leave the machine, proposed from the query and requirements, edited by the researcher."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from actors.steps.search_terms import (
    SearchTermsAnswer, clean_keywords, concepts, parse_search_lines, propose_search_queries, read_constraints,
    search_lines,
)
from infra.llm.fakes import ScriptedLLM
from messages.plan import Requirement, SearchQuery

TODAY = dt.date(2026, 11, 22)
REQS = (Requirement(id="R1", text="Which deep learning models predict crop yield from satellite imagery?"),
        Requirement(id="R2", text="How accurate are yield predictions compared with field measurements?"))
QUERY = "Deep learning crop yield prediction from satellite images in the last 5 years, open access please"


@pytest.mark.parametrize("query, expected", [
    ("soil carbon in the last 5 years", (2021, None)),
    ("soil carbon over the past decade", (2016, None)),
    ("soil carbon since 2019", (2019, None)),
    ("soil carbon after 2019", (2020, None)),
    ("soil carbon before 2010", (None, 2009)),
    ("soil carbon between 2012 and 2015", (2012, 2015)),
    ("soil carbon from 2018 to 2014", (2014, 2018)),
    ("soil carbon", (None, None)),
])
def test_years_stated_in_words(query, expected):
    c = read_constraints(query, TODAY)
    assert (c.year_from, c.year_to) == expected


def test_title_and_author_lookups_are_recognized():
    c = read_constraints('papers by Geoffrey Hinton, e.g. "A fast learning algorithm for deep belief nets"')
    assert c.title == "A fast learning algorithm for deep belief nets"
    assert c.author == "Geoffrey Hinton"
    assert read_constraints("open-access studies of soil").open_access


def test_keywords_lose_filler_and_time_words():
    assert concepts("Recent studies on the impact of microplastics since 2020") == ["microplastics"]
    assert clean_keywords(["recent microplastics", "marine food webs 2021", "the effect", "Marine food webs"]) == [
        "microplastics", "marine food webs"]
    assert clean_keywords(["a", "b", "c", "d", "e", "f", "g"]) == []
    many = clean_keywords([f"concept{i} thing" for i in range(8)])
    assert len(many) == 5


def test_model_keywords_become_approved_strings_with_the_query_constraints():
    llm = ScriptedLLM([SearchTermsAnswer.model_validate({
        "searches": [{"keywords": ["deep learning", "crop yield", "satellite imagery", "recent"], "requirement": "R1"},
                     {"keywords": ["yield prediction accuracy", "field measurements"], "requirement": "r2"}],
        "year_from": 1999, "open_access": False})])
    queries, degraded = asyncio.run(propose_search_queries(QUERY, REQS, llm, today=TODAY))
    assert degraded == ()
    assert [q.text for q in queries] == ["deep learning crop yield satellite imagery",
                                         "yield prediction accuracy field measurements"]
    # the query's own words win over the model: last 5 years → 2021, open access requested
    assert all(q.year_from == 2021 and q.year_to is None and q.open_access for q in queries)
    assert [q.requirement_ids for q in queries] == [("R1",), ("R2",)]
    # nothing but the keywords: the full query is never a search string
    assert all(q.text not in QUERY for q in queries) and all("last" not in q.text for q in queries)


def test_a_failing_model_gives_keywords_from_the_requirements():
    llm = ScriptedLLM(["not json", "still not", "nope"])
    queries, degraded = asyncio.run(propose_search_queries(QUERY, REQS, llm, today=TODAY))
    assert degraded and "keywords taken from the requirements" in degraded[0]
    assert [q.requirement_ids for q in queries] == [("R1",), ("R2",)]
    assert queries[0].text == "deep learning models predict"
    assert all(2 <= len(q.text.split()) <= 5 for q in queries)


def test_unlabelled_and_duplicate_searches_are_assigned_and_merged():
    llm = ScriptedLLM([{"searches": [{"keywords": ["crop yield", "satellite imagery"]},
                                     {"keywords": ["Crop yield", "satellite imagery"], "requirement": "R2"},
                                     {"keywords": ["x"]}]}])
    queries, _ = asyncio.run(propose_search_queries("crop yield from satellites", REQS, llm, today=TODAY))
    assert queries[0].text == "crop yield satellite imagery"
    assert queries[0].requirement_ids == ("R1", "R2")
    assert len(queries) == 1


def test_lookups_come_first():
    llm = ScriptedLLM([{"searches": [{"keywords": ["deep belief nets", "layer-wise training"], "requirement": "R1"}]}])
    q = 'What did "A fast learning algorithm for deep belief nets" show? Also papers by Geoffrey Hinton.'
    queries, _ = asyncio.run(propose_search_queries(q, REQS[:1], llm, today=TODAY))
    assert [(x.kind, x.text) for x in queries][:2] == [
        ("title", "A fast learning algorithm for deep belief nets"), ("author", "Geoffrey Hinton")]


def test_edited_search_lines_round_trip():
    queries = (SearchQuery(text="soil moisture sensing", year_from=2019, year_to=2024, open_access=True),
               SearchQuery(text="Geoffrey Hinton", kind="author"),
               SearchQuery(text="remote sensing drought", year_to=2010))
    text = search_lines(queries)
    assert text.splitlines()[0] == "soil moisture sensing | 2019-2024 | oa"
    assert parse_search_lines("# comment\n\n" + text) == tuple(
        q.model_copy(update={"requirement_ids": ()}) for q in queries)
    with pytest.raises(ValueError, match="unknown filter"):
        parse_search_lines("soil | sometimes")
