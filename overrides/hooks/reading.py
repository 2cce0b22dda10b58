"""Reading time under each page's title, and the examples' sources as files of the site.

A MkDocs 1.x hook (``hooks:`` in mkdocs.yml).

* Under the first heading of every Markdown page: about how long its main line takes to
  read, and how many lines of code it shows. The main line is the prose a reader reads on
  the way through: the page's text less its code listings, tables, diagrams and formulas (a
  reader looks at those, at no fixed rate), less the evidence apparatus (a record's
  provenance line, caption, row groups and stale-code note, claim badges: looked up, not
  read), less what is folded (a closed ``details``: only its summary is on the main line)
  and less every tab of a tabbed block but the one shown first (one per GPU: a reader reads
  one). It is read at :data:`WORDS_PER_MINUTE`. Every listing's lines count as code, folded
  or not, but those of a tab not shown first.
  A page with "In depth" sections (below) shows two times: its main line (what is open) and
  its depth (the folded sections' prose, counted by the same rules).
* A code listing longer than :data:`FOLD_LINES` lines is folded (a ``details`` block whose
  summary names the file and its length), so the prose stays the page's main line.
* A section whose heading (h2 to h4) starts with "In depth: " is folded: a closed
  ``<details class="lab-depth">`` whose ``summary`` is the heading itself (element, id and
  permalink kept, so the table of contents and every link to it still work), holding
  everything up to the next heading of the same or a higher level at the page's top level
  (a deeper "In depth" section inside it folds inside it). ``javascripts/depth.js`` opens
  the sections that hold the target of a link.
* Every source file of the examples (``examples/**``, less Python's caches) is copied into
  the site under ``examples/``, and the prose links to its copy wherever it names one: a path
  (``<code>examples/…/x.py</code>``, a listing's title), a bare file name that is one file of
  the examples (``<code>ring_allreduce.py</code>``), and the modules of a command
  (``<code>python -m examples.capstone.decode</code>``, ``<code>python -m examples.lab run
  blas.levels</code>``: the link goes on the module's name inside the code, so the command
  copies as it reads). Listings (``pre``) are left as they are. A file name the pages mention
  is one a reader can open, offline, from the site itself.
"""
from __future__ import annotations

import functools
import html
import math
import os
import re
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab_site.provenance import STALE_TITLE  # noqa: E402  (the hooks' package; mkdocs loads hooks by path)

#: Silent reading of non-fiction by adults: 238 words a minute (Brysbaert, "How many words
#: do we read per minute? A review and meta-analysis of reading rate", Journal of Memory
#: and Language 109, 2019). Technical prose is read no faster, so the estimate is a floor.
WORDS_PER_MINUTE = 238
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
#: What a reader looks at rather than reads word by word: not counted as prose.
_NOT_PROSE = {"pre", "table", "svg", "script", "style", "math"}
_NOT_PROSE_CLASSES = {"arithmatex", "mermaid", "lab-plot", "lab-timeline", "lab-diagram",
                      # the evidence beside a figure: looked up when wanted, not read on the way
                      "lab-provenance", "lab-caption", "lab-claims", "lab-claim", "lab-claim-contradicted",
                      "lab-rows",  # a table of records' row groups, their summaries included
                      "lab-stale",  # a record's note that newer code has not measured it yet (below)
                      "lab-depth-note",  # a folded section's length, beside its heading
                      "tabbed-labels"}  # the tabs' names (one per GPU): controls, not prose
#: A record's stale-code note: a warning box the records hook writes above its table or plot.
#: It is the record's apparatus, like its provenance line; marked (for counting only) by its title.
_STALE_NOTE = re.compile(r'<div class="admonition warning">(\s*<p class="admonition-title">'
                         + re.escape(STALE_TITLE) + "</p>)")
#: Elements that never close (``<br>``): never on the counter's stack.
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
#: Listings longer than this are folded: a screen of code, about.
FOLD_LINES = 30
_LISTING = re.compile(r'<div class="language-[\w-]+ highlight">(?:<span class="filename">(.*?)</span>)?<pre>.*?</pre></div>',
                      re.S)
