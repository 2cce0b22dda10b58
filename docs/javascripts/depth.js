// A link into a folded section opens it.
//
// Every "In depth" section of a chapter is folded under its heading (a closed
// `details.lab-depth`, written by overrides/hooks/reading.py), and so is every long listing
// and answer. A link to an anchor inside one (a subsection, a footnote's back-reference, a
// numbered figure) would land on nothing visible; here every closed `details` that holds the
// target of the URL's fragment is opened, and the target scrolled into view: on load, on
// each page Material's instant navigation shows (its `document$`), on `hashchange`, and on a
// click on a link to the fragment already in the URL (no `hashchange` then). Without
// JavaScript, the section is one click away under its heading.
(function () {
  "use strict";

  function target(hash) {
    var id;
    try { id = decodeURIComponent(hash.slice(1)); } catch (error) { id = hash.slice(1); }
    return id ? document.getElementById(id) : null;
  }

  function reveal() {
    var element = target(window.location.hash);
    if (!element) return;
    var opened = false;
    for (var node = element.parentElement; node; node = node.parentElement) {
      if (node.tagName === "DETAILS" && !node.open) {
        node.open = true;
        opened = true;
      }
    }
    if (opened) element.scrollIntoView();
  }

  window.addEventListener("hashchange", reveal);
  document.addEventListener("click", function (event) {
    var link = event.target.closest && event.target.closest("a[href^='#']");
    if (link && link.getAttribute("href") === window.location.hash) window.setTimeout(reveal, 0);
  });
  if (typeof document$ !== "undefined") document$.subscribe(reveal);
  else if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", reveal);
  else reveal();
})();
