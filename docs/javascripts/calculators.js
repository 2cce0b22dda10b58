// Live calculators: the book's models, recomputed as the reader types.
//
// The records hook (overrides/hooks/lab_site/calculators.py) writes each widget as a
// form pre-filled from the records of the book's GPU; this file does the arithmetic,
// in the same order of operations as the Python examples it mirrors, so the two agree
// to the last bits (tests/test_calculators.py checks them on shared inputs):
//
//   launch_budget    examples/graphs/launch_budget.py
//   dispatch_budget  examples/dispatch/budget.py
//   roofline         examples/stack/roofline_model.py
//   ring_allreduce   examples/collectives/ring_model.py
//   two_level_allreduce  examples/collectives/two_level.py (ring_model's two-level and flat rings)
//   speed_of_light   examples/capstone/speed_of_light.py
//
// Each widget keeps its raw results in data-value attributes (full precision) and
// shows them rounded. Bad input shows one message under the form, never NaN. Inputs take
// numbers as a reader writes them (1,000; 2^37; 8192**3), lists of presets fill several at
// once (a GPU's measured values, a model's shape, a precision), a reset button brings back
// the measured start values, and the inputs a reader changed are kept in the page's address.
//
// A widget written with plot=ANCHOR (data-plot) marks its current result on every tab of the
// plot of that anchor= on its page ("your input: ..."), through the scale the SVG was drawn
// with (its data-lab-x and data-lab-y: log or linear, data limits, SVG coordinates); a value
// off the axes is drawn at the edge with an arrow. MARKERS says what each calculator marks.
(function () {
  "use strict"

  const MODELS = {
    launch_budget(v) {
      const overhead_ms = v.layers * v.kernels_per_layer * v.launch_us / 1e3
      const budget_ms = 1e3 / v.tokens_per_second
      const fraction = overhead_ms / budget_ms
      return { overhead_ms, budget_ms, fraction, verdict: fraction >= 1 ? "over budget" : "within budget" }
    },
    dispatch_budget(v) {
      const cpu = v.ops * v.cpu_us / 1e3
      const gpu = v.ops * v.gpu_us / 1e3
      const fused = Math.max(cpu / v.fusion, gpu)
      const graph = v.ops * Math.max(v.gpu_us, v.graph_us) / 1e3 + v.cpu_us / 1e3
      return {
        cpu_ms: cpu, gpu_ms: gpu, bound: cpu > gpu ? "CPU" : "GPU", step_ms: Math.max(cpu, gpu),
        fused_step_ms: fused, graph_step_ms: graph,
      }
    },
    roofline(v) {
      const intensity = v.flops / v.bytes
      const ridge = v.peak_tflops * 1e12 / (v.bandwidth_gbs * 1e9)
      const attainable_tflops = Math.min(v.peak_tflops, intensity * v.bandwidth_gbs / 1e3)
      const time_us = Math.max(v.flops / (v.peak_tflops * 1e12), v.bytes / (v.bandwidth_gbs * 1e9)) * 1e6
      return { intensity, ridge, attainable_tflops, time_us, bound: intensity < ridge ? "memory" : "compute" }
    },
    ring_allreduce(v) {
      // The command line takes 1000MB, 600GB/s, 80us: the same scalings as here.
      const p = v.gpus
      const nbytes = v.mbytes * 1e6
      const bandwidth = v.bandwidth_gbs * 1e9
      const latency = v.latency_us * 1e-6
      if (p === 1) {
        return { seconds: 0, algbw_bytes_per_s: null, busbw_bytes_per_s: null, bound: "none" }
      }
      const steps = 2 * (p - 1)
      const seconds = steps * latency + steps / p * nbytes / bandwidth
      const algbw = nbytes / seconds
      const lat = steps * latency
      const bw = steps / p * nbytes / bandwidth
      return {
        seconds, algbw_bytes_per_s: algbw, busbw_bytes_per_s: algbw * (2 * (p - 1) / p),
        bound: lat > bw ? "latency" : "bandwidth",
      }
    },
    two_level_allreduce(v) {
      // ring_model.py's hierarchical_allreduce_seconds, flat_ring_seconds and faster_by_size,
      // step for step; the command line takes 1000MB, 450GB/s, 2us: the same scalings as here.
      const n = v.nodes, g = v.gpus_per_node
      const nbytes = v.mbytes * 1e6
      const intra = v.nvlink_gbs * 1e9, inter = v.network_gbs * 1e9
      const intraLat = v.nvlink_latency_us * 1e-6, interLat = v.network_latency_us * 1e-6
      const call = v.call_us * 1e-6
      const ring = (p, m, bw, lat) => {
        if (p === 1) return 0
        const steps = 2 * (p - 1)
        return steps * lat + steps / p * m / bw
      }
      const twoLevel = m => {
        const inside = ring(g, m, intra, intraLat)  // reduce-scatter and all-gather in the node
        const across = ring(n, m / g, inter, interLat)  // each GPU's shard over its own port
        const calls = 2 * (g > 1) + (n > 1)
        return calls * call + inside + across
      }
      const flat = m => {
        const p = n * g
        if (p === 1) return 0
        if (n === 1) return call + ring(p, m, intra, intraLat)
        // g rings side by side, M/g each, paced by one port; of the 2(p-1) steps' latencies
        // 2(n-1) are the network's, the rest NVLink's (NCCL's nInterSteps, tuning.cc)
        const networkSteps = 2 * (n - 1)
        return call + (2 * (p - 1) - networkSteps) * intraLat + networkSteps * interLat + ring(p, m / g, inter, 0)
      }
      // Both are a fixed part plus a part in proportion to M: they cross at most once.
      const fixed = { two: twoLevel(0), flat: flat(0) }
      const perByte = { two: twoLevel(1) - fixed.two, flat: flat(1) - fixed.flat }
      const first = fixed.two < fixed.flat || (fixed.two === fixed.flat && perByte.two < perByte.flat) ? "two" : "flat"
      const other = first === "two" ? "flat" : "two"
      const crossover = perByte[other] >= perByte[first] ? null
        : (fixed[other] - fixed[first]) / (perByte[first] - perByte[other])
      const two_level_seconds = twoLevel(nbytes), flat_rings_seconds = flat(nbytes)
      return {
        two_level_seconds, flat_rings_seconds, crossover_bytes: crossover,
        faster: n * g === 1 ? "none" : two_level_seconds < flat_rings_seconds ? "two-level" : "flat rings",
      }
    },
    speed_of_light(v) {
      const qkv = v.hidden * (v.heads + 2 * v.kv_heads) * v.head_dim
      const per_layer = qkv + v.hidden * (v.heads * v.head_dim) + 3 * v.hidden * v.ffn
      const weights = v.layers * per_layer + v.vocab * v.hidden
      const kv_per_token = 2 * v.layers * v.kv_heads * v.head_dim * 2
      const norms = (2 * v.layers + 1) * v.hidden * 2
      const weight_gb = (weights * v.weight_bytes + norms) / 1e9
      const kv_gb = v.batch * v.context * kv_per_token / 1e9
      const step_gb = weight_gb + kv_gb
      const ms_per_step = step_gb / v.bandwidth_gbs * 1e3
      return {
        kv_kib_per_token: kv_per_token / 1024, weight_gb, kv_gb, step_gb, ms_per_step,
        tokens_per_s: v.batch / ms_per_step * 1e3, bound: weight_gb >= kv_gb ? "weights" : "kv cache",
      }
    },
  }

  // What a widget marks on its plot: x and y in the units its Marker (calculators.py) names,
  // the words beside the mark, and for a roofline the roof of the inputs (y as a function of x).
  const MARKERS = {
    launch_budget(v) {
      const kernels = v.layers * v.kernels_per_layer
      return { x: kernels, y: v.launch_us, text: `your input: ${format(kernels)} kernels × ${format(v.launch_us)} µs` }
    },
    roofline(v, r) {
      return {
        x: r.intensity, y: r.attainable_tflops,
        text: `your input: ${format(r.intensity)} FLOP/B, ${format(r.attainable_tflops)} TFLOP/s`,
        roof: x => Math.min(v.peak_tflops, x * v.bandwidth_gbs / 1e3), corner: r.ridge,
      }
    },
    ring_allreduce(v, r) {
      return { x: v.mbytes * 1e6, y: r.seconds, text: `your input: ${format(v.mbytes)} MB, ${format(r.seconds * 1e3)} ms` }
    },
  }

  const SVG = "http://www.w3.org/2000/svg"
  let clips = 0  // a page-wide count, for the ids of the markers' clip paths

  // An axis as the SVG was drawn: "log 0.1 10000 49.45 457.8" (scale, data limits, SVG coordinates).
  function axis(text) {
    const [kind, ...numbers] = text.split(" ")
    const [lo, hi, from, to] = numbers.map(Number)
    const log = kind === "log"
    const f = log ? Math.log : x => x
    const raw = v => from + (f(v) - f(lo)) / (f(hi) - f(lo)) * (to - from)
    return {
      from, to, lo, hi, log, raw,
      // The SVG coordinate of a value, clamped to the axis, and where it lies: -1 below, 1 above, 0 on it.
      at(value) {
        const place = log && !(value > 0) ? -1 : value < lo ? -1 : value > hi ? 1 : 0
        return { at: raw(place < 0 ? lo : place > 0 ? hi : value), place }
      },
    }
  }

  function element(parent, name, attrs) {
    const node = document.createElementNS(SVG, name)
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v))
    parent.appendChild(node)
    return node
  }

  // Draw one widget's mark on one plot's SVG (or clear it: mark null); true where it is on the axes.
  function markPlot(svg, name, mark, scale) {
    let group = svg.querySelector(`g.lab-plot__marker[data-for="${name}"]`)
    if (!group) {
      group = document.createElementNS(SVG, "g")
      group.setAttribute("class", "lab-plot__marker")
      group.setAttribute("data-for", name)
      group.setAttribute("aria-hidden", "true")
      group.dataset.clip = `lab-marker-clip-${++clips}`
      svg.appendChild(group)
    }
    group.replaceChildren()
    group.removeAttribute("data-x")
    group.removeAttribute("data-y")
    if (!mark || !svg.dataset.labX || !svg.dataset.labY || !svg.dataset.labYSi) {
      group.setAttribute("display", "none")
      return null
    }
    group.removeAttribute("display")
    const x = axis(svg.dataset.labX)
    const y = axis(svg.dataset.labY)
    const k = scale / Number(svg.dataset.labYSi)  // the widget's y unit in the plot's
    const left = Math.min(x.from, x.to), right = Math.max(x.from, x.to)
    const top = Math.min(y.from, y.to), bottom = Math.max(y.from, y.to)
    if (mark.roof) {  // two straight pieces (on log or linear axes): through the corner, clipped to the axes
      const xs = [x.lo, ...(mark.corner > x.lo && mark.corner < x.hi ? [mark.corner] : []), x.hi]
      const ys = xs.map(v => mark.roof(v) * k)
      if (ys.every(v => Number.isFinite(v) && (!y.log || v > 0))) {
        element(element(group, "clipPath", { id: group.dataset.clip }), "rect",
          { x: left, y: top, width: right - left, height: bottom - top })
        const d = xs.map((v, i) => `${i ? "L" : "M"} ${x.raw(v).toFixed(2)} ${y.raw(ys[i]).toFixed(2)}`).join(" ")
        element(group, "path", { class: "lab-plot__marker-roof", d, "clip-path": `url(#${group.dataset.clip})` })
      }
    }
    const px = x.at(mark.x), py = y.at(mark.y * k)
    const off = px.place !== 0 || py.place !== 0
    group.dataset.x = px.at.toFixed(3)
    group.dataset.y = py.at.toFixed(3)
    group.dataset.off = String(off)
    element(group, "line", { class: "lab-plot__marker-guide", x1: px.at, y1: bottom, x2: px.at, y2: py.at })
    element(group, "line", { class: "lab-plot__marker-guide", x1: left, y1: py.at, x2: px.at, y2: py.at })
    if (off) {  // an arrow at the edge, pointing the way the value lies off the axes
      const dx = Math.sign(x.to - x.from) * px.place, dy = Math.sign(y.to - y.from) * py.place
      const len = Math.hypot(dx, dy), ux = dx / len, uy = dy / len, s = 7
      const tip = [px.at + ux * s, py.at + uy * s]
      const base = [px.at - ux * s * 0.4, py.at - uy * s * 0.4]
      const wing = [-uy * s * 0.7, ux * s * 0.7]
      element(group, "path", {
        class: "lab-plot__marker-arrow",
        d: `M ${tip.join(" ")} L ${base[0] + wing[0]} ${base[1] + wing[1]} L ${base[0] - wing[0]} ${base[1] - wing[1]} Z`,
      })
    } else {
      element(group, "circle", { class: "lab-plot__marker-point", cx: px.at, cy: py.at, r: 4.5 })
    }
    const east = px.at < (left + right) / 2
    const above = py.at - top > 16
    const label = element(group, "text", {
      class: "lab-plot__marker-label", x: px.at + (east ? 9 : -9), y: above ? py.at - 9 : py.at + 17,
      "text-anchor": east ? "start" : "end",
    })
    label.textContent = off ? `${mark.text} (off the plot)` : mark.text
    return !off
  }

  // Mark a widget's result (null: none, for bad input) on its plot, and say so under the widget.
  function mark(widget, values, result) {
    const anchor = widget.dataset.plot
    const marker = MARKERS[widget.dataset.labCalculator]
    if (!anchor || !marker) return
    const note = widget.querySelector(".lab-calc__marked")
    const figures = [...document.querySelectorAll(`figure[data-lab-anchor="${anchor}"]`)]
    const m = result ? marker(values, result) : null
    const scale = Number(widget.dataset.markerYSi)
    let shown = null, onAxes = null
    for (const figure of figures) {
      const svg = figure.querySelector("svg.lab-plot__svg")
      if (!svg) continue
      const inside = markPlot(svg, widget.dataset.labCalculator, m, scale)
      if (inside !== null && (shown === null || (!shown.offsetParent && figure.offsetParent))) {
        shown = figure
        onAxes = inside
      }
    }
    if (!note) return
    if (!m || !shown) {
      note.hidden = true
      note.textContent = ""
      return
    }
    const number = shown.querySelector(".lab-plot__number")
    const where = shown.compareDocumentPosition(widget) & Node.DOCUMENT_POSITION_FOLLOWING ? "above" : "below"
    note.replaceChildren()
    const link = document.createElement("a")
    link.href = `#${shown.id}`
    link.textContent = number ? number.textContent : "the plot"
    note.append(onAxes ? "Marked on " : "Off the axes of ", link, ` ${where}`,
      onAxes ? `: ${m.text}.` : `: drawn at its edge, with an arrow (${m.text}).`)
    note.hidden = false
  }

  // A number as a reader writes it: 1000, 1,000, 1.5e9, 2^37, 8192**3, 4096*4096*2, (2^10)^3.
  // A tiny grammar, not eval: products of powers of plain numbers, with parentheses.
  const NUMBER = /^(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?(?:e[+-]?\d+)?|^\.\d+(?:e[+-]?\d+)?/i

  function evaluate(text) {
    let rest = text.replace(/[\s_]/g, "")
    function take(token) {
      if (rest.startsWith(token)) { rest = rest.slice(token.length); return true }
      return false
    }
    function atom() {
      if (take("(")) {
        const value = product()
        if (!take(")")) throw new SyntaxError("unclosed parenthesis")
        return value
      }
      const m = NUMBER.exec(rest)
      if (!m) throw new SyntaxError("no number")
      rest = rest.slice(m[0].length)
      return Number(m[0].replace(/,/g, ""))
    }
    function power() {
      const base = atom()
      return take("**") || take("^") ? base ** power() : base  // right-associative, as in Python
    }
    function product() {
      let value = power()
      while (!rest.startsWith("**") && (take("*") || take("×"))) value *= power()
      return value
    }
    const negative = take("-")
    if (!negative) take("+")
    const value = product()
    if (rest !== "") throw new SyntaxError("trailing text")
    return negative ? -value : value
  }

  // The value of one input, or a message saying what is wrong with it.
  function parse(input) {
    const label = input.closest(".lab-calc__field").querySelector(".lab-calc__label").textContent
    const text = input.value.trim()
    const kind = input.dataset.kind
    const min = Number(input.dataset.min)
    const strict = input.dataset.strict === "true"
    const rule = strict ? `greater than ${min}` : `at least ${min}`
    if (text === "") return { error: `${label}: enter a number` }
    let value
    try {
      value = evaluate(text)
    } catch (e) {
      return { error: `${label}: “${text}” is not ${kind === "int" ? "a whole number" : "a number"}` }
    }
    if (!Number.isFinite(value)) return { error: `${label}: “${text}” is too large` }
    if (kind === "int" && !Number.isInteger(value)) return { error: `${label}: “${text}” is not a whole number` }
    if (kind === "int" && !Number.isSafeInteger(value)) return { error: `${label}: “${text}” is too large` }
    if (strict ? !(value > min) : !(value >= min)) return { error: `${label}: must be ${rule}` }
    return { value }
  }

  function format(x) {
    if (x === 0) return "0"
    const a = Math.abs(x)
    if (a >= 1e6 || a < 1e-3) {
      const [m, e] = x.toExponential(2).split("e")
      return `${m} × 10${e.replace("+", "").replace(/-/g, "⁻").replace(/\d/g, d => "⁰¹²³⁴⁵⁶⁷⁸⁹"[d])}`
    }
    return Number(x.toPrecision(3)).toLocaleString("en-US", { maximumFractionDigits: 6 })
  }

  function show(output, raw) {
    if (raw === null) {
      output.dataset.value = "null"
      output.textContent = "—"
      return
    }
    output.dataset.value = String(raw)
    if (output.dataset.percent === "true") {
      output.textContent = `${format(raw * 100)}%`
      return
    }
    let unit = output.dataset.unit, scale = Number(output.dataset.scale)
    if (output.dataset.ladder) {  // the largest unit the value reaches (the smallest for tiny values)
      const ladder = JSON.parse(output.dataset.ladder)
      ;[unit, scale] = ladder.filter(([, s]) => Math.abs(raw) >= s).pop() || ladder[0]
    }
    output.textContent = `${format(raw / scale)}${unit ? "\u00a0" + unit : ""}`
  }

  function clear(widget) {
    for (const output of widget.querySelectorAll("output[data-key]")) {
      delete output.dataset.value
      output.textContent = "—"
    }
  }

  function update(widget) {
    const model = MODELS[widget.dataset.labCalculator]
    const error = widget.querySelector(".lab-calc__error")
    const values = {}
    const problems = []
    for (const input of widget.querySelectorAll("input[name]")) {
      const parsed = parse(input)
      input.setAttribute("aria-invalid", parsed.error ? "true" : "false")
      if (parsed.error) problems.push(parsed.error)
      else values[input.name] = parsed.value
    }
    let result = null
    if (!problems.length) {
      result = model(values)
      const bad = Object.entries(result).find(([, x]) => typeof x === "number" && !Number.isFinite(x))
      if (bad) {
        problems.push("These inputs give a result too large to compute: try smaller numbers.")
        result = null
      }
    }
    widget.dataset.state = result ? "ok" : "error"
    mark(widget, values, result)
    if (!result) {
      error.textContent = problems.join(" · ")
      error.hidden = false
      clear(widget)
      return
    }
    error.hidden = true
    error.textContent = ""
    for (const output of widget.querySelectorAll(".lab-calc__outputs output[data-key]")) {
      show(output, result[output.dataset.key])
    }
    const bound = widget.querySelector(".lab-calc__bound output")
    const label = result[widget.dataset.labelKey]
    bound.dataset.value = label
    bound.textContent = bound.getAttribute(`data-label-${label.replace(/ /g, "-")}`) || label
  }

  // The inputs a reader changed live in the page's address (?launch_budget.layers=64), so a
  // link shares them; a reload or a link restores them.
  function remember(widget) {
    const url = new URL(window.location.href)
    for (const input of widget.querySelectorAll("input[name]")) {
      const key = `${widget.dataset.labCalculator}.${input.name}`
      if (input.value.trim() === input.dataset.default) url.searchParams.delete(key)
      else url.searchParams.set(key, input.value.trim())
    }
    window.history.replaceState(window.history.state, "", url)
  }

  function restore(widget) {
    const params = new URL(window.location.href).searchParams
    for (const input of widget.querySelectorAll("input[name]")) {
      const saved = params.get(`${widget.dataset.labCalculator}.${input.name}`)
      if (saved !== null) input.value = saved
    }
  }

  function resetButton(widget, form) {
    const measured = widget.querySelector(".lab-calc__source")
    const button = document.createElement("button")
    button.type = "button"
    button.className = "lab-calc__reset"
    button.textContent = measured ? "Reset to the measured values" : "Reset to the page's values"
    button.addEventListener("click", () => {
      for (const input of widget.querySelectorAll("input[name]")) input.value = input.dataset.default
      update(widget)
      remember(widget)
      showPresets(widget)
    })
    form.appendChild(button)
  }

  // Presets: a choice fills its inputs; after any change, each list shows the choice whose
  // values the inputs hold, or "as typed".
  function choosePreset(widget, select) {
    const option = select.selectedOptions[0]
    if (!option || !option.dataset.values) return
    for (const [name, value] of Object.entries(JSON.parse(option.dataset.values))) {
      const input = widget.querySelector(`input[name="${name}"]`)
      if (input) input.value = value
    }
  }

  function showPresets(widget) {
    for (const select of widget.querySelectorAll("select[data-preset]")) {
      const inputs = name => widget.querySelector(`input[name="${name}"]`)
      const match = [...select.options].find(o => o.dataset.values &&
        Object.entries(JSON.parse(o.dataset.values)).every(([k, v]) => inputs(k) && inputs(k).value.trim() === v))
      select.value = match ? match.value : ""
    }
    // A start value's link names the record it came from: shown only while the input holds it.
    for (const input of widget.querySelectorAll("input[name]")) {
      const source = input.closest(".lab-calc__field").querySelector(".lab-calc__source")
      if (source) source.hidden = input.value.trim() !== input.dataset.default
    }
  }

  function setup(root) {
    for (const widget of root.querySelectorAll("[data-lab-calculator]")) {
      if (widget.dataset.ready || !MODELS[widget.dataset.labCalculator]) continue
      widget.dataset.ready = "true"
      const form = widget.querySelector("form")
      form.addEventListener("submit", event => event.preventDefault())
      form.addEventListener("input", event => {
        if (event.target.matches("select[data-preset]")) choosePreset(widget, event.target)
        update(widget)
        remember(widget)
        showPresets(widget)
      })
      resetButton(widget, form)
      restore(widget)
      update(widget)
      showPresets(widget)
    }
  }

  if (typeof document$ !== "undefined") document$.subscribe(({ body }) => setup(body))
  else if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", () => setup(document))
  else setup(document)
})()