#: A heading of the page's content (h1 to h6), whole.
_HEADING = re.compile(r"<h([1-6])\b[^>]*>.*?</h\1>", re.S)
#: The words that make a heading an "In depth" one (its text less tags, at its start).
DEPTH_PREFIX = "In depth: "
#: The levels of heading an "In depth" section may have (h2: a section; h3, h4: a subsection).
_DEPTH_LEVELS = {2, 3, 4}
_FIRST_H1 = re.compile(r"(<h1\b[^>]*>.*?</h1>)", re.S)
#: A file name of an example: in running text, and as the title of a listing taken from it.
_EXAMPLE_CODE = re.compile(r"<code>(examples/[A-Za-z0-9_/]+\.[A-Za-z0-9]+)</code>")
_EXAMPLE_TITLE = re.compile(r'(<span class="filename">)(examples/[A-Za-z0-9_/]+\.[A-Za-z0-9]+)(</span>)')
#: Inline code in running text (a listing's ``pre`` is cut out first), with the link it sits in, if any.
_INLINE_CODE = re.compile(r"(<a\b[^>]*>\s*)?<code>([^<]*)</code>")
#: A bare file name: one word with an extension.
_BARE_NAME = re.compile(r"[A-Za-z0-9_.-]+\.[A-Za-z0-9]+")
#: A command that runs an example: the module, then (after the lab runner's ``run``) its topics.
_COMMAND = re.compile(r"\bpython -m (examples(?:\.\w+)+)((?: +[^ ]+)*)")
_TOPIC = re.compile(r"(?<![\w./-])([a-z][a-z0-9_]*\.[a-z_][a-z0-9_]*)(?![\w./-])")
_PRE = re.compile(r"<pre\b.*?</pre>", re.S)
#: What the copy of the examples leaves out: Python's caches.
_NOT_SHIPPED_DIRS = {"__pycache__"}
_NOT_SHIPPED_SUFFIXES = {".pyc", ".pyo"}
#: Folders of the repository that hold no source a page could name by its bare file name.
_NOT_SOURCE_DIRS = {"__pycache__", "node_modules", "site"}


def example_files(root: Path = EXAMPLES) -> list[Path]:
    """Every source file of the examples, as the site ships it: all but caches and dot-files."""
    return sorted(path for path in root.rglob("*")
                  if path.is_file() and path.suffix not in _NOT_SHIPPED_SUFFIXES
                  and not any(part in _NOT_SHIPPED_DIRS or part.startswith(".")
                              for part in path.relative_to(root).parts))


@functools.cache
def _by_name() -> dict[str, str]:
    """``{file name: examples/…/file name}`` for the names that are one file of the repository,
    and that file one of the examples': a bare ``ring_allreduce.py`` is that example, a bare
    ``records.py`` could be the runner's or the site's and is left unlinked. Walked once a build
    (:func:`on_pre_build` forgets it: ``mkdocs serve`` builds again after a file changes)."""
    count: dict[str, int] = {}
    for folder, subfolders, names in os.walk(REPO):
        subfolders[:] = [d for d in subfolders if not d.startswith(".") and d not in _NOT_SOURCE_DIRS]
        for name in names:
            count[name] = count.get(name, 0) + 1
    return {path.name: path.relative_to(REPO).as_posix() for path in example_files()
            if count.get(path.name) == 1}


def module_file(module: str) -> str | None:
    """``examples.a.b`` as the file ``python -m`` runs (``examples/a/b.py``, or a package's
    ``__main__.py``), relative to the repository; None when there is none."""
    base = REPO / Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__main__.py"):
        if candidate.is_file():
            return candidate.relative_to(REPO).as_posix()
    return None


