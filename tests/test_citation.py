"""The citation (CITATION.cff and the landing page's BibTeX) and the site's build commit."""
from __future__ import annotations

import re

import yaml

from tests.hook_support import REPO

from lab_site.page_dates import built_from  # noqa: E402


def test_the_citation_file_and_the_landing_page_s_bibtex_agree():
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    assert {"cff-version", "message", "title", "authors", "date-released"} <= set(cff)
    assert cff["license"] == re.search(r'^license = "(.+)"', (REPO / "pyproject.toml").read_text(), re.M)[1]
    page = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    bibtex = re.search(r"```bibtex\n(.*?)```", page, re.S)[1]
    fields = dict(re.findall(r"^\s*(\w+)\s*=\s*\{+(.*?)\}+,?$", bibtex, re.M))
    assert fields["title"] == cff["title"]
    assert fields["author"] == cff["authors"][0]["name"]
    assert fields["year"] == str(cff["date-released"])[:4]
    assert "<!-- lab:generated built -->" in page


def test_the_site_names_the_commit_it_was_built_from(tmp_path):
    line = built_from(REPO)
    assert re.fullmatch(r"This site was built from commit `[0-9a-f]{7,}` of \d{4}-\d\d-\d\d"
                        r"(, with uncommitted changes to its pages or code)?\.", line), line
    assert built_from(tmp_path) == "This site was built from a copy of the book without its git history."
