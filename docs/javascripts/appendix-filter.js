// Appendix A's filter: on a chapter's page of the appendix, a text box that keeps the claims
// and the topics that match what the reader types, and hides the others.
//
// The page (overrides/hooks/lab_site/generated.py, chapter_page) holds the box, hidden until
// this script runs, so a reader without scripts sees every block and no dead box. The blocks:
// each row of the claims table (inside .lab-appendix-claims), and each topic: its heading
// (h3.lab-record) and everything after it up to the next heading. A block matches when every
// word typed is in its text, in the text of its hover titles (a metric's identifier, a
// figure's provenance), or names its claim's verdict (holds, violated, unverified); a word
// that starts with "-" must not be there. A word that is part of a topic's name (its heading)
// is looked for in the topics' names only, since a topic's commands may name the others it
// ran with. So "h100", "stale", "unverified", "latency", "ring_allreduce" or "h200 -holds"
// each keep what they say. Nothing is fetched; the
// filter is kept in the address (?filter=...), so a filtered page can be linked to.
(function () {
  "use strict";

  var VERDICTS = ["holds", "violated", "unverified"];

  function words(el) {
    var parts = [el.textContent];
    if (el.getAttribute && el.getAttribute("title")) parts.push(el.getAttribute("title"));
    el.querySelectorAll("[title], [data-lab-evidence]").forEach(function (t) {
      parts.push(t.getAttribute("title") || t.getAttribute("data-lab-evidence") || "");
    });
    el.querySelectorAll(".lab-claim").forEach(function (badge) {
      VERDICTS.forEach(function (v) {
        if (badge.classList.contains("lab-claim--" + v)) parts.push(v);
      });
    });
    return parts.join(" ").toLowerCase();
  }

  // A topic: its heading and its siblings up to the next heading of its level or above.
  function topicBlock(heading) {
    var els = [heading];
    for (var el = heading.nextElementSibling; el && !/^H[1-3]$/.test(el.tagName); el = el.nextElementSibling) {
      els.push(el);
    }
    var text = els.map(words).join(" ");
    return { els: els, text: text, id: heading.id, name: heading.textContent.trim().toLowerCase() };
  }

  function setUp(box) {
    var root = box.closest("article") || document;
    var input = box.querySelector("input");
    var count = box.querySelector("output");
    var claims = [];
    root.querySelectorAll(".lab-appendix-claims tbody tr").forEach(function (row) {
      claims.push({ els: [row], text: words(row) });
    });
    var topics = [];
    root.querySelectorAll("h3.lab-record").forEach(function (h) { topics.push(topicBlock(h)); });
    // The table of contents' link to each topic, hidden with it.
    var toc = {};
    document.querySelectorAll(".md-nav--secondary a.md-nav__link[href^='#']").forEach(function (a) {
      toc[decodeURIComponent(a.getAttribute("href").slice(1))] = a.closest("li");
    });

    function apply() {
      var query = input.value.trim().toLowerCase();
      var terms = query ? query.split(/\s+/) : [];
      function named(term) {
        return topics.some(function (topic) { return topic.name.indexOf(term) >= 0; });
      }
      function matches(block) {
        return terms.every(function (term) {
          var not = term.length > 1 && term.charAt(0) === "-";
          var word = not ? term.slice(1) : term;
          var text = block.name !== undefined && named(word) ? block.name : block.text;
          return (text.indexOf(word) >= 0) !== not;
        });
      }
      function show(blocks) {
        var shown = 0;
        blocks.forEach(function (block) {
          var keep = matches(block);
          shown += keep ? 1 : 0;
          block.els.forEach(function (el) { el.hidden = !keep; });
          if (block.id && toc[block.id]) toc[block.id].hidden = !keep;
        });
        return shown;
      }
      var c = show(claims);
      var t = show(topics);
      function part(n, total, one, many) {
        var noun = total === 1 ? one : many;
        return terms.length ? n + " of " + total + " " + noun : total + " " + noun;
      }
      count.textContent = (terms.length ? "Showing " : "") + part(c, claims.length, "claim", "claims") +
        " and " + part(t, topics.length, "topic", "topics") + (terms.length && !c && !t ? ": nothing matches" : "");
      if (window.history && window.history.replaceState) {
        var url = new URL(window.location.href);
        if (terms.length) url.searchParams.set("filter", input.value.trim());
        else url.searchParams.delete("filter");
        window.history.replaceState(window.history.state, "", url.toString());
      }
    }

    input.addEventListener("input", apply);
    input.addEventListener("keydown", function (event) {
      if (event.key === "Escape" && input.value) {
        input.value = "";
        apply();
        event.preventDefault();
        event.stopPropagation();
      }
    });
    var given = new URLSearchParams(window.location.search).get("filter");
    if (given) input.value = given;
    box.hidden = false;
    apply();
  }

  function init() {
    document.querySelectorAll("[data-lab-filter]").forEach(function (box) {
      if (!box.hasAttribute("data-lab-filter-ready")) {
        box.setAttribute("data-lab-filter-ready", "");
        setUp(box);
      }
    });
  }

  if (window.document$ && window.document$.subscribe) {
    window.document$.subscribe(init); // Material's page-ready signal
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
