"""The built site in a real browser: every page, as a reader's Chromium shows it.

Builds the site (``mkdocs build --strict``), serves it from 127.0.0.1 and opens
every page (but the print edition, which tests/test_print_edition.py opens) in Debian's
Chromium (``/usr/bin/chromium``, driven by Playwright), in each palette the site offers.
A page fails on any console error, uncaught page error, failed request, HTTP status >= 400,
or request to any host but the local server (those are aborted: the book must read
offline). Every Mermaid diagram must have rendered (Material swaps ``pre.mermaid`` for a ``div.mermaid`` host whose
closed shadow root holds the SVG, so the host is what can be tested) and every
formula (``.arithmatex``) must hold KaTeX output. In either palette every page of the book must
show its reading time, and a plot's text in the page's colour must contrast with the page (4.5:1).

Within the same visit, at a 1400 px window, every table (those of every tab and every
fold too: they are shown for the check) must keep its numbers inside the text column,
so no reader scrolls sideways for a figure, and no header may hold a metric identifier
(a word with an underscore outside code, or an identifier of ``examples/lab/metrics.py``
that is not a word); every plot must carry hover values, in words (no topic's identifier), and no
axis, tick or legend text in e-notation or naming an identifier; every diagram (Mermaid's, in its
closed shadow root, and the HTML ones) must draw its text at 11 px or more; then
at 390 px (a phone) the page itself must not scroll sideways. The landing page's four boxes (who the
book is for, what to know first, where to start, when it was measured) must have their titles on
the first screen at 1400 px. Chapter 6, opened at a link to a heading inside a folded "In depth" section, opens it.
These width, word and size checks run in the light pass only: a palette changes colours, not
widths. The dark pass opens every page with something a palette can change (a plot, a diagram, a
formula), but does not wait for the network to be idle before it moves on (a request cut off so is
not reported: the light pass has checked the same requests): every page so costs it less than half
of them did with the waits.
A page made to fail shows that the drawing checks (diagram text, hover words, plot contrast) fail.

Each pass opens its pages one after the other in one tab (a page is a new document
either way; the tab keeps one renderer process, and V8 its compiled Mermaid and KaTeX).
Every page's search worker asks for the site's search index; the first page of a pass
gets it, and builds the reader's index from it, and on the other pages the request is
still made and served, and its status checked, but the worker is handed the index less
its documents: building the same 1.5 MB index again on each page was a third of the
browser's CPU on a 2-core CI, and checked nothing the first page had not.

``make test`` installs Chromium; without it this test fails, it does not skip.
"""
from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from examples.lab import metrics
from examples.lab.registry import example_files, topic_name
from tests.hook_support import served
from site_server import CHROMIUM, CHROMIUM_ARGS  # noqa: I001 - overrides/, on the path hook_support puts it

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
RENDER_TIMEOUT_MS = 20_000
#: The print edition: every chapter again, on one page (about 10 MB of HTML, 22 to 27 s to load
#: on a 2-core machine, a fifth of this test). Neither pass opens it: tests/test_print_edition.py
#: opens it in the same Chromium to print it, and fails on the same console errors, page errors,
#: failed or foreign requests and unrendered diagrams and formulas (overrides/print_pdf.py);
#: its tables, plots and diagrams are the chapters' own, checked on their pages here.
PRINT_PAGE = "/print_page/"
#: The window a desktop reader has (the text column is then about 720 px) and a phone's.
DESKTOP = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}
#: The smallest text a diagram may draw at 1400 px: about a plot's tick labels (docs/stylesheets/figures.css).
LEAST_DIAGRAM_PX = 11
#: WCAG's least contrast for text: what a plot's text needs against the page, in either palette.
LEAST_CONTRAST = 4.5


# -- the site and its server ------------------------------------------------------
@pytest.fixture(scope="module")
def site(built_site) -> Path:
    return built_site


@pytest.fixture(scope="module")
def server(site):
    with served(site) as origin:
        yield origin


