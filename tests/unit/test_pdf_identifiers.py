"""What the PyMuPDF parser reads about a paper from its first page beyond the title: its own DOI and arXiv id,
and the names of an author grid (ACM's layout) when the lines under the title are not one block of names.
Real papers: tests/real/test_real_pdfs.py (every one of the 16 shared PDFs, against tests/data)."""

from __future__ import annotations

from infra.pdf.page_one import names_in_lines_under, page_one_ids


def test_a_labelled_doi_is_the_papers_and_a_bare_one_is_not():
    page = ("Received 3 May 2013. doi:10.1042/CS20130403.\nAs shown before (Smith 2010, 10.1000/cited.1) ...\n"
            "arXiv:2302.07302v1 [cs.HC] 14 Feb 2023")
    assert page_one_ids(page, {}) == ("10.1042/cs20130403", "2302.07302")
    assert page_one_ids("see 10.1000/cited.1 and https://doi.org/10.1371/journal.pone.0197919", {}) == \
        ("10.1371/journal.pone.0197919", None)
    assert page_one_ids("as cited: 10.1000/cited.1", {}) == (None, None)
    # the file's subject metadata (BMC writes the citation there)
    meta = {"subject": "Journal of Trauma Management & Outcomes 2010 4:1. doi:10.1186/1752-2897-4-1"}
    assert page_one_ids("no identifier on the page", meta) == ("10.1186/1752-2897-4-1", None)
    assert page_one_ids("arXiv:hep-th/0101001v2", {}) == (None, "hep-th/0101001")


def test_an_author_grid_gives_its_names_and_passes_over_mail_places_and_affiliations():
    lines = [(20.0, 60.0, "CiteSee: Augmenting Citations in Scientific Papers with"),
             (20.0, 80.0, "Persistent and Personalized Historical Context"),
             (11.0, 110.0, "Joseph Chee Chang"), (9.0, 122.0, "josephc@allenai.org"),
             (9.0, 134.0, "Allen Institute for AI"), (9.0, 146.0, "Seattle, WA, USA"),
             (11.0, 110.0, "Amy X. Zhang"), (9.0, 122.0, "axz@cs.uw.edu"),
             (9.0, 134.0, "University of Washington"),
             (11.0, 170.0, "Kyle Lo"), (11.0, 170.0, "Doug Downey"),
             (12.0, 220.0, "ABSTRACT"),
             (9.0, 240.0, "Jane Roe")]  # below the abstract heading: not an author
    title = "CiteSee: Augmenting Citations in Scientific Papers with Persistent and Personalized Historical Context"
    assert names_in_lines_under(lines, title) == ["Joseph Chee Chang", "Amy X. Zhang", "Kyle Lo", "Doug Downey"]


def test_running_prose_under_the_title_gives_no_names():
    lines = [(18.0, 60.0, "A Study of Things"),
             (10.0, 90.0, "In this paper we study many things that matter to a great many people in the world"),
             (10.0, 100.0, "Jane Roe")]
    assert names_in_lines_under(lines, "A Study of Things") == []
    assert names_in_lines_under(lines, "") == []


def test_affiliations_in_any_language_are_not_names():
    """Taking the page's lines where they give more authors (the ACM layout) first read affiliations as names on the
    shared papers: "Laboratoire de Physique Statistique", "Vrije Universiteit Amsterdam", "Electronic ISBN"."""
    lines = [(18.0, 60.0, "A Study of Things"),
             (10.0, 90.0, "Katharine M. Mullen"), (9.0, 100.0, "Vrije Universiteit Amsterdam"),
             (10.0, 110.0, "Ivo H. M. van Stokkum"), (9.0, 120.0, "Laboratoire de Physique Statistique"),
             (9.0, 130.0, "Département de Biochimie"), (9.0, 140.0, "Electronic ISBN"),
             (9.0, 150.0, "Vial Health Technology")]
    assert names_in_lines_under(lines, "A Study of Things") == ["Katharine M. Mullen", "Ivo H. M. van Stokkum"]
