"""A claim's sentence and section, for Appendix A (overrides/hooks/lab_site/claim_context.py)."""
from __future__ import annotations

from tests.hook_support import REPO

from lab_site import claim_context, shortcodes  # noqa: E402

PAGE = """# Chapter

## Launches

Some set-up. Replayed from a graph, a kernel costs <!-- lab:value t.x m n=1.5 -->: the CPU is
out of the loop.
<!-- lab:claim t.x m < 2 n=1.5 -->
<!-- lab:claim t.x m > 0 n=1.5 -->

```py
# <!-- lab:claim t.x m < 9 --> in code is no claim
```

A table follows its sentence. Rows below:

<!-- lab:notes t.x -->
<!-- lab:claim t.y m >= 1 -->

## Next

!!! question "Claim: folklore"

    Contradicted. The measured cost is lower.
    <!-- lab:claim t.z m < 5 -->
"""


def test_each_claim_gets_the_last_sentence_before_it_and_its_section():
    found = claim_context.contexts(PAGE)
    assert [c.shortcode for c in found] == ["<!-- lab:claim t.x m < 2 n=1.5 -->", "<!-- lab:claim t.x m > 0 n=1.5 -->",
                                          "<!-- lab:claim t.y m >= 1 -->", "<!-- lab:claim t.z m < 5 -->"]
    assert found[0].sentence == ("Replayed from a graph, a kernel costs <!-- lab:value t.x m n=1.5 -->: the CPU is "
                                 "out of the loop.")
    assert found[1].sentence == found[0].sentence, "a run of claims shares its sentence"
    assert found[2].sentence == "Rows below:", "after a block, the paragraph before it"
    assert (found[0].section, found[3].section) == ("Launches", "Next")
    assert found[3].sentence == "The measured cost is lower."


def test_a_long_sentence_keeps_its_end():
    words = " ".join(f"w{i}" for i in range(100)) + " ends <!-- lab:value t.x m n=1.5 --> here."
    shown = claim_context.last_sentence(words)
    assert shown.startswith("… ") and shown.endswith("<!-- lab:value t.x m n=1.5 --> here.")
    assert len(shown.split()) <= claim_context.MAX_WORDS + 1


def test_every_claim_of_the_book_has_a_sentence():
    for page in sorted((REPO / "docs").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        found = claim_context.contexts(text)
        claims = [m for m in shortcodes.SHORTCODE.finditer(text) if m[1] == "claim"]
        assert len(found) == len(claims), page.name
        assert all(c.sentence and c.section for c in found), [c.shortcode for c in found if not c.sentence]


def test_appendix_a_shows_each_claim_s_sentence_before_its_check(built_site):
    import re

    from tests.test_cross_references import chapter_pages

    total = 0
    for chapter in chapter_pages():  # each chapter's claims on its page of the appendix
        page = (built_site / "appendix-records" / chapter.removesuffix(".md") / "index.html").read_text(encoding="utf-8")
        table = page[page.index("what the chapter says"):]
        table = table[:table.index("</table>")]
        rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]
        assert rows, chapter
        total += len(rows)
        for row in rows:
            cell = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)[1]
            sentence, _, check = cell.partition("<small>check:")
            assert check and re.sub(r"<[^>]+>", "", sentence).strip(), cell[:200]
            assert "lab:value" not in cell, "the sentence's numbers are rendered"
            # A link the sentence makes leads where it did on the chapter: out of the appendix's folder.
            for href in re.findall(r'<a href="([^"]+)"', sentence):
                assert href.startswith(("../../", "http")), (chapter, href)
    assert total > 200