class _Census(HTMLParser):
    """Counts the elements the browser must render (Mermaid sources and formulas), and the plots."""

    def __init__(self):
        super().__init__()
        self.mermaid = 0
        self.math = 0
        self.plots = 0

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        self.mermaid += "mermaid" in classes
        self.math += "arithmatex" in classes
        self.plots += tag == "figure" and "lab-plot" in classes


def site_pages(site: Path) -> list[tuple[str, int, int, int]]:
    """``(url path, Mermaid diagrams, formulas, plots)`` of every page of the built site."""
    found = []
    for html in sorted(site.rglob("*.html")):
        relative = html.relative_to(site).as_posix()
        if html.name == "index.html":
            path = "/" + relative.removesuffix("index.html")
        elif relative == "404.html":
            path = "/404.html"
        else:
            continue
        census = _Census()
        census.feed(html.read_text(encoding="utf-8"))
        found.append((path, census.mermaid, census.math, census.plots))
    return found


# -- the browser ------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: 'make test' installs Debian's chromium "
                    "(or run: apt-get update && apt-get install -y chromium)", pytrace=False)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the playwright package is missing: pip install -e '.[test]'", pytrace=False)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


# Ready when every Mermaid source became a host and every formula holds KaTeX.
READY_JS = """([diagrams, formulas]) => {
  const hosts = document.querySelectorAll("div.mermaid").length;
  const math = [...document.querySelectorAll(".arithmatex")];
  return hosts >= diagrams && math.length >= formulas && math.every(el => el.querySelector(".katex"));
}"""

# What the page shows once ready (or once the wait gave up).
INSPECT_JS = """() => {
  const visible = el => !el.parentElement || el.parentElement.checkVisibility();
  const hosts = [...document.querySelectorAll("div.mermaid")];
  const math = [...document.querySelectorAll(".arithmatex")];
  return {
    scheme: document.body.getAttribute("data-md-color-scheme"),
    hosts: hosts.length,
    unrendered_sources: document.querySelectorAll("pre.mermaid, pre > code.language-mermaid").length,
    empty_hosts: hosts.filter(el => {
      const box = el.getBoundingClientRect();
      return visible(el) && (box.width === 0 || box.height === 0 || el.childElementCount > 0);
    }).length,
    formulas: math.length,
    formulas_without_katex: math.filter(el => !el.querySelector(".katex")).length,
    katex_errors: document.querySelectorAll(".katex-error").length,
  };
}"""


# The rule for text a reader sees outside code (the Python twin: tests/hook_support.is_identifier):
# a word with an underscore, or, less its unit in brackets, an identifier of metrics.py that is not a word.
IS_IDENTIFIER_JS = """(words, text) => /[A-Za-z0-9]_[A-Za-z0-9]/.test(text) ||
  words.has(text.replace(/\\s*\\([^()]*\\)$/, ""))"""

# Every tab shown and every fold opened, for a measure of what they hold; returns what puts them back.
UNFOLD_JS = """() => {
  const style = document.createElement("style");
  style.textContent = ".md-typeset .tabbed-block { display: block !important; }";
  document.head.append(style);
  const closed = [...document.querySelectorAll("article details:not([open])")];
  closed.forEach(d => { d.open = true; });
  return () => { closed.forEach(d => { d.open = false; }); style.remove(); };
}"""

