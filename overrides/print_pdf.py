"""The book as one PDF: the built site's print page (mkdocs-print-site-plugin) printed by Chromium.

    python overrides/print_pdf.py SITE_DIR OUT.pdf [--site-url URL]

Serves SITE_DIR from 127.0.0.1, opens its ``print_page/`` in Debian's Chromium (the browser
tests' own, driven by Playwright), waits for every formula (KaTeX) and diagram (Mermaid), opens
the folded blocks a reader prints for (answers, "In depth" sections, listings; not a table's
provenance or its folded row groups), and prints it to A4 with its plots as the vector SVG the
site draws. Tabs print one block per GPU, each under its label (Material's print style). Links
between chapters stay links inside the PDF; a link to a file of the site (a record, an example's
source, a plot's CSV) points at ``--site-url`` (default: where ``make serve`` serves the site).

Any console error, page error, failed request, request to another host, broken image or formula
left unrendered fails the run: the PDF is then not written. ``check_print_page`` and ``check_pdf``
(run before and after printing) say which chapter's title or plot the print page or the PDF lacks,
against the site's own pages (tests/test_print_edition.py runs the same).

The PDF's outline (bookmarks: every chapter, and under it its sections) is added after printing
with pypdf, from the print page's headings and the named destinations Chromium writes for the
targets of its table of contents: Chromium writes an outline of its own only into a tagged PDF,
and tagging the book's plots made it 32 MB against 9 MB.
"""
from __future__ import annotations

import argparse
import html
import re
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

from site_server import CHROMIUM, CHROMIUM_ARGS, served

PRINT_PAGE = "print_page/"
DEFAULT_SITE_URL = "http://127.0.0.1:8000/"  # make serve's address
RENDER_TIMEOUT_MS = 120_000
TITLE = "Python to Silicon"

# Every formula holds KaTeX output and every Mermaid source became a rendered host.
READY_JS = """(diagrams) => {
  const math = [...document.querySelectorAll(".arithmatex")];
  return document.querySelectorAll("div.mermaid").length >= diagrams
    && math.every(el => el.querySelector(".katex"));
}"""

# What is printed open, links to the site's files, and what would print broken.
PREPARE_JS = """([origin, siteUrl, title]) => {
  document.title = title;
  const folds = [...document.querySelectorAll("#print-site-page details")]
    .filter(d => !d.classList.contains("lab-provenance") && !d.classList.contains("lab-rows"));
  folds.forEach(d => { d.open = true; });
  let rewritten = 0;
  for (const a of document.querySelectorAll("#print-site-page a[href]")) {
    const url = new URL(a.getAttribute("href"), document.baseURI);
    if (url.origin !== origin || url.pathname.startsWith("/print_page/")) continue;
    a.setAttribute("href", siteUrl + url.pathname.slice(1) + url.search + url.hash);
    rewritten++;
  }
  const images = [...document.querySelectorAll("#print-site-page img")];
  return {
    opened: folds.length,
    rewritten,
    broken_images: images.filter(img => !img.complete || img.naturalWidth === 0)
                         .map(img => img.getAttribute("src")),
    images: images.length,
    plots: document.querySelectorAll("#print-site-page figure.lab-plot svg").length,
    katex_errors: document.querySelectorAll(".katex-error").length,
  };
}"""


# Each chapter of the print page (its section's id and title) and its sections (their headings' ids).
OUTLINE_JS = r"""() => {
  const words = el => el ? el.textContent.replace(/\u00b6/g, "").replace(/\s+/g, " ").trim() : "";
  return [...document.querySelectorAll("#print-site-page section.print-page[id]:not([id=''])")].map(section => ({
    id: section.id,
    title: words(section.querySelector("h1")),
    sections: [...section.querySelectorAll("h2[id]")].map(h => ({id: h.id, title: words(h)})),
  }));
}"""


class _Census(HTMLParser):
    def __init__(self):
        super().__init__()
        self.mermaid = 0

    def handle_starttag(self, tag, attrs):
        self.mermaid += "mermaid" in (dict(attrs).get("class") or "").split()


class PrintError(RuntimeError):
    pass


# Leaves on the print page only the chapters whose sections' ids are given (and the contents).
KEEP_JS = """(keep) => {
  for (const s of document.querySelectorAll("#print-site-page section.print-page[id]:not([id=''])"))
    if (!keep.includes(s.id)) s.remove();
}"""


