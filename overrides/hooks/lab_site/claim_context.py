"""Where a claim stands in its chapter: the sentence it checks and the section it is in.

Appendix A lists every ``lab:claim`` of the book; a reader needs the words the claim
checks, not its query. A claim's shortcode follows the paragraph that states it (one
paragraph may carry several claims): the claim's *sentence* is the last sentence of the
text before its run of claim shortcodes, and its *section* the nearest heading above.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from lab_site import shortcodes

#: At most this many words of a sentence are shown; a longer one keeps its end, where the
#: statement a claim checks usually closes.
MAX_WORDS = 60
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*(?:\{[^}]*\})?\s*$")
_SENTENCE_END = re.compile(r"(?<=[.!?:;])\s+(?=[A-Z(<`*\"“])")
_TAB_OR_ADMONITION = re.compile(r"^\s*(?:===|!!!|\?\?\?\+?)\s")


@dataclass(frozen=True)
class ClaimContext:
    shortcode: str  # the claim's shortcode, as written
    sentence: str  # Markdown, its lab:value shortcodes left in
    section: str  # the heading's text ("" before any heading)


def contexts(markdown: str) -> list[ClaimContext]:
    """Every claim of a page, in order, with its sentence and section."""
    out: list[ClaimContext] = []
    section = ""
    text: list[str] = []  # the paragraph being read
    previous: list[str] = []  # the last paragraph read in this section (a claim may follow a table after it)
    fence: str | None = None

    def close():
        nonlocal text, previous
        if text:
            previous, text = text, []

    for line in markdown.splitlines():
        stripped = line.strip()
        opened = shortcodes._FENCE.match(line)
        if fence is not None:
            if opened and opened["fence"].startswith(fence):
                fence = None
            continue
        if opened:
            close()
            fence = opened["fence"][:3]
            continue
        heading = _HEADING.match(line)
        if heading and not line.startswith(" "):
            section, text, previous = heading[2], [], []
            continue
        claims_here = [m for m in shortcodes.SHORTCODE.finditer(stripped) if m[1] == "claim"]
        if claims_here and not shortcodes.SHORTCODE.sub("", stripped).strip():
            sentence = last_sentence(" ".join(text or previous))
            out += [ClaimContext(m[0], sentence, section) for m in claims_here]
            continue  # a run of claim lines shares the text before it
        if (not stripped or _TAB_OR_ADMONITION.match(line)
                or stripped.startswith(("|", "<!-- lab:table", "<!-- lab:plot", "<!-- lab:notes",
                                        "<!-- lab:calculator", "<!-- lab:timeline", "<!-- lab:generated"))):
            close()
            continue
        text.append(stripped)
    return out


def last_sentence(paragraph: str) -> str:
    """The paragraph's last sentence (a colon ends one too), at most :data:`MAX_WORDS` words."""
    paragraph = re.sub(r"\s+", " ", paragraph).strip()
    if not paragraph:
        return ""
    # Split outside shortcodes: a shortcode's options hold dots ("n=8192 precision=bf16").
    masked = shortcodes.SHORTCODE.sub(lambda m: "\0" * len(m[0]), paragraph)
    starts = [0] + [m.end() for m in _SENTENCE_END.finditer(masked.rstrip(" :;"))]
    sentence = paragraph[starts[-1]:].strip()
    words = sentence.split(" ")
    if len(words) > MAX_WORDS:
        kept = " ".join(words[-MAX_WORDS:])
        # Never begin inside a shortcode: drop a partial one.
        cut = kept.find("-->") if "<!--" not in kept.split("-->")[0] else -1
        sentence = "… " + (kept[cut + 3:].lstrip() if cut >= 0 else kept)
    return sentence