# Every table, with every tab shown and every fold open for the measure (restored after): numeric
# cells past their scroll box's right edge, and headers holding an identifier instead of words.
TABLES_JS = """(notWords) => {
  const isIdentifier = IS_IDENTIFIER;
  const refold = (UNFOLD)();
  const words = new Set(notWords);
  const found = {tables: 0, numeric: 0, overflowing: [], identifiers: []};
  for (const table of document.querySelectorAll("article table")) {
    if (!table.checkVisibility()) continue;
    found.tables++;
    const heads = [...table.querySelectorAll("th")].map(th => {
      const copy = th.cloneNode(true);
      copy.querySelectorAll("code").forEach(c => c.remove());  // a code name shown as code is meant
      return copy.textContent.replace(/\\s+/g, " ").trim();
    });
    const name = heads.slice(0, 4).join(" | ");
    const box = (table.closest(".md-typeset__scrollwrap") || table.parentElement).getBoundingClientRect();
    const cells = [...table.querySelectorAll("td")].filter(td => /\\d/.test(td.textContent));
    found.numeric += cells.length;
    const past = cells.filter(td => td.getBoundingClientRect().right > box.right + 1);
    if (past.length) {
      const widest = Math.max(...past.map(td => td.getBoundingClientRect().right));
      found.overflowing.push(`table [${name}]: ${past.length} of ${cells.length} numeric cells run up to ` +
                             `${Math.round(widest - box.right)} px past the text column`);
    }
    for (const head of heads) {
      if (isIdentifier(words, head)) {
        found.identifiers.push(`table [${name}]: header ${JSON.stringify(head)} is an identifier, not words`);
      }
    }
  }
  refold();
  return found;
}""".replace("IS_IDENTIFIER", IS_IDENTIFIER_JS).replace("UNFOLD", UNFOLD_JS)

# Every plot as the reader's browser draws it: a hover value (an SVG <title>) on its points, in words
# (no topic's identifier: "capstone.decode" is the code's name, not the page's), no axis, tick or
# legend text in e-notation or naming an identifier.
FIGURES_JS = """([notWords, topics]) => {
  const isIdentifier = IS_IDENTIFIER;
  const words = new Set(notWords), topicNames = new Set(topics);
  const found = {plots: 0, problems: []};
  for (const svg of document.querySelectorAll("article figure.lab-plot svg")) {
    found.plots++;
    const name = (svg.getAttribute("aria-label") || "a plot").split(":")[0];
    const titles = [...svg.querySelectorAll("title")].map(t => t.textContent);
    if (!titles.length) found.problems.push(`plot "${name}": no hover value on any point`);
    const named = new Set(titles.flatMap(t => t.match(/[a-z][a-z0-9_]*\\.[a-z][a-z0-9_]*/g) || [])
                                .filter(w => topicNames.has(w)));
    for (const topic of named) found.problems.push(`plot "${name}": hover text names the topic ${topic}`);
    for (const text of svg.querySelectorAll("text")) {
      const t = text.textContent.replace(/\\s+/g, " ").trim();
      if (/\\d(\\.\\d+)?e[+-]?\\d/i.test(t)) found.problems.push(`plot "${name}": e-notation ${JSON.stringify(t)}`);
      if (isIdentifier(words, t)) {
        found.problems.push(`plot "${name}": ${JSON.stringify(t)} is an identifier, not words`);
      }
    }
  }
  return found;
}""".replace("IS_IDENTIFIER", IS_IDENTIFIER_JS)

# The reading time under a page's title (lab_site's reading hook).
READING_TIME_JS = """() => !!document.querySelector("article .lab-reading-time")"""

# A plot's text in the page's colour (its ticks, axes, legend: drawn in currentColor, so a palette is
# what could break them) against the page's background, its alpha blended in: under `least`
# (WCAG's contrast ratio) is a problem. Text in a colour of the plot's own (a series' label, a white
# label on a timeline's bar) is the same in either palette, and the plot's tests choose it.
PLOT_CONTRAST_JS = """(least) => {
  const rgba = c => {
    const v = (c.match(/[\\d.]+/g) || []).map(Number);
    return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1];
  };
  const backdrop = el => {
    for (; el; el = el.parentElement) { const c = rgba(getComputedStyle(el).backgroundColor); if (c[3] > 0) return c; }
    return [255, 255, 255, 1];
  };
  const luminance = c => c.slice(0, 3).map(v => v / 255)
    .map(v => v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4)
    .reduce((sum, v, i) => sum + v * [0.2126, 0.7152, 0.0722][i], 0);
  const problems = [];
  for (const svg of document.querySelectorAll("article figure.lab-plot svg")) {
    const name = (svg.getAttribute("aria-label") || "a plot").split(":")[0];
    const page = getComputedStyle(svg).color, back = backdrop(svg);
    const text = [...svg.querySelectorAll("text")].find(t => getComputedStyle(t).fill === page);
    if (!text) continue;
    const fg = rgba(page), alpha = fg[3] * Number(getComputedStyle(text).fillOpacity);
    const drawn = [0, 1, 2].map(i => fg[i] * alpha + back[i] * (1 - alpha));
    const [hi, lo] = [luminance(drawn), luminance(back)].sort((a, b) => b - a);
    const ratio = (hi + 0.05) / (lo + 0.05);
    if (ratio < least) {
      problems.push(`plot "${name}": its text (${JSON.stringify(text.textContent.trim())}) in ${page} on ` +
                    `rgb(${back.slice(0, 3).join(", ")}): contrast ${ratio.toFixed(1)}:1, under ${least}:1`);
    }
  }
  return problems;
}"""

