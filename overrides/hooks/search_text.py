"""The search index as a reader would want to search it: words, not markup.

A MkDocs 1.x hook (``hooks:`` in mkdocs.yml; hooks run after the plugins, so the search
plugin has written ``search/search_index.json`` when :func:`on_post_build` reads it).
Formulas are indexed as their LaTeX source (``\\frac{M}{BW}``), which no one types into
a search box, and the notebooks' pages carry Jupyter's prompts ("In [ ]:") and the copy
button's "Copied!": all of it is dropped, and the pilcrow of heading links is dropped
from titles. The pages themselves are not touched.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

_FORMULA = re.compile(r"\\\((.*?)\\\)|\\\[(.*?)\\\]", re.S)
_PROMPT = re.compile(r"\b(?:In|Out)[\s\u00a0]*\[[\s\u00a0\d]*\]:[\s\u00a0]*")
_COPIED = re.compile(r"\bCopied!\s*")


def clean(text: str) -> str:
    """``text`` without formulas' LaTeX, notebook prompts, "Copied!" and pilcrows."""
    text = _FORMULA.sub(" ", text)
    text = _PROMPT.sub("", text)
    text = _COPIED.sub("", text)
    return re.sub(r"[ \t]{2,}", " ", text.replace("¶", "")).strip()


def on_post_build(config) -> None:
    index = Path(config["site_dir"]) / "search" / "search_index.json"
    if not index.is_file():
        return  # the search plugin is off: nothing to clean
    data = json.loads(index.read_text(encoding="utf-8"))
    for doc in data.get("docs", []):
        doc["title"] = clean(doc.get("title", ""))
        doc["text"] = clean(doc.get("text", ""))
    index.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
