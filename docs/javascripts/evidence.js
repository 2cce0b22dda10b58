// The evidence behind a measured number, by tap and keyboard as well as by hover; and the
// claim badges folded to one quiet mark that opens to them.
//
// Every measured number, range, ⚠ and claim badge the build writes carries its provenance
// in a `title` (the GPU, the runs, the timer, the record). A mouse shows it on hover; a
// phone and a keyboard cannot. Here each becomes focusable, and a tap, a click, Enter or
// Space shows the same text in a box beside it (Escape, a tap elsewhere or moving on closes
// it). Each group of claim badges (one per GPU) becomes one small button saying what the
// badges say ("✓ checked: holds on 2 GPUs"), which opens them; a violated claim is never folded.
// A number in the prose names its GPU beside it whenever the reader has chosen another
// GPU's tab in a table. Without JavaScript the page shows everything as the build wrote it.
(function () {
  "use strict";

  var EVIDENCE = ".lab-value[title], .lab-runs[title], .lab-noisy[title], .lab-missing[title], .lab-claim[title]";
  var shown = null; // {owner, box}: the one box open now

  function close() {
    if (!shown) return;
    shown.box.remove();
    shown.owner.setAttribute("aria-expanded", "false");
    shown.owner.removeAttribute("aria-describedby");
    shown = null;
  }

  function open(owner) {
    close();
    var box = document.createElement("div");
    box.className = "lab-popover";
    box.id = "lab-popover";
    box.setAttribute("role", "tooltip");
    box.textContent = owner.getAttribute("data-lab-evidence");
    document.body.appendChild(box);
    var r = owner.getBoundingClientRect();
    var width = Math.min(box.offsetWidth, document.documentElement.clientWidth - 16);
    var left = Math.max(8, Math.min(r.left + window.scrollX, window.scrollX + document.documentElement.clientWidth - width - 8));
    box.style.left = left + "px";
    box.style.top = (r.bottom + window.scrollY + 4) + "px";
    owner.setAttribute("aria-expanded", "true");
    owner.setAttribute("aria-describedby", box.id);
    shown = { owner: owner, box: box };
  }

  function toggle(owner) {
    if (shown && shown.owner === owner) close(); else open(owner);
  }

  function reachable(el) {
    el.setAttribute("data-lab-evidence", el.getAttribute("title"));
    el.setAttribute("tabindex", "0");
    el.setAttribute("role", "button");
    el.setAttribute("aria-expanded", "false");
    el.classList.add("lab-evidence");
  }

  function foldClaims(group) {
    var badges = group.querySelectorAll(".lab-claim");
    var held = group.querySelectorAll(".lab-claim--holds").length;
    var unverified = group.querySelectorAll(".lab-claim--unverified").length;
    if (!badges.length || held + unverified < badges.length) return; // a violation stays in view
    var gpus = badges.length + " GPU" + (badges.length === 1 ? "" : "s");
    var button = document.createElement("button");
    button.type = "button";
    button.className = "lab-claims__toggle";
    button.setAttribute("aria-expanded", "false");
    button.textContent = unverified
      ? "✓ checked: holds on " + held + ", ? " + unverified + " not yet measured"
      : "✓ checked: holds on " + gpus;
    button.title = "the book's statement, checked against every run of its records: open for each GPU's figures";
    group.classList.add("lab-claims--folded");
    group.parentNode.insertBefore(button, group);
    button.addEventListener("click", function () {
      var folded = group.classList.toggle("lab-claims--folded");
      button.setAttribute("aria-expanded", String(!folded));
    });
  }

  // The GPU a reader chose in a table's tabs (linked across the page): a number in the prose
  // of another GPU (most quote the book's primary GPU) gets that GPU's name beside it.
  function gpuLabels() {
    // The GPUs of the quoted numbers, and every tab beside one of them (the other GPUs).
    const known = new Set([...document.querySelectorAll(".lab-value[data-lab-gpu]")].map(v => v.dataset.labGpu));
    for (const labels of document.querySelectorAll(".tabbed-labels")) {
      const texts = [...labels.children].map(l => l.textContent.trim());
      if (texts.some(t => known.has(t))) texts.forEach(t => known.add(t));
    }
    return known;
  }

  function chosenGpu(known) {
    for (const input of document.querySelectorAll(".tabbed-set > input:checked")) {
      const label = document.querySelector('label[for="' + input.id + '"]');
      const text = label && label.textContent.trim();
      if (text && known.has(text)) return text;
    }
    return null;
  }

  function nameGpus(known, chosen) {
    if (chosen === undefined) chosen = chosenGpu(known);
    document.querySelectorAll(".lab-value[data-lab-gpu]").forEach(function (value) {
      var other = chosen !== null && value.dataset.labGpu !== chosen;
      var tag = value.nextElementSibling && value.nextElementSibling.classList.contains("lab-gpu-tag")
        ? value.nextElementSibling : null;
      if (other && !tag) {
        tag = document.createElement("span");
        tag.className = "lab-gpu-tag";
        tag.textContent = value.dataset.labGpuShort;
        tag.title = "this number is the " + value.dataset.labGpuShort + "'s; the tables show the GPU you chose";
        value.after(tag);
      } else if (!other && tag) {
        tag.remove();
      }
    });
  }

  function init() {
    var known = gpuLabels();
    if (known.size) {
      nameGpus(known);
      window.setTimeout(function () { nameGpus(known); }, 0); // after the theme restores a saved choice
      document.addEventListener("change", function (event) {
        if (!(event.target.matches && event.target.matches(".tabbed-set > input"))) return;
        var label = document.querySelector('label[for="' + event.target.id + '"]');
        var text = label && label.textContent.trim();
        nameGpus(known, known.has(text) ? text : undefined);
      });
    }
    document.querySelectorAll(".lab-claims").forEach(foldClaims);
    document.querySelectorAll(EVIDENCE).forEach(reachable);
    document.addEventListener("click", function (event) {
      var owner = event.target.closest && event.target.closest(".lab-evidence");
      if (owner) toggle(owner);
      else if (!(event.target.closest && event.target.closest(".lab-popover"))) close();
    });
    document.addEventListener("keydown", function (event) {
      if (event.key === "Escape") { close(); return; }
      var owner = event.target.closest && event.target.closest(".lab-evidence");
      if (owner && (event.key === "Enter" || event.key === " ")) {
        event.preventDefault();
        toggle(owner);
      }
    });
    document.addEventListener("focusout", function (event) {
      if (shown && event.target === shown.owner) close();
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