# Mermaid draws a diagram inside a closed shadow root, which no script of the page can reach: this
# script, run before the page's own, keeps each root it makes where the diagram check finds it.
SHADOW_ROOTS_JS = """(() => {
  const attach = Element.prototype.attachShadow, roots = new WeakMap();
  Element.prototype.attachShadow = function (init) {
    const root = attach.call(this, init);
    roots.set(this, root);
    return root;
  };
  window.__labShadowRoot = host => host.shadowRoot || roots.get(host) || null;
})();"""

# Every diagram's text (Mermaid's SVG, inside its host's shadow root, and the HTML diagrams,
# .lab-diagram), with every tab and fold shown: a text drawn smaller than `least` px is a problem.
# The size drawn is the font's size times the scale its SVG is shown at (an SVG wider than the
# column is shrunk to fit it, its text with it); a diagram with no text drawn is one too.
DIAGRAM_TEXT_JS = """(least) => {
  const refold = (UNFOLD)();
  const scale = el => {
    const svgPart = el instanceof SVGGraphicsElement ? el : el.closest("foreignObject") || el.ownerSVGElement;
    const m = svgPart && svgPart.getScreenCTM();
    return m ? Math.hypot(m.a, m.b) : 1;
  };
  const smallest = root => {  // [size drawn, its text], or null where no text is drawn
    let found = null;
    const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walk.nextNode(); node; node = walk.nextNode()) {
      const el = node.parentElement, text = node.textContent.trim();
      if (!text || !el || el.closest("style, title, desc") || !el.getClientRects().length) continue;
      const px = parseFloat(getComputedStyle(el).fontSize) * scale(el);
      if (!found || px < found[0]) found = [px, text];
    }
    return found;
  };
  const kinds = [
    ["Mermaid diagram", [...document.querySelectorAll("article div.mermaid")].map(window.__labShadowRoot)],
    ["diagram", [...document.querySelectorAll("article .lab-diagram")]],
  ];
  const found = {diagrams: 0, problems: []};
  for (const [kind, roots] of kinds) {
    roots.forEach((root, i) => {
      found.diagrams++;
      const small = root && smallest(root);
      if (!small) found.problems.push(`${kind} ${i + 1}: no text drawn`);
      else if (small[0] < least) {
        found.problems.push(`${kind} ${i + 1}: text ${JSON.stringify(small[1].slice(0, 40))} drawn at ` +
                            `${small[0].toFixed(1)} px, under ${least} px at this width`);
      }
    });
  }
  refold();
  return found;
}""".replace("UNFOLD", UNFOLD_JS)

