"""Issue 25's four views of one built site, as PNGs: python shots.py SITE PREFIX OUTDIR.

The capstone's ladder plot and Chapter 7's first table of numbers (each clipped to itself, at
most 1600 px of it), at a 1400 px window; the landing page at 1400 x 900; Chapter 1's opening
on a phone (390 x 844). Light palette; Debian's Chromium through Playwright.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "overrides"))
from site_server import CHROMIUM, CHROMIUM_ARGS, served
from playwright.sync_api import sync_playwright

site, prefix, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
LADDER_JS = """() => {
  const head = document.getElementById("the-ladder");
  const figs = [...document.querySelectorAll("article figure.lab-plot")].filter(f => f.checkVisibility() &&
    (head.compareDocumentPosition(f) & Node.DOCUMENT_POSITION_FOLLOWING));
  figs[0].setAttribute("data-shot", "capstone-ladder");
}"""
TABLE_JS = """() => {
  const t = [...document.querySelectorAll("article table")].find(t => t.checkVisibility() &&
    [...t.querySelectorAll("td")].filter(td => /\\d/.test(td.textContent)).length >= 20);
  (t.closest(".tabbed-set") || t.closest(".md-typeset__scrollwrap") || t).setAttribute("data-shot", "ecosystem-table");
}"""
with served(site) as origin, sync_playwright() as pw:
    b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    ctx = b.new_context(viewport={"width": 1400, "height": 900}, color_scheme="light")
    page = ctx.new_page()
    def shoot(path, js, name):
        page.goto(origin + path, wait_until="networkidle"); page.wait_for_timeout(1500)
        page.evaluate(js)
        # The page as a whole, clipped to the element: no sticky header drawn over it, and at most 1600 px of it.
        box = page.evaluate(f"""() => {{ const r = document.querySelector('[data-shot={name}]').getBoundingClientRect();
          return {{x: r.x + scrollX, y: r.y + scrollY, width: r.width, height: Math.min(r.height, 1600)}}; }}""")
        page.screenshot(path=str(out / f"{prefix}-{name}.png"), full_page=True, clip=box, animations="disabled")
    shoot("/capstone/", LADDER_JS, "capstone-ladder")
    shoot("/ecosystem/", TABLE_JS, "ecosystem-table")
    page.goto(origin + "/", wait_until="networkidle"); page.wait_for_timeout(1500)
    page.screenshot(path=str(out / f"{prefix}-landing-1400.png"))
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(origin + "/stack/", wait_until="networkidle"); page.wait_for_timeout(1500)
    page.screenshot(path=str(out / f"{prefix}-stack-opening-390.png"))
    b.close()
