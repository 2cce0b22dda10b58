"""A measured number's evidence by tap and keyboard, and claims folded (docs/javascripts/evidence.js),
in Debian's Chromium on the built site."""
from __future__ import annotations

import pytest

from tests.hook_support import served
from site_server import CHROMIUM  # noqa: I001 - overrides/, on the path hook_support puts it

pytestmark = pytest.mark.browser
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


@pytest.fixture(scope="module")
def page(built_site):
    """The BLAS chapter open on a phone-sized screen (no hover there), and its page errors."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: 'make test' installs Debian's chromium", pytrace=False)
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with served(built_site) as origin, sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        tab = chromium.new_page(viewport={"width": 390, "height": 844}, has_touch=True)
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        tab.on("console", lambda m: m.type == "error" and errors.append(m.text))
        tab.goto(f"{origin}/blas/")
        tab.wait_for_selector(".lab-evidence", timeout=20_000)
        yield tab, errors
        chromium.close()


def test_a_tap_on_a_measured_number_shows_its_provenance_and_a_tap_elsewhere_closes_it(page):
    tab, errors = page
    number = tab.locator("p .lab-value.lab-evidence").first
    number.scroll_into_view_if_needed()
    number.tap()
    box = tab.locator(".lab-popover")
    assert box.count() == 1 and box.inner_text() == number.get_attribute("data-lab-evidence")
    assert number.get_attribute("aria-expanded") == "true"
    tab.locator("h1").tap()
    assert tab.locator(".lab-popover").count() == 0
    assert errors == []


def test_the_keyboard_reaches_a_number_opens_its_provenance_with_enter_and_closes_it_with_escape(page):
    tab, errors = page
    number = tab.locator("p .lab-value.lab-evidence").nth(1)
    number.focus()
    tab.keyboard.press("Enter")
    assert tab.locator(".lab-popover").inner_text() == number.get_attribute("data-lab-evidence")
    tab.keyboard.press("Escape")
    assert tab.locator(".lab-popover").count() == 0
    assert errors == []


def test_claims_that_hold_are_one_quiet_mark_that_opens_to_every_gpu_s_badge(page):
    tab, errors = page
    toggle = tab.locator(".lab-claims__toggle").first
    group = tab.locator(".lab-claims").first
    assert toggle.inner_text().startswith("✓ checked: holds on") and not group.is_visible()
    toggle.scroll_into_view_if_needed()
    toggle.tap()
    assert group.is_visible() and toggle.get_attribute("aria-expanded") == "true"
    assert group.locator(".lab-claim").count() >= 1
    assert errors == []


def test_with_another_gpu_s_tab_chosen_a_number_in_the_prose_names_its_gpu(page):
    tab, errors = page
    number = tab.locator("p .lab-value[data-lab-gpu]").first
    own = number.get_attribute("data-lab-gpu")
    other = tab.locator(".tabbed-labels > label").filter(has_not_text=own).first
    other.scroll_into_view_if_needed()
    other.click()
    tag = tab.locator("p .lab-value[data-lab-gpu] + .lab-gpu-tag").first
    assert tag.inner_text() == number.get_attribute("data-lab-gpu-short")
    tab.locator(".tabbed-labels > label").filter(has_text=own).first.click()
    assert tab.locator(".lab-gpu-tag").count() == 0, "back on the number's own GPU: no tag"
    assert errors == []


def test_a_tables_provenance_is_one_closed_line_that_a_tap_or_the_keyboard_opens(page):
    tab, errors = page
    details = tab.locator(".tabbed-block details.lab-provenance").first
    summary, rest = details.locator("summary"), details.locator("p")
    summary.scroll_into_view_if_needed()
    assert details.get_attribute("open") is None and not rest.is_visible()
    box = summary.bounding_box()
    line = float(summary.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)"))
    assert box["height"] < 2.5 * line, "one line, two at most on a phone"
    tab.touchscreen.tap(box["x"] + 4, box["y"] + box["height"] / 2)  # the chevron, not a record's link
    assert details.get_attribute("open") is not None and rest.is_visible()
    assert "torch " in rest.inner_text()
    summary.focus()
    tab.keyboard.press("Enter")
    assert details.get_attribute("open") is None and not rest.is_visible()
    assert errors == []