# The page scrolls sideways: how far, and the widest elements that stick out (none scrolls them).
PAGE_OVERFLOW_JS = """() => {
  const root = document.documentElement;
  const over = root.scrollWidth - root.clientWidth;
  if (over <= 1) return null;
  const clipped = el => { for (let p = el.parentElement; p; p = p.parentElement) {
    if (getComputedStyle(p).overflowX !== "visible") return p !== document.body && p !== root; } return false; };
  const wide = [...document.body.querySelectorAll("*")]
    .filter(el => el.getBoundingClientRect().right > root.clientWidth + 1 && el.checkVisibility() && !clipped(el))
    .slice(0, 3).map(el => el.tagName.toLowerCase() + (el.className && typeof el.className === "string" ?
      "." + el.className.trim().split(/\\s+/).join(".") : ""));
  return `${over} px wider than the window (${wide.join(", ") || "no single element"})`;
}"""


# A heading inside a folded "In depth" section (Chapter 6's "Beyond one node"): a page opened at
# a link to it must open the section (docs/javascripts/depth.js) and show the heading.
DEPTH_LINK = ("/collectives/", "the-two-level-all-reduce")
DEPTH_LINK_JS = """async (id) => {
  const target = document.getElementById(id);
  const fold = target && target.closest("details.lab-depth");
  if (!fold) return "no such heading inside a details.lab-depth";
  for (let i = 0; i < 100 && !fold.open; i++) await new Promise(r => setTimeout(r, 20));
  return (fold.open && target.checkVisibility()) || "still folded after the page loaded";
}"""


# The landing page, as a newcomer first sees it at 1400 px: who the book is for, what to know first,
# where to start and when it was measured, each box's title inside the first screen, not below it.
LANDING_BOXES = ("Who it is for", "What to know first", "Where to start", "When it was measured")
LANDING_JS = """([titles, height]) => {
  window.scrollTo(0, 0);
  const found = new Map([...document.querySelectorAll("article .admonition-title")]
    .map(el => [el.textContent.trim(), el.getBoundingClientRect().bottom]));
  return titles.filter(t => !found.has(t) || found.get(t) > height)
    .map(t => found.has(t) ? `"${t}" ends ${Math.round(found.get(t))} px down, below the first screen`
                           : `no box titled "${t}"`);
}"""


SEARCH_INDEX = "/search/search_index.json"


class _Visit:
    """Listens to one browser context and keeps every problem it sees, by page (``watch``)."""

    def __init__(self, context, origin: str, site: Path):
        self.origin = urlsplit(origin)
        self.problems: list[str] = []
        self.foreign: list[str] = []
        self.page_path = ""  # the page now open, that a problem is reported under
        # The search index less its documents: what the search worker gets after the first page.
        index = json.loads((site / SEARCH_INDEX.lstrip("/")).read_text(encoding="utf-8"))
        self.bare_index = json.dumps({**index, "docs": []})
        self.index_served = False
        context.route("**/*", self._route)

    def _route(self, route):
        url = urlsplit(route.request.url)
        if url.scheme in ("http", "https", "ws", "wss") and url.netloc != self.origin.netloc:
            self.foreign.append(route.request.url)
            route.abort("blockedbyclient")
        elif url.path == SEARCH_INDEX and self.index_served:
            response = route.fetch()  # the page's request, to the server, as ever: its status is the page's
            if response.ok:
                headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
                route.fulfill(status=response.status, headers=headers, body=self.bare_index)
            else:
                route.fulfill(response=response)
        else:
            self.index_served = self.index_served or url.path == SEARCH_INDEX
            route.continue_()

    def watch(self, page) -> None:
        def add(text: str) -> None:
            self.problems.append(f"{self.page_path}: {text}")

        page.on("console", lambda m: m.type == "error" and add(f"console error: {m.text} [{m.location.get('url', '')}]"))
        page.on("pageerror", lambda e: add(f"page error: {e}"))
        # A request the browser itself cancelled (net::ERR_ABORTED: a font still loading as the
        # walk moves to the next page) says nothing of the site; a missing file is an HTTP
        # status, checked below, and any other failure is a problem.
        page.on("requestfailed", lambda r: urlsplit(r.url).netloc == self.origin.netloc
                and "ERR_ABORTED" not in (r.failure or "")
                and add(f"request failed: {r.url} ({r.failure})"))
        page.on("response", lambda r: r.status >= 400 and add(f"HTTP {r.status}: {r.url}"))


