// quantscope layer map: the inventory's layers[] as a grid (SVG), one row per
// decoder layer plus embeddings, extra layers (MTP), head and the rest, one
// column per slot; each cell coloured by stored format (a mixed cell split by
// bytes), labelled on hover, and a click filters the module table to the
// cell's modules. Uses formatColor, bytes and count from app.js.
"use strict";

const LayerMap = (() => {
  const SLOTS = ["q", "k", "v", "kv", "qkv", "o", "attn", "gate", "up", "gate_up", "down", "router", "shared", "experts", "norm", "embedding", "head", "other"];
  const HEAD = { embedding: "embed", experts: "experts", shared: "shared", router: "router" };
  const NS = "http://www.w3.org/2000/svg";
  const CW = 58, GAP = 1, LABEL = 96, TOP = 20;
  let RH = 11; // 11 px a row for 61 layers and more, taller for fewer

  function svgEl(tag, attrs) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }

  function rowLabel(r) {
    if (r.row === "embedding" || r.row === "head" || r.row === "other") return r.row;
    const n = String(r.layer);
    if (r.stack) return r.stack.split(".").slice(-2).join(".") + " " + n;
    return r.row === "extra_layer" ? n + " (extra)" : n;
  }
  const rowName = r => (r.row === "embedding" || r.row === "head" || r.row === "other") ? r.row : (r.stack ? r.stack + " " : "") + "layer " + r.layer + (r.row === "extra_layer" ? " (extra: past num_hidden_layers)" : "");

  function describe(r, c) {
    const mix = c.formats.map(f => `${f.format} ${(100 * f.modules / c.modules).toFixed(f.modules === c.modules ? 0 : 1)}% (${bytes(f.bytes)})`).join(", ");
    const who = c.modules + (c.modules === 1 ? " module" : " modules") + (c.experts ? ` (${c.experts} experts)` : "");
    return [`${rowName(r)} · ${c.slot}`, `${who}: ${mix}`,
      `${bytes(c.bytes)} · ${count(c.parameters)} parameters · ${c.parameters ? c.bits_per_weight.toFixed(2) + " bits/weight" : "no parameters"}`];
  }

  function filterTo(c) {
    const t = document.getElementById("show-tensors");
    if (t.checked) { t.checked = false; t.dispatchEvent(new Event("change")); }
    const f = document.getElementById("filter");
    f.value = "/" + c.pattern + "/";
    f.dispatchEvent(new Event("input"));
    document.getElementById("modules").scrollIntoView({ block: "start" });
  }

  function render(inv) {
    const card = document.getElementById("layermap");
    const body = document.getElementById("layermap-body");
    const rows = inv.layers || [];
    card.hidden = !rows.length;
    if (!rows.length) { body.replaceChildren(); return; }
    RH = rows.length > 40 ? 11 : 16;
    const used = new Set(rows.flatMap(r => r.cells.map(c => c.slot)));
    const slots = SLOTS.filter(s => used.has(s));
    const w = LABEL + slots.length * CW, h = TOP + rows.length * RH;
    const svg = svgEl("svg", { width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img", id: "layermap-svg",
      "aria-label": `Layer map: ${rows.length} rows by ${slots.length} slots, coloured by stored format` });
    slots.forEach((s, j) => {
      const t = svgEl("text", { x: LABEL + j * CW + CW / 2, y: 13, "text-anchor": "middle", class: "lm-head" });
      t.textContent = HEAD[s] || s;
      svg.append(t);
    });
    const formats = new Map();
    rows.forEach((r, i) => {
      const y = TOP + i * RH;
      const label = svgEl("text", { x: LABEL - 6, y: y + RH - 2, "text-anchor": "end", class: "lm-label" + (r.row === "extra_layer" ? " lm-extra" : "") });
      label.textContent = rowLabel(r);
      svg.append(label);
      for (const c of r.cells) {
        const j = slots.indexOf(c.slot);
        const g = svgEl("g", { class: "lm-cell", tabindex: "0", "data-row": r.row, "data-layer": r.layer, "data-slot": c.slot, "data-format": c.format });
        let x = LABEL + j * CW + GAP;
        const width = CW - 2 * GAP;
        const total = c.formats.reduce((a, f) => a + f.bytes, 0) || 1;
        c.formats.forEach((f, k) => {
          const fw = k === c.formats.length - 1 ? LABEL + j * CW + GAP + width - x : Math.max(1, width * f.bytes / total);
          g.append(svgEl("rect", { x: x.toFixed(2), y: y + GAP, width: fw.toFixed(2), height: RH - 2 * GAP, rx: 1.5, style: "fill:" + formatColor(f.format) }));
          x += fw;
          formats.set(f.format, (formats.get(f.format) || 0) + f.bytes);
        });
        const title = svgEl("title");
        title.textContent = describe(r, c).join("\n");
        g.append(title);
        g.addEventListener("mouseenter", e => tip(e, r, c));
        g.addEventListener("mousemove", e => place(e));
        g.addEventListener("mouseleave", () => { document.getElementById("layermap-tip").hidden = true; });
        g.addEventListener("click", () => filterTo(c));
        g.addEventListener("keydown", e => { if (e.key === "Enter") filterTo(c); });
        svg.append(g);
      }
    });
    const legend = el("div", { class: "legend", id: "layermap-legend" });
    for (const [f, n] of [...formats].sort((a, b) => b[1] - a[1])) {
      legend.append(el("span", { data: { format: f } }, el("i", { style: "background:" + formatColor(f) }), `${f} ${bytes(n)}`));
    }
    const note = el("p", { class: "small", text: "One row per decoder layer (extra layers such as an MTP layer are marked), columns by slot (MLA's kv_a / kv_b under kv, q_a / q_b under q); hover for bytes, parameters and bits per weight, click to list the cell's modules." });
    body.replaceChildren(legend, el("div", { class: "lm-scroll" }, svg), el("div", { id: "layermap-tip", class: "lm-tip", hidden: "" }), note);
  }

  function tip(e, r, c) {
    const t = document.getElementById("layermap-tip");
    t.replaceChildren(...describe(r, c).map((line, i) => el(i ? "div" : "strong", { text: line })));
    t.dataset.slot = c.slot;
    t.dataset.layer = r.layer;
    t.hidden = false;
    place(e);
  }
  function place(e) {
    const t = document.getElementById("layermap-tip");
    const box = document.getElementById("layermap").getBoundingClientRect();
    t.style.left = (e.clientX - box.left + 14) + "px";
    t.style.top = (e.clientY - box.top + 14) + "px";
  }

  return { render };
})();
