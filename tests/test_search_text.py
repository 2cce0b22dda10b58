"""The search index holds words, not markup (overrides/hooks/search_text.py)."""
from __future__ import annotations

import json
import re

from tests.hook_support import REPO  # noqa: F401 (puts overrides/hooks on the import path)

import search_text  # noqa: E402


def test_formulas_prompts_copy_buttons_and_pilcrows_are_dropped():
    text = "the cost \\(2\\frac{p-1}{p}\\) and \\[t = \\beta\\] In\u00a0[\u00a0]: Copied! <pre>x</pre> Out [3]: Title¶"
    assert search_text.clean(text) == "the cost and <pre>x</pre> Title"
    assert search_text.clean("In the ring, Out of order [1]") == "In the ring, Out of order [1]", "words stay"


def test_the_built_search_index_holds_no_latex_prompt_or_pilcrow(built_site):
    docs = json.loads((built_site / "search" / "search_index.json").read_text(encoding="utf-8"))["docs"]
    assert len(docs) > 100
    for doc in docs:
        for field in ("title", "text"):
            assert not re.search(r"\\\(|\\\[|\\frac|In\u00a0\[|Copied!|¶", doc[field]), (doc["location"], doc[field][:200])