def _choose_palette(page, scheme: str) -> str | None:
    """Switch the page to Material's palette ``scheme``; ``None`` when the site does not offer it.

    The toggle stores the choice in the context's local storage, so every page
    opened after it shows the same palette.
    """
    current = lambda: page.evaluate("document.body.getAttribute('data-md-color-scheme')")  # noqa: E731
    offered = page.eval_on_selector_all("input.md-option[data-md-color-scheme]",
                                        "els => els.map(el => el.dataset.mdColorScheme)")
    if scheme not in (offered or [current()]):
        return None
    for _ in range(len(offered)):
        if current() == scheme:
            break
        page.locator("form[data-md-component=palette] label:not([hidden])").first.click()
    return current()


def _new_context(browser, scheme: str):
    """A context of one palette at the desktop width, where a page's Mermaid shadow roots can be read."""
    context = browser.new_context(color_scheme="dark" if scheme == "slate" else "light", service_workers="block",
                                  viewport=DESKTOP)
    context.set_default_timeout(RENDER_TIMEOUT_MS)
    context.add_init_script(SHADOW_ROOTS_JS)
    return context


def _render_problems(page, diagrams: int, formulas: int, scheme: str,
                     timeout_ms: int = RENDER_TIMEOUT_MS) -> tuple[dict, list[str]]:
    """Wait until the page's Mermaid and KaTeX are drawn; what it shows, and what is wrong with it."""
    problems = []
    try:
        page.wait_for_function(READY_JS, arg=[diagrams, formulas], timeout=timeout_ms)
    except Exception:  # noqa: BLE001 - the inspection below says what is missing
        problems.append(f"Mermaid or KaTeX did not finish within {timeout_ms} ms")
    seen = page.evaluate(INSPECT_JS)
    if seen["hosts"] < diagrams or seen["unrendered_sources"] or seen["empty_hosts"]:
        problems.append(f"{diagrams} Mermaid diagrams in the HTML, {seen['hosts']} rendered hosts, "
                        f"{seen['empty_hosts']} of them empty, {seen['unrendered_sources']} sources left unrendered")
    if seen["formulas"] < formulas or seen["formulas_without_katex"] or seen["katex_errors"]:
        problems.append(f"{formulas} formulas in the HTML, {seen['formulas']} on the page, "
                        f"{seen['formulas_without_katex']} without KaTeX output, {seen['katex_errors']} KaTeX errors")
    if seen["scheme"] != scheme:
        problems.append(f"shown in palette {seen['scheme']!r}, not {scheme!r}")
    return seen, problems


def _palette_problems(page, path: str) -> list[str]:
    """What either palette must show: the reading time (a page of the book has one) and plot text that reads."""
    problems = list(page.evaluate(PLOT_CONTRAST_JS, LEAST_CONTRAST))
    if not page.evaluate(READING_TIME_JS) and not path.startswith("/notebooks/") and path != "/404.html":
        problems.append("no reading time under the title")
    return problems


def _layout_problems(page, path: str, not_words: list[str], topics: list[str]) -> tuple[dict, list[str]]:
    """The light pass's checks of what a palette does not change, at 1400 px then on a phone: plots' words,
    diagrams' text size, the landing page's first screen, tables' widths and headers, sideways scrolling.
    Returns what was checked (counts) and the problems."""
    drawn = page.evaluate(FIGURES_JS, [not_words, topics])
    sketched = page.evaluate(DIAGRAM_TEXT_JS, LEAST_DIAGRAM_PX)
    laid = page.evaluate(TABLES_JS, not_words)
    problems = drawn["problems"] + sketched["problems"] + laid["overflowing"] + laid["identifiers"]
    if path == "/":
        problems += page.evaluate(LANDING_JS, [list(LANDING_BOXES), DESKTOP["height"]])
    page.set_viewport_size(PHONE)
    wide = page.evaluate(PAGE_OVERFLOW_JS)
    if wide:
        problems.append(f"at {PHONE['width']} px the page scrolls sideways: {wide}")
    counts = {"plots": drawn["plots"], "diagrams": sketched["diagrams"], "tables": laid["tables"],
              "numeric": laid["numeric"]}
    return counts, problems