def render(site: Path, out: Path, site_url: str = DEFAULT_SITE_URL, only: list[str] | None = None) -> dict:
    """Print ``site``'s print page to ``out``; returns what was done (raises ``PrintError``).
    ``only``: the ids of the chapters to print (a page's path without ``.md``), the rest taken
    off the page once it is ready; the whole book is 850 pages, two minutes and more to print
    on two cores."""
    from playwright.sync_api import sync_playwright

    page_html = site / PRINT_PAGE / "index.html"
    if not page_html.is_file():
        raise PrintError(f"{page_html} is missing: build the site with the print-site plugin first")
    if not CHROMIUM.exists():
        raise PrintError(f"{CHROMIUM} is missing (apt-get install chromium; make test installs it)")
    census = _Census()
    census.feed(page_html.read_text(encoding="utf-8"))
    site_url = site_url.rstrip("/") + "/"
    problems: list[str] = []
    started = time.monotonic()
    with served(site) as origin:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = browser.new_context(service_workers="block").new_page()
                page.set_default_timeout(RENDER_TIMEOUT_MS)
                page.on("console", lambda m: m.type == "error" and problems.append(f"console error: {m.text}"))
                page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
                page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} ({r.failure})"))
                page.on("response", lambda r: r.status >= 400 and problems.append(f"HTTP {r.status}: {r.url}"))

                def route(request_route):
                    if urlsplit(request_route.request.url).netloc == urlsplit(origin).netloc:
                        request_route.continue_()
                    else:
                        problems.append(f"request to another host, aborted: {request_route.request.url}")
                        request_route.abort()

                page.route("**/*", route)
                page.goto(f"{origin}/{PRINT_PAGE}", wait_until="load")
                page.wait_for_load_state("networkidle")
                page.wait_for_function(READY_JS, arg=census.mermaid)
                if only is not None:
                    page.evaluate(KEEP_JS, list(only))
                seen = page.evaluate(PREPARE_JS, [origin, site_url, TITLE])
                chapters_found = page.evaluate(OUTLINE_JS)
                problems += [f"broken image: {src}" for src in seen["broken_images"]]
                if seen["katex_errors"]:
                    problems.append(f"{seen['katex_errors']} formulas print as KaTeX errors")
                if problems:
                    raise PrintError("the print page does not print cleanly:\n" + "\n".join(problems))
                page.emulate_media(media="print")
                out.parent.mkdir(parents=True, exist_ok=True)
                partial = out.with_name(out.name + ".part")
                page.pdf(path=str(partial), format="A4", print_background=True,
                         margin={"top": "14mm", "bottom": "14mm", "left": "12mm", "right": "12mm"})
                seen["outline"] = add_outline(partial, chapters_found)
                partial.replace(out)
            finally:
                browser.close()
    seen["seconds"] = round(time.monotonic() - started, 1)
    seen["bytes"] = out.stat().st_size
    return seen


def add_outline(pdf: Path, found: list[dict]) -> int:
    """Write into ``pdf`` an outline of ``found`` (OUTLINE_JS's chapters and sections), each item
    at the page of its heading's named destination; returns the number of items. A heading no
    link of the print page targets has no destination and no item; a chapter without one fails."""
    from pypdf import PdfReader, PdfWriter

    reader = PdfReader(pdf)
    destinations = {name.lstrip("/"): dest for name, dest in reader.named_destinations.items()}
    writer = PdfWriter(clone_from=reader)
    items = 0
    for chapter in found:
        if chapter["id"] not in destinations:
            raise PrintError(f"the PDF has no destination for the chapter {chapter['title']!r} (#{chapter['id']})")
        parent = writer.add_outline_item(
            title=chapter["title"], page_number=reader.get_destination_page_number(destinations[chapter["id"]]))
        items += 1
        for section in chapter["sections"]:
            if section["id"] in destinations:
                writer.add_outline_item(title=section["title"], parent=parent,
                                        page_number=reader.get_destination_page_number(destinations[section["id"]]))
                items += 1
    writer.page_mode = "/UseOutlines"  # a viewer opens the outline beside the first page
    with pdf.open("wb") as file:
        writer.write(file)
    return items


def outline(pdf: Path) -> list[tuple[str, int, list[tuple[str, int]]]]:
    """``(chapter title, page, [(section title, page), ...])`` of the PDF's outline, pages from 0."""
    from pypdf import PdfReader

    reader = PdfReader(pdf)
    found: list[tuple[str, int, list[tuple[str, int]]]] = []
    for item in reader.outline:
        if isinstance(item, list):  # the sections under the chapter before
            title, page, _ = found[-1]
            found[-1] = (title, page, [(s.title, reader.get_destination_page_number(s)) for s in item])
        else:
            found.append((item.title, reader.get_destination_page_number(item), []))
    return found


# The pages the print edition leaves out (mkdocs.yml, the print-site plugin's ``exclude``): Appendix A's
# record pages (every run of every figure: most of the book's bulk, and each is on the site) and
# the notebooks (the chapters' own code, as notebooks to run).
LEFT_OUT = ("appendix-records/", "notebooks/")
_NAV_PAGE = re.compile(r"^\s*-\s+(?:[^\n]*?:\s+)?\"?([\w./-]+\.md)\"?\s*(?:#.*)?$", re.M)
_H1 = re.compile(r"<h1[^>]*>(.*?)</h1>", re.S)
_CAPTION = re.compile(r'<figcaption class="lab-plot__caption">(.*?)</figcaption>', re.S)
_SECTION = re.compile(r'<section class="print-page" id="[^"]+"[^>]*>\s*<h1[^>]*>(.*?)</h1>', re.S)