class _Counter(HTMLParser):
    """Words of the main line's prose, of its folded "In depth" sections, and lines of code
    listings in a page's HTML.

    Each open element weighs on three counts: ``hidden`` (its words are not prose: a table, a
    formula, a provenance line, a closed ``details`` less its ``summary``), ``unseen``
    (nothing of it is shown until the reader asks: a tab other than the first) and ``depth``
    (a closed "In depth" section less its ``summary``, the heading: prose, but off the main
    line). Words count where ``hidden`` and ``unseen`` are 0: as :attr:`words` where ``depth``
    is 0 too, else as :attr:`depth_words`. A listing's lines count where ``unseen`` is 0.
    """

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.words = 0
        self.depth_words = 0
        self.code_lines = 0
        # [tag, hidden weight, unseen weight, tabs met (a tabbed-content's), folded, depth weight, a folded depth section]
        self._open: list[list] = []
        self._hidden = 0
        self._unseen = 0
        self._depth = 0
        self._code: list[str] | None = None  # the text of a code listing, while inside one
        self._code_depth = 0  # the stack's length at the listing's <pre>

    def handle_starttag(self, tag, attrs):
        if tag in _VOID:
            return
        attributes = dict(attrs)
        classes = set((attributes.get("class") or "").split())
        hidden = unseen = depth = 0
        folded = depth_section = False
        if tag in _NOT_PROSE or classes & _NOT_PROSE_CLASSES:
            hidden = 1
        elif tag == "details" and "open" not in attributes and "lab-depth" in classes:
            depth, depth_section = 1, True  # read, off the main line: all but its summary (the heading)
        elif tag == "details" and "open" not in attributes:
            hidden, folded = 1, True  # folded: only its summary is on the main line
        elif tag == "summary" and self._open and self._open[-1][4]:
            hidden = -1  # the summary of a folded block is read
        elif tag == "summary" and self._open and self._open[-1][6]:
            depth = -1  # the heading of a folded "In depth" section is where the main line passes it
        if "tabbed-block" in classes:
            tabs = next((entry for entry in reversed(self._open) if entry[3] is not None), None)
            if tabs is not None:
                tabs[3] += 1
                if tabs[3] > 1:
                    hidden = unseen = 1  # another GPU's tab: shown only when chosen
        self._open.append([tag, hidden, unseen, 0 if "tabbed-content" in classes else None, folded, depth,
                           depth_section])
        self._hidden += hidden
        self._unseen += unseen
        self._depth += depth
        if tag == "pre" and "mermaid" not in classes and self._code is None and not self._unseen:
            self._code, self._code_depth = [], len(self._open)  # a diagram is no code

    def handle_startendtag(self, tag, attrs):
        pass  # <br/>, <img/>: no text, nothing to close

    def handle_endtag(self, tag):
        if not any(entry[0] == tag for entry in self._open):
            return  # a stray end tag
        while self._open:
            entry = self._open.pop()
            self._hidden -= entry[1]
            self._unseen -= entry[2]
            self._depth -= entry[5]
            if self._code is not None and len(self._open) < self._code_depth:
                text = "".join(self._code).strip("\n")
                self.code_lines += len(text.splitlines()) if text else 0
                self._code = None
            if entry[0] == tag:
                break

    def handle_data(self, data):
        if self._code is not None:
            self._code.append(data)
        elif self._hidden <= 0 and not self._unseen:
            if self._depth > 0:
                self.depth_words += len(data.split())
            else:
                self.words += len(data.split())


#: A listing, its body apart; a table or drawing, its body apart (its closing tag found by name).
_PRE_BODY = re.compile(r"(<pre\b[^>]*>)(.*?)(</pre>)", re.S)
_INERT = re.compile(r"(<(table|svg)\b[^>]*>)(.*?)(</\2>)", re.S)
_TAG = re.compile(r"<[^>]*>")
#: Inside a table or drawing, what could matter to the counters: then its body is kept as it is.
_NOT_INERT = ("<table", "<svg", "<pre", "<script", "tabbed")


def _lighter(page_html: str, *, blank: bool = False) -> str:
    """``page_html`` less what the counters parse but never count, so that they parse a fifth
    as many tags (the pages' listings and tables are most of their markup): the tags inside each
    listing (its text is kept: its lines are counted) and the body of each table and drawing
    (no word in them is prose) that holds nothing of :data:`_NOT_INERT`. With ``blank``, the
    whole body of each is replaced by spaces, line breaks kept, so that offsets into the result
    are offsets into ``page_html`` (:class:`_Outline` looks only at tags outside all three)."""
    def blanked(text: str) -> str:
        return re.sub(r"[^\n]", " ", text)

    def listing(m: re.Match[str]) -> str:
        body = blanked(m.group(2)) if blank else _TAG.sub("", m.group(2))
        return m.group(1) + body + m.group(3)

    def inert(m: re.Match[str]) -> str:
        body = m.group(3)
        if any(marker in body for marker in _NOT_INERT):
            return m.group(0)
        return m.group(1) + (blanked(body) if blank else "") + m.group(4)

    return _INERT.sub(inert, _PRE_BODY.sub(listing, page_html))