def _topics() -> list[str]:
    """Every topic of the lab (``stack.roofline``): identifiers a reader must not meet in a plot's hover."""
    return [topic_name(path) for path in example_files()]


@pytest.mark.parametrize("scheme", ["default", "slate"])
def test_every_page_renders_cleanly(scheme, browser, server, site):
    light = scheme == "default"
    # The print edition is left to tests/test_print_edition.py (PRINT_PAGE). A page with no
    # plot, diagram or formula has nothing a palette changes that is checked (its reading time
    # and requests the light pass checks): the dark pass leaves out those (the notebooks, the
    # glossary, most of Appendix A: about half the pages), less the home page.
    every_page = site_pages(site)
    assert any(path == PRINT_PAGE for path, *_ in every_page), \
        f"the built site has no {PRINT_PAGE}: tests/test_print_edition.py would check nothing"
    pages = [p for p in every_page if p[0] != PRINT_PAGE and (light or p[0] == "/" or any(p[1:]))]
    assert any(path == "/" for path, *_ in pages), f"the built site has no home page (pages: {pages})"
    # The render checks below must check something: the book has diagrams, formulas and plots.
    assert sum(p[1] for p in pages), "no page of the site has a Mermaid diagram: the render check is vacuous"
    assert sum(p[2] for p in pages), "no page of the site has a formula: the KaTeX check is vacuous"
    assert sum(p[3] for p in pages), "no page of the site has a plot: the contrast check is vacuous"
    context = _new_context(browser, scheme)
    visit = _Visit(context, server, site)
    not_words, topics = sorted(metrics.not_words()), _topics()
    report = []
    checked = {"plots": 0, "diagrams": 0, "tables": 0, "numeric": 0}
    depth_checked = False
    try:
        page = context.new_page()  # one tab: each page of the pass is opened in it in turn
        visit.watch(page)
        for n, (path, diagrams, formulas, _) in enumerate(pages):
            visit.page_path = path
            page.set_viewport_size(DESKTOP)
            page.set_default_timeout(RENDER_TIMEOUT_MS)
            response = page.goto(server + path, wait_until="load")
            if response is None or response.status >= 400:
                visit.problems.append(f"{path}: opened with status {response and response.status}")
            if n == 0:
                chosen = _choose_palette(page, scheme)
                if chosen is None:
                    pytest.skip(f"the site offers no '{scheme}' palette")
                assert chosen == scheme, f"the palette toggle did not reach '{scheme}' (stuck at '{chosen}')"
                page.reload(wait_until="load")
                page.wait_for_load_state("networkidle")
            seen, problems = _render_problems(page, diagrams, formulas, scheme, RENDER_TIMEOUT_MS)
            # Both passes: what a palette can change. Widths, words and sizes once, in the light pass.
            problems += _palette_problems(page, path)
            if light:
                counts, more = _layout_problems(page, path, not_words, topics)
                checked = {k: checked[k] + counts[k] for k in checked}
                problems += more
            visit.problems += [f"{path}: {text}" for text in problems]
            report.append(f"{path} ({seen['scheme']}): {seen['hosts']} diagrams, {seen['formulas']} formulas")
            if light:
                # The requests a page makes after "load", checked once, in the light pass: nothing of
                # this page still loading when the tab leaves it (a request cut off by the next page's
                # navigation would go unchecked); the dark pass makes the same requests.
                page.wait_for_load_state("networkidle")
        if light:  # a link into a folded "In depth" section opens it
            visit.page_path = f"{DEPTH_LINK[0]}#{DEPTH_LINK[1]}"
            page.set_viewport_size(DESKTOP)
            page.goto(server + visit.page_path, wait_until="load")
            opened = page.evaluate(DEPTH_LINK_JS, DEPTH_LINK[1])
            if opened is not True:
                visit.problems.append(f"{visit.page_path}: the link left its section folded ({opened})")
            page.wait_for_load_state("networkidle")
            depth_checked = True
    finally:
        context.close()
    # The checks must check something: the book's pages hold tables of numbers, plots and diagrams.
    if light:
        assert checked["tables"] and checked["numeric"], \
            f"no table with numbers on the {len(pages)} pages: the width check is vacuous"
        assert checked["plots"] > 10, \
            f"only {checked['plots']} plots on the {len(pages)} pages: the plot checks are vacuous"
        assert checked["diagrams"] > 5, \
            f"only {checked['diagrams']} diagrams on the {len(pages)} pages: the text-size check is vacuous"
        assert depth_checked, f"{DEPTH_LINK[0]} was not among the pages: the folded-link check is vacuous"
    problems = visit.problems + [f"request to a foreign host, aborted: {url}" for url in dict.fromkeys(visit.foreign)]
    assert not problems, f"{len(problems)} problems in the '{scheme}' palette:\n" + "\n".join(problems)
    print("\n".join(report))


