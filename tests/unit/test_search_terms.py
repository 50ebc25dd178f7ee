"""Search strings: what may leave the machine, proposed from the query and requirements, edited by the researcher."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from actors.steps.plan.search_terms import (
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


@pytest.mark.parametrize("query, venue, has_pdf", [
    ("soil carbon papers published in Nature Communications since 2020", "Nature Communications", False),
    ("work presented at the Proceedings of the ACM on Programming Languages",
     "Proceedings of the ACM on Programming Languages", False),
    ("soil carbon studies published in English since 2015", None, False),  # a language, not a venue
    ("soil carbon in the journal Geoderma, with full text", "Geoderma", True),
    ("soil carbon studies, only those with PDFs", None, True),
    ("full-text search engines for soil data", None, False),  # a topic, not a constraint
    ("soil carbon", None, False),
])
def test_venue_and_full_text_stated_in_words(query, venue, has_pdf):
    c = read_constraints(query, TODAY)
    assert (c.venue, c.has_pdf) == (venue, has_pdf)


def test_authors_and_venue_become_filters_only_when_the_query_names_them():
    llm = ScriptedLLM([SearchTermsAnswer.model_validate({
        "searches": [{"keywords": ["deep learning", "crop yield"], "requirement": "R1"}],
        "authors": ["Jane Doe", "Invented Person", "jane doe", "Doe"], "venue": "Remote Sensing of Environment"})])
    q = "Deep learning crop yield papers by Jane Doe in Remote Sensing of Environment, with full text"
    queries, _ = asyncio.run(propose_search_queries(q, REQS, llm, today=TODAY))
    author_lookup, keywords = queries[0], queries[1]
    assert (author_lookup.kind, author_lookup.text, author_lookup.authors) == ("author", "Jane Doe", ())
    # the model's reading of the venue is in the query's words; the invented author is not: dropped
    assert keywords.authors == ("Jane Doe",) and keywords.venue == "Remote Sensing of Environment"
    assert all(x.has_pdf and x.venue == "Remote Sensing of Environment" for x in queries)
    # a venue or author the query never names is never sent
    llm = ScriptedLLM([{"searches": [{"keywords": ["crop yield", "satellite imagery"], "requirement": "R1"}],
                        "authors": ["Geoffrey Hinton"], "venue": "Nature"}])
    queries, _ = asyncio.run(propose_search_queries(QUERY, REQS, llm, today=TODAY))
    assert all(x.authors == () and x.venue is None and not x.has_pdf for x in queries)


def test_filters_round_trip_through_the_edited_lines():
    queries = (SearchQuery(text="soil moisture sensing", year_from=2019, has_pdf=True,
                           authors=("Jane Doe", "Ann Lee"), venue="Water Research"),
               SearchQuery(text="Geoffrey Hinton", kind="author", venue="Nature"))
    text = search_lines(queries)
    assert text.splitlines() == [
        "soil moisture sensing | 2019- | pdf | author: Jane Doe | author: Ann Lee | venue: Water Research",
        "author: Geoffrey Hinton | venue: Nature"]
    assert parse_search_lines(text) == queries
    assert queries[0].filters() == ("years 2019–…", "with a PDF", "by Jane Doe or Ann Lee", "in Water Research")
    assert queries[0].describe() == ('"soil moisture sensing" (years 2019–…, with a PDF, by Jane Doe or Ann Lee, '
                                     'in Water Research)')
    with pytest.raises(ValueError, match="author: NAME"):
        parse_search_lines("soil | author:")