def count(page_html: str) -> _Counter:
    """The counts of a page's (or a section's) HTML: its words, on the main line and in depth, and its code."""
    counter = _Counter()
    counter.feed(_lighter(_STALE_NOTE.sub(r'<div class="admonition warning lab-stale">\1', page_html)))
    counter.close()
    return counter


def minutes(words: int) -> int:
    """How long ``words`` of prose take to read, in whole minutes (at least 1)."""
    return max(1, math.ceil(words / WORDS_PER_MINUTE))


def reading_line(page_html: str) -> str:
    """The line shown under a page's title, e.g. "About 12 minutes of prose · 340 lines of code",
    or, on a page with folded "In depth" sections, "About 25 min main line · 20 min in depth · …"."""
    counter = count(page_html)
    main = minutes(counter.words)
    if counter.depth_words:
        text = f"About {main} min main line · {minutes(counter.depth_words)} min in depth"
    else:
        text = f"About {main} minute{'s' if main != 1 else ''} of prose"
    if counter.code_lines:
        text += f" · {counter.code_lines:,} lines of code"
    return text


def _example_href(path: str, page_url: str) -> str:
    """``examples/x/y.py`` as a link relative to the page at ``page_url`` ("stack/", "")."""
    return "../" * page_url.count("/") + path


def _link(path: str, shown: str, page_url: str) -> str:
    href = html.escape(_example_href(path, page_url))
    return f'<a class="lab-source" href="{href}" title="the whole file, as the book runs it">{shown}</a>'


def _command_links(code: str, page_url: str, where: str) -> str:
    """The text of an inline ``<code>`` with each module of an example command linked to its file."""

    def command(m: re.Match[str]) -> str:
        module, rest = m.group(1), m.group(2)
        path = module_file(module)
        if path is None:
            raise SystemExit(f"{where}: runs {module}, which is not a module of the repository")
        out = f"python -m {_link(path, module, page_url)}"
        if module == "examples.lab" and re.match(r" +run\b", rest):
            def topic(t: re.Match[str]) -> str:
                file = f"examples/{t.group(1).replace('.', '/')}.py"
                if not (REPO / file).is_file():
                    raise SystemExit(f"{where}: runs the topic {t.group(1)}, which is not a file of the examples")
                return _link(file, t.group(1), page_url)
            rest = _TOPIC.sub(topic, rest)
        return out + rest

    return _COMMAND.sub(command, code)


def link_sources(html_text: str, page_url: str, where: str) -> str:
    """Link every example file and example command the running text of a page names (see the module)."""
    by_name = _by_name()

    def inline(m: re.Match[str]) -> str:
        anchor, code = m.group(1), m.group(2)
        if anchor:
            return m.group(0)  # already a link
        if code.startswith("examples/") and _EXAMPLE_CODE.fullmatch(m.group(0)):
            if not (REPO / code).is_file():
                raise SystemExit(f"{where}: names {code}, which is not a file of the repository")
            return _link(code, m.group(0), page_url)
        if _BARE_NAME.fullmatch(code) and code in by_name:
            return _link(by_name[code], m.group(0), page_url)
        if "python -m examples." in code:
            return f"<code>{_command_links(code, page_url, where)}</code>"
        return m.group(0)

    def titled(m: re.Match[str]) -> str:
        if not (REPO / m.group(2)).is_file():
            raise SystemExit(f"{where}: names {m.group(2)}, which is not a file of the repository")
        return m.group(1) + _link(m.group(2), m.group(2), page_url) + m.group(3)

    out, last = [], 0
    for pre in _PRE.finditer(html_text):  # listings: only their titles are linked
        out.append(_INLINE_CODE.sub(inline, html_text[last:pre.start()]))
        out.append(pre.group(0))
        last = pre.end()
    out.append(_INLINE_CODE.sub(inline, html_text[last:]))
    return _EXAMPLE_TITLE.sub(titled, "".join(out))


def on_pre_build(config) -> None:
    _by_name.cache_clear()


