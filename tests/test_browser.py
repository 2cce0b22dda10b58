"""The built site in a real browser: every page, as a reader's Chromium shows it.

Builds the site (``mkdocs build --strict``), serves it from 127.0.0.1 and opens
every page in Debian's Chromium (``/usr/bin/chromium``, driven by Playwright), in
each palette the site offers. A page fails on any console error, uncaught page
error, failed request, HTTP status >= 400, or request to any host but the local
server (those are aborted: the book must read offline). Every Mermaid diagram must
have rendered (Material swaps ``pre.mermaid`` for a ``div.mermaid`` host whose
closed shadow root holds the SVG, so the host is what can be tested) and every
formula (``.arithmatex``) must hold KaTeX output.

Within the same visit, at a 1400 px window, every table (those of every tab and every
fold too: they are shown for the check) must keep its numbers inside the text column,
so no reader scrolls sideways for a figure, and no header may hold a metric identifier
(a word with an underscore outside code, or an identifier of ``examples/lab/metrics.py``
that is not a word); every plot must carry hover values and no axis, tick or legend text
in e-notation or naming an identifier, and every page of the book its reading time; then
at 390 px (a phone) the page itself must not scroll sideways. The landing page's four boxes (who the
book is for, what to know first, where to start, when it was measured) must have their titles on
the first screen at 1400 px. Chapter 6, opened at a link to a heading inside a folded "In depth" section, opens it.
These width checks run in the light pass only: a palette changes colours, not widths.

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
from tests.hook_support import served
from site_server import CHROMIUM, CHROMIUM_ARGS  # noqa: I001 - overrides/, on the path hook_support puts it

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
RENDER_TIMEOUT_MS = 20_000
#: The window a desktop reader has (the text column is then about 720 px) and a phone's.
DESKTOP = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}


# -- the site and its server ------------------------------------------------------
@pytest.fixture(scope="module")
def site(built_site) -> Path:
    return built_site


@pytest.fixture(scope="module")
def server(site):
    with served(site) as origin:
        yield origin


class _Census(HTMLParser):
    """Counts the elements the browser must render: Mermaid sources and formulas."""

    def __init__(self):
        super().__init__()
        self.mermaid = 0
        self.math = 0

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        self.mermaid += "mermaid" in classes
        self.math += "arithmatex" in classes


def site_pages(site: Path) -> list[tuple[str, int, int]]:
    """``(url path, Mermaid diagrams, formulas)`` of every page of the built site."""
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
        found.append((path, census.mermaid, census.math))
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

# Every table, with every tab shown and every fold open for the measure (restored after): numeric
# cells past their scroll box's right edge, and headers holding an identifier instead of words.
TABLES_JS = """(notWords) => {
  const isIdentifier = IS_IDENTIFIER;
  const style = document.createElement("style");
  style.textContent = ".md-typeset .tabbed-block { display: block !important; }";
  document.head.append(style);
  const closed = [...document.querySelectorAll("article details:not([open])")];
  closed.forEach(d => { d.open = true; });
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
  closed.forEach(d => { d.open = false; });
  style.remove();
  return found;
}""".replace("IS_IDENTIFIER", IS_IDENTIFIER_JS)

# Every plot as the reader's browser draws it: a hover value (an SVG <title>) on its points, no
# axis, tick or legend text in e-notation or naming an identifier; and the page's reading time.
FIGURES_JS = """(notWords) => {
  const isIdentifier = IS_IDENTIFIER;
  const words = new Set(notWords);
  const found = {plots: 0, problems: [], reading_time: !!document.querySelector("article .lab-reading-time")};
  for (const svg of document.querySelectorAll("article figure.lab-plot svg")) {
    found.plots++;
    const name = (svg.getAttribute("aria-label") || "a plot").split(":")[0];
    if (!svg.querySelector("title")) found.problems.push(`plot "${name}": no hover value on any point`);
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


@pytest.mark.parametrize("scheme", ["default", "slate"])
def test_every_page_renders_cleanly(scheme, browser, server, site):
    pages = site_pages(site)
    assert any(path == "/" for path, _, _ in pages), f"the built site has no home page (pages: {pages})"
    # The render checks below must check something: the book has diagrams and formulas.
    assert sum(d for _, d, _ in pages), "no page of the site has a Mermaid diagram: the render check is vacuous"
    assert sum(f for _, _, f in pages), "no page of the site has a formula: the KaTeX check is vacuous"
    if scheme != "default":
        # The light pass opens every page for errors, failed and foreign requests; what a
        # palette changes is how diagrams and formulas render, so the others see those pages.
        pages = [(path, d, f) for path, d, f in pages if path == "/" or d or f]
    context = browser.new_context(color_scheme="dark" if scheme == "slate" else "light", service_workers="block",
                                  viewport=DESKTOP)
    context.set_default_timeout(RENDER_TIMEOUT_MS)
    visit = _Visit(context, server, site)
    not_words = sorted(metrics.not_words())
    report = []
    tables = numeric = plots = 0
    depth_checked = landing_checked = False
    try:
        page = context.new_page()  # one tab: each page of the pass is opened in it in turn
        visit.watch(page)
        for n, (path, diagrams, formulas) in enumerate(pages):
            visit.page_path = path
            page.set_viewport_size(DESKTOP)
            response = page.goto(server + path, wait_until="load")
            if response is None or response.status >= 400:
                visit.problems.append(f"{path}: opened with status {response and response.status}")
            if scheme == "default":  # the requests a page makes after "load": checked once
                page.wait_for_load_state("networkidle")
            if n == 0:
                chosen = _choose_palette(page, scheme)
                if chosen is None:
                    pytest.skip(f"the site offers no '{scheme}' palette")
                assert chosen == scheme, f"the palette toggle did not reach '{scheme}' (stuck at '{chosen}')"
                page.reload(wait_until="load")
                page.wait_for_load_state("networkidle")
            try:
                page.wait_for_function(READY_JS, arg=[diagrams, formulas], timeout=RENDER_TIMEOUT_MS)
            except Exception:  # noqa: BLE001 - the inspection below says what is missing
                visit.problems.append(f"{path}: Mermaid or KaTeX did not finish within {RENDER_TIMEOUT_MS} ms")
            seen = page.evaluate(INSPECT_JS)
            if seen["hosts"] < diagrams or seen["unrendered_sources"] or seen["empty_hosts"]:
                visit.problems.append(f"{path}: {diagrams} Mermaid diagrams in the HTML, {seen['hosts']} rendered "
                                      f"hosts, {seen['empty_hosts']} of them empty, "
                                      f"{seen['unrendered_sources']} sources left unrendered")
            if seen["formulas"] < formulas or seen["formulas_without_katex"] or seen["katex_errors"]:
                visit.problems.append(f"{path}: {formulas} formulas in the HTML, {seen['formulas']} on the page, "
                                      f"{seen['formulas_without_katex']} without KaTeX output, "
                                      f"{seen['katex_errors']} KaTeX errors")
            if seen["scheme"] != scheme:
                visit.problems.append(f"{path}: shown in palette {seen['scheme']!r}, not {scheme!r}")
            # The tables at 1400 px, then the page on a phone: in this visit, not a second one.
            # Once, in the light pass: a palette changes colours, not widths (the dark pass
            # still opens its pages at 1400 px for what a palette does change).
            laid = {"tables": 0, "numeric": 0, "overflowing": [], "identifiers": []}
            if scheme == "default":
                drawn = page.evaluate(FIGURES_JS, not_words)
                plots += drawn["plots"]
                visit.problems += [f"{path}: {text}" for text in drawn["problems"]]
                if not drawn["reading_time"] and not path.startswith("/notebooks/") and path != "/404.html":
                    visit.problems.append(f"{path}: no reading time under the title")
                if path == "/":
                    landing_checked = True
                    visit.problems += [f"{path}: {text}" for text in
                                       page.evaluate(LANDING_JS, [list(LANDING_BOXES), DESKTOP["height"]])]
                laid = page.evaluate(TABLES_JS, not_words)
                page.set_viewport_size(PHONE)
                wide = page.evaluate(PAGE_OVERFLOW_JS)
                if wide:
                    visit.problems.append(f"{path}: at {PHONE['width']} px the page scrolls sideways: {wide}")
            tables, numeric = tables + laid["tables"], numeric + laid["numeric"]
            visit.problems += [f"{path}: {text}" for text in laid["overflowing"] + laid["identifiers"]]
            report.append(f"{path} ({seen['scheme']}): {seen['hosts']} diagrams, {seen['formulas']} formulas, "
                          f"{laid['tables']} tables")
            # Nothing of this page still loading when the tab leaves it (a request cut off by the
            # next page's navigation would read as a failed request).
            page.wait_for_load_state("networkidle")
        if scheme == "default":  # a link into a folded "In depth" section opens it
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
    # The table checks must check something: the book's pages hold tables of numbers.
    if scheme == "default":
        assert tables and numeric, f"no table with numbers on the {len(pages)} pages: the width check is vacuous"
        assert plots > 10, f"only {plots} plots on the {len(pages)} pages: the plot checks are vacuous"
        assert depth_checked, f"{DEPTH_LINK[0]} was not among the pages: the folded-link check is vacuous"
        assert landing_checked, "the landing page was not among the pages: its first-screen check is vacuous"
    problems = visit.problems + [f"request to a foreign host, aborted: {url}" for url in dict.fromkeys(visit.foreign)]
    assert not problems, f"{len(problems)} problems in the '{scheme}' palette:\n" + "\n".join(problems)
    print("\n".join(report))