# A page made to fail each check that reads a drawing: a diagram in Mermaid's closed shadow root
# shrunk to a quarter, an HTML diagram in 8 px type and one in a closed fold in 9 px (beside a
# readable one), a plot whose hover names a topic and whose tick is in e-notation, drawn in a text
# colour that hardly differs from the dark page's background.
MADE_TO_FAIL = """<!doctype html><html><body style="background: #1e2129; color: #2a2e38"><article>
<div class="mermaid" id="host"></div>
<div class="lab-diagram" style="font-size: 8px"><p>tiny words</p></div>
<details><summary>In depth</summary><div class="lab-diagram" style="font-size: 9px"><p>folded words</p></div></details>
<div class="lab-diagram" style="font-size: 14px"><p>readable words</p></div>
<figure class="lab-plot"><svg aria-label="made to fail: a plot" viewBox="0 0 100 50" width="400">
<g class="lab-plot__point"><title>eager · 8: 4 ms, 3 runs (capstone.decode)</title><path d="M 0 0 h 5"/></g>
<text x="10" y="40" style="font-size: 10px; fill: currentColor">1e+06</text></svg></figure>
</article><script>
document.getElementById("host").attachShadow({mode: "closed"}).innerHTML =
  '<svg viewBox="0 0 2000 100" width="500"><text x="0" y="50" font-size="16">shrunk to a quarter</text></svg>';
</script></body></html>"""


def test_the_drawing_checks_fail_on_a_page_made_to_fail(browser):
    context = _new_context(browser, "slate")
    try:
        page = context.new_page()
        page.route("**/*", lambda route: route.fulfill(content_type="text/html", body=MADE_TO_FAIL))
        page.goto("http://made-to-fail.invalid/", wait_until="load")
        diagrams = page.evaluate(DIAGRAM_TEXT_JS, LEAST_DIAGRAM_PX)
        plots = page.evaluate(FIGURES_JS, [[], _topics()])
        contrast = page.evaluate(PLOT_CONTRAST_JS, LEAST_CONTRAST)
    finally:
        context.close()
    assert diagrams == {"diagrams": 4, "problems": [
        'Mermaid diagram 1: text "shrunk to a quarter" drawn at 4.0 px, under 11 px at this width',
        'diagram 1: text "tiny words" drawn at 8.0 px, under 11 px at this width',
        'diagram 2: text "folded words" drawn at 9.0 px, under 11 px at this width',
    ]}
    assert plots == {"plots": 1, "problems": ['plot "made to fail": hover text names the topic capstone.decode',
                                              'plot "made to fail": e-notation "1e+06"']}
    assert len(contrast) == 1, contrast
    assert contrast[0].startswith('plot "made to fail": its text ("1e+06") in rgb(42, 46, 56) on rgb(30, 33, 41): '
                                  'contrast 1.'), contrast
