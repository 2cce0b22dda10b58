"""Reading time under each page's title, and the examples' sources as files of the site.

A MkDocs 1.x hook (``hooks:`` in mkdocs.yml).

* Under the first heading of every Markdown page: about how long its prose takes to read,
  and how many lines of code it shows. Prose is the page's text less its code listings,
  tables, diagrams and formulas (a reader looks at those, at no fixed rate), read at
  :data:`WORDS_PER_MINUTE`.
* A code listing longer than :data:`FOLD_LINES` lines is folded (a ``details`` block whose
  summary names the file and its length), so the prose stays the page's main line; and a
  section titled "In depth: ..." is marked as such, so it does not look like a core one.
* The first ⚠ of a page says in words what it marks (the others say it on hover and tap).
* Every example module (``examples/**/*.py``) is copied into the site under ``examples/``,
  and each ``<code>examples/…/x.py</code>`` on a page links to its copy, so a file name the
  pages mention is one a reader can open, offline, from the site itself.
"""
from __future__ import annotations

import html
import math
import re
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab_site.runs import NOISY  # noqa: E402  (the hooks' package; mkdocs loads hooks by path)

#: Silent reading of non-fiction by adults: 238 words a minute (Brysbaert, "How many words
#: do we read per minute? A review and meta-analysis of reading rate", Journal of Memory
#: and Language 109, 2019). Technical prose is read no faster, so the estimate is a floor.
WORDS_PER_MINUTE = 238
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
#: What a reader looks at rather than reads word by word: not counted as prose.
_NOT_PROSE = {"pre", "table", "svg", "script", "style", "math"}
_NOT_PROSE_CLASSES = ("arithmatex", "mermaid", "lab-plot", "lab-timeline", "lab-diagram")
#: Listings longer than this are folded: a screen of code, about.
FOLD_LINES = 30
_LISTING = re.compile(r'<div class="language-[\w-]+ highlight">(?:<span class="filename">(.*?)</span>)?<pre>.*?</pre></div>',
                      re.S)
_FIRST_NOISY = re.compile(r'(<span class="lab-noisy"[^>]*>⚠</span>)')
#: What a ⚠ means, in words, beside the first one on a page.
NOISY_WORDS = (f"(⚠: this figure's independent runs differ by more than {NOISY * 100:g} % of their "
               f"median; the range shown is theirs)")
_DEPTH_HEADING = re.compile(r'<(h[23]) id="([^"]*)">In depth: ')
_FIRST_H1 = re.compile(r"(<h1\b[^>]*>.*?</h1>)", re.S)
#: A file name of an example: in running text, and as the title of a listing taken from it.
_EXAMPLE_CODE = re.compile(r"<code>(examples/[A-Za-z0-9_/]+\.py)</code>")
_EXAMPLE_TITLE = re.compile(r'(<span class="filename">)(examples/[A-Za-z0-9_/]+\.py)(</span>)')


class _Counter(HTMLParser):
    """Words of prose and lines of code listings in a page's HTML."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.words = 0
        self.code_lines = 0
        self._skipping: str | None = None  # the tag of the element that is not prose, while inside it
        self._depth = 0  # how many of that tag are open (they may nest)
        self._code: list[str] | None = None  # the text of a code listing, while inside one

    def handle_starttag(self, tag, attrs):
        if self._skipping is None:
            classes = (dict(attrs).get("class") or "").split()
            if tag in _NOT_PROSE or any(c in _NOT_PROSE_CLASSES for c in classes):
                self._skipping, self._depth = tag, 1
                self._code = [] if tag == "pre" and "mermaid" not in classes else None  # a diagram is no code
        elif tag == self._skipping:
            self._depth += 1

    def handle_endtag(self, tag):
        if tag == self._skipping:
            self._depth -= 1
            if self._depth == 0:
                if self._code is not None:
                    text = "".join(self._code).strip("\n")
                    self.code_lines += len(text.splitlines()) if text else 0
                self._skipping, self._code = None, None

    def handle_data(self, data):
        if self._skipping is None:
            self.words += len(data.split())
        elif self._code is not None:
            self._code.append(data)


def reading_line(page_html: str) -> str:
    """The line shown under a page's title, e.g. "About 12 minutes of prose · 340 lines of code"."""
    counter = _Counter()
    counter.feed(page_html)
    counter.close()
    minutes = max(1, math.ceil(counter.words / WORDS_PER_MINUTE))
    text = f"About {minutes} minute{'s' if minutes != 1 else ''} of prose"
    if counter.code_lines:
        text += f" · {counter.code_lines:,} lines of code"
    return text


def _example_href(path: str, page_url: str) -> str:
    """``examples/x/y.py`` as a link relative to the page at ``page_url`` ("stack/", "")."""
    return "../" * page_url.count("/") + path


def on_page_content(html_text: str, page, config, files) -> str:
    if not page.file.src_uri.endswith(".md"):
        return html_text  # notebooks carry their own layout
    named = set(_EXAMPLE_CODE.findall(html_text)) | {m[1] for m in _EXAMPLE_TITLE.findall(html_text)}
    missing = sorted(n for n in named if not (REPO / n).is_file())
    if missing:
        raise SystemExit(f"{page.file.src_uri}: names {missing[0]}, which is not a file of the repository")

    def link(path: str, shown: str) -> str:
        href = html.escape(_example_href(path, page.url))
        return f'<a class="lab-source" href="{href}" title="the whole file, as the book runs it">{shown}</a>'

    html_text = _EXAMPLE_CODE.sub(lambda m: link(m.group(1), m.group(0)), html_text)
    html_text = _EXAMPLE_TITLE.sub(lambda m: m.group(1) + link(m.group(2), m.group(2)) + m.group(3), html_text)
    line = f'<p class="lab-reading-time">{reading_line(html_text)}</p>'
    html_text = _LISTING.sub(_folded, html_text)
    html_text = _FIRST_NOISY.sub(lambda m: f'{m.group(1)}<span class="lab-noisy-words">{html.escape(NOISY_WORDS)}</span>',
                                 html_text, count=1)
    html_text = _DEPTH_HEADING.sub(r'<\1 id="\2" class="lab-depth">In depth: ', html_text)
    return _FIRST_H1.sub(lambda m: m.group(1) + line, html_text, count=1)


def _folded(listing: re.Match[str]) -> str:
    """A listing of more than :data:`FOLD_LINES` lines inside a closed ``details``."""
    lines = listing.group(0).count('<span id="__span-')
    if lines <= FOLD_LINES:
        return listing.group(0)
    title = re.sub(r"<[^>]+>", "", listing.group(1) or "") or "the listing"
    return (f'<details class="lab-listing"><summary>{title}: {lines} lines (open to read)</summary>'
            f"{listing.group(0)}</details>")


def on_post_build(config) -> None:
    """Every example module into ``<site>/examples/``, as the pages' links expect."""
    target = Path(config["site_dir"]) / "examples"
    for source in EXAMPLES.rglob("*.py"):
        if "__pycache__" in source.parts:
            continue
        destination = target / source.relative_to(EXAMPLES)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, destination)