def on_page_content(html_text: str, page, config, files) -> str:
    html_text = link_sources(html_text, page.url, page.file.src_uri)
    if not page.file.src_uri.endswith(".md"):
        return html_text  # a notebook carries its own layout: its links, no reading time
    # Counted on the page as it is shown: listings and depth sections folded (a folded block's
    # summary is read, its body is not).
    html_text = _LISTING.sub(_folded, fold_depth(html_text))
    line = f'<p class="lab-reading-time">{reading_line(html_text)}</p>'
    return _FIRST_H1.sub(lambda m: m.group(1) + line, html_text, count=1)


class _Outline(HTMLParser):
    """The headings at the top level of a page's content, as ``(offset, level)``, and where its
    footnotes start (``end``: no section runs into them)."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=False)
        self._starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self._open: list[str] = []
        self.headings: list[tuple[int, int]] = []
        self.end = len(text)
        self.feed(_lighter(text, blank=True))
        self.close()

    def _offset(self) -> int:
        line, column = self.getpos()
        return self._starts[line - 1] + column

    def handle_starttag(self, tag, attrs):
        if tag in _VOID:
            return
        if not self._open:
            if re.fullmatch(r"h[1-6]", tag):
                self.headings.append((self._offset(), int(tag[1])))
            elif tag == "div" and "footnote" in (dict(attrs).get("class") or "").split():
                self.end = min(self.end, self._offset())
        self._open.append(tag)

    def handle_endtag(self, tag):
        if tag in self._open:  # a stray end tag closes nothing
            while self._open.pop() != tag:
                pass


def _depth_note(section_html: str) -> str:
    words = count(section_html).words
    # Not searched: a reader searches the book's words, not its reading times.
    return (f'<span class="lab-depth-note" data-search-exclude>About {minutes(words)} min · '
            "folded: open to read</span>")


def fold_depth(html_text: str) -> str:
    """Every "In depth: ..." section of a page's content folded into a closed ``details.lab-depth``
    whose summary is its heading (see the module)."""
    outline = _Outline(html_text)
    out: list[str] = []
    sections: list[tuple[int, int]] = []  # the open depth sections: (level, index of their summary's note in out)
    position = 0

    def close_section() -> None:
        _, note = sections.pop()
        out[note] = _depth_note("".join(out[note + 1:]))
        out.append("</details>")

    for offset, level in outline.headings:
        if offset >= outline.end:
            break
        heading = _HEADING.match(html_text, offset)
        if heading is None:
            continue
        out.append(html_text[position:offset])
        while sections and sections[-1][0] >= level:
            close_section()
        text = html.unescape(_TAG.sub("", heading.group(0))).strip()
        if level in _DEPTH_LEVELS and text.startswith(DEPTH_PREFIX):
            # A teaser (the heading's data-teaser, from attr_list) says in the summary what the
            # fold holds and why a reader might open it.
            shown, teaser = _teaser(heading.group(0))
            teaser = f'<span class="lab-depth-teaser">{teaser}</span>' if teaser else ""
            out.append(f'<details class="lab-depth"><summary>{shown}{teaser}')
            sections.append((level, len(out)))
            out.extend(["", "</summary>"])
        else:
            out.append(heading.group(0))
        position = heading.end()
    out.append(html_text[position:outline.end])
    while sections:
        close_section()
    out.append(html_text[outline.end:])
    return "".join(out)


_TEASER = re.compile(r'\s+data-teaser="([^"]*)"')


def _teaser(heading_html: str) -> tuple[str, str]:
    """A heading less its ``data-teaser`` attribute, and that attribute's text ("" if none)."""
    found = _TEASER.search(heading_html)
    if found is None:
        return heading_html, ""
    return heading_html[:found.start()] + heading_html[found.end():], found.group(1)


def _folded(listing: re.Match[str]) -> str:
    """A listing of more than :data:`FOLD_LINES` lines inside a closed ``details``."""
    lines = listing.group(0).count('<span id="__span-')
    if lines <= FOLD_LINES:
        return listing.group(0)
    title = _TAG.sub("", listing.group(1) or "") or "the listing"
    return (f'<details class="lab-listing"><summary>{title}: {lines} lines (open to read)</summary>'
            f"{listing.group(0)}</details>")


def on_post_build(config) -> None:
    """Every source file of the examples into ``<site>/examples/``, as the pages' links expect."""
    target = Path(config["site_dir"]) / "examples"
    for source in example_files():
        destination = target / source.relative_to(EXAMPLES)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, destination)
