// Render the formulas pymdownx.arithmatex (generic mode) leaves in .arithmatex
// elements: \( … \) inline, \[ … \] as a block. KaTeX and its fonts come from this
// site (assets/vendor/katex/), loaded by overrides/main.html on pages with math.
document$.subscribe(({ body }) => {
  for (const element of body.querySelectorAll(".arithmatex")) {
    renderMathInElement(element, {
      delimiters: [
        { left: "\\(", right: "\\)", display: false },
        { left: "\\[", right: "\\]", display: true },
      ],
      throwOnError: false,
    })
  }
})