def chapters(site: Path, mkdocs_yml: Path, only: list[str] | None = None) -> list[tuple[str, str, list[str]]]:
    """``(page, title, plot captions)`` of every page of the nav that the print edition holds
    (``only``: of those chapters, as :func:`render` takes them), read from the built site's own
    pages (not from the print page, which is what is checked)."""
    nav = mkdocs_yml.read_text(encoding="utf-8").split("\nnav:", 1)[1]
    found = []
    for uri in _NAV_PAGE.findall(nav):
        if uri.startswith(LEFT_OUT) or (only is not None and uri.removesuffix(".md") not in only):
            continue
        html_path = site / ("index.html" if uri == "index.md" else uri.removesuffix(".md") + "/index.html")
        text = html_path.read_text(encoding="utf-8")
        title = _H1.search(text)
        found.append((uri, _text(title.group(1)) if title else "", [_caption(c) for c in _CAPTION.findall(text)]))
    return found


def check_print_page(site: Path, mkdocs_yml: Path, page: str | None = None) -> list[str]:
    """What the print page lacks: a chapter (by its title) or a plot (by its caption)."""
    if page is None:
        page = (site / PRINT_PAGE / "index.html").read_text(encoding="utf-8")
    titles = {_text(t) for t in _SECTION.findall(page)}
    captions = [_caption(c) for c in _CAPTION.findall(page)]
    problems = []
    for uri, title, plots in chapters(site, mkdocs_yml):
        if title not in titles:
            problems.append(f"{uri}: the print page has no chapter titled {title!r}")
        for caption in plots:
            if caption in captions:
                captions.remove(caption)
            else:
                problems.append(f"{uri}: the print page lacks the plot {caption!r}")
    return problems


def check_pdf(site: Path, mkdocs_yml: Path, pdf: Path, only: list[str] | None = None) -> tuple[list[str], int]:
    """What the PDF's text lacks (a chapter's title, a plot's caption), and its page count
    (``only``: the chapters :func:`render` printed)."""
    import pypdfium2

    document = pypdfium2.PdfDocument(str(pdf))
    try:
        pages = len(document)
        text = " ".join(" ".join(document[i].get_textpage().get_text_range().split()) for i in range(pages))
    finally:
        document.close()
    problems = []
    bookmarked = {title: sections for title, _, sections in outline(pdf)}
    for uri, title, plots in chapters(site, mkdocs_yml, only):
        if title not in text:
            problems.append(f"{uri}: no chapter titled {title!r} in the PDF")
        if title not in bookmarked:
            problems.append(f"{uri}: no chapter titled {title!r} in the PDF's outline")
        problems += [f"{uri}: no plot captioned {c!r} in the PDF" for c in plots if c not in text]
    return problems, pages


def _caption(fragment: str) -> str:
    """A plot's caption without its data link: "Figure 1. Measured roofline: ... (NVIDIA H200)"."""
    return _text(fragment).split(" · ")[0]


def _text(fragment: str) -> str:
    """The words of an HTML fragment, as a reader sees them (without a heading's permalink)."""
    fragment = re.sub(r'<a class="headerlink".*?</a>', "", fragment, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", fragment)).split())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=Path, help="the built site (mkdocs build -d SITE)")
    parser.add_argument("out", type=Path, help="the PDF to write")
    parser.add_argument("--site-url", default=DEFAULT_SITE_URL,
                        help=f"where links to the site's files point (default {DEFAULT_SITE_URL})")
    parser.add_argument("--mkdocs-yml", type=Path, default=Path(__file__).resolve().parents[1] / "mkdocs.yml",
                        help="the site's configuration, for its nav (default: this repository's)")
    args = parser.parse_args(argv)
    problems = check_print_page(args.site, args.mkdocs_yml)
    try:
        done = {} if problems else render(args.site, args.out, args.site_url)
    except PrintError as exc:
        problems.append(str(exc))
    if not problems:
        problems, pages = check_pdf(args.site, args.mkdocs_yml, args.out)
    if problems:
        print("print_pdf: " + "\n".join(problems), file=sys.stderr)
        return 1
    print(f"print_pdf: {args.out}: {pages} pages, {done['bytes'] / 1e6:.1f} MB, printed in {done['seconds']} s; "
          f"{done['outline']} outline items, {done['plots']} plots, {done['opened']} folds printed open, "
          f"{done['rewritten']} links to the site's files point at {args.site_url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
