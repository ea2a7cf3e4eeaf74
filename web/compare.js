// quantscope compare view: the open repo (A) against another (B), read from
// headers by the engine (`quantscope.compare`, the same document as
// `quantscope diff --json`): bytes, parameters and bits per weight by kind and
// format, with bars, the totals with and without extra layers, and the
// modules whose stored format changed. Uses el, bytes, count, int,
// formatColor, endpoint, engine and state from app.js.
"use strict";

const Compare = (() => {
  let shown = ""; // the A|B pair on screen
  let asked = 0;

  // Decimal units, as model cards and ledgers use, picked for the larger repo.
  let gb = n => (n / 1e9).toFixed(2) + " GB";
  function unitFor(n) {
    const [u, div] = n >= 1e9 ? ["GB", 1e9] : n >= 1e6 ? ["MB", 1e6] : ["kB", 1e3];
    gb = v => (v / div).toFixed(2) + " " + u;
  }
  const bpw = (b, p) => p ? (8 * b / p).toFixed(2) : "–";
  const ratio = (a, b) => a ? (b / a).toFixed(2) + "×" : (b ? "new" : "");

  async function show(s) {
    const card = document.getElementById("compare-card");
    const body = document.getElementById("compare-body");
    if (!s.compare) { card.hidden = true; shown = ""; return; }
    const key = s.source + "@" + (s.rev || "") + "|" + s.compare;
    if (key === shown && !card.hidden) return;
    shown = key;
    const my = ++asked;
    card.hidden = false;
    delete card.dataset.ready;
    body.replaceChildren(el("p", { class: "small", text: `reading the headers of ${s.compare}…` }));
    let d;
    try {
      const qs = await engine;
      d = JSON.parse(await qs.compare(s.compare, { endpoint: endpoint(), token: tokenFor(s.compare, endpoint()), tokenHosts: tokenHosts() }));
    } catch (err) {
      if (my !== asked) return;
      body.replaceChildren(el("p", { class: "error-line", id: "compare-error", text: `cannot read ${s.compare}: ${err.message || err}` }));
      card.dataset.ready = "error";
      return;
    }
    if (my !== asked) return;
    render(d);
    card.dataset.ready = key;
  }

  // bar draws one side's bytes of a row, split by format, scaled to max.
  function bar(formats, max, side) {
    const b = el("div", { class: "cmp-bar cmp-" + side });
    for (const [f, n] of Object.entries(formats).sort((x, y) => y[1] - x[1])) {
      if (!n) continue;
      b.append(el("span", { style: `width:${(100 * n / max).toFixed(3)}%;background:${formatColor(f)}`, title: `${side.toUpperCase()}: ${f} ${gb(n)}` }));
    }
    return b;
  }

  function render(d) {
    unitFor(Math.max(d.a.bytes, d.b.bytes));
    const body = document.getElementById("compare-body");
    const sides = el("dl", { class: "kv" });
    for (const [tag, s] of [["A", d.a], ["B", d.b]]) {
      sides.append(el("dt", { text: tag }), el("dd", { id: "cmp-side-" + tag.toLowerCase(), data: { bytes: s.bytes, parameters: s.parameters } },
        el("code", { text: s.source }), ` · ${gb(s.bytes)} · ${count(s.parameters)} parameters · ${s.bits_per_weight.toFixed(2)} bits/weight (${s.bits_per_weight_without_extra_layers.toFixed(2)} without extra layers)`));
    }
    const max = Math.max(1, ...d.kinds.flatMap(k => [k.a_bytes, k.b_bytes]));
    const t = el("table", { class: "small cmp", id: "compare-table" });
    t.append(el("tr", {}, ...["kind", "parameters", "A", "bits", "B", "bits", "change", "×", "A · B by format"].map((h, i) => el("th", { class: i && i < 8 ? "num" : "", text: h }))));
    const row = (name, ap, bp, ab, bb, af, bf, cls) => {
      const tr = el("tr", { class: cls || "", data: { kind: name, aBytes: ab, bBytes: bb } },
        el("td", { text: name }), el("td", { class: "num", text: count(Math.max(ap, bp)) + (ap !== bp ? " → " + count(bp) : "") }),
        el("td", { class: "num", text: gb(ab) }), el("td", { class: "num", text: bpw(ab, ap) }),
        el("td", { class: "num", text: gb(bb) }), el("td", { class: "num", text: bpw(bb, bp) }),
        el("td", { class: "num", text: (bb >= ab ? "+" : "−") + gb(Math.abs(bb - ab)) }), el("td", { class: "num", text: ratio(ab, bb) }),
        el("td", { class: "cmp-bars" }, af ? bar(af, max, "a") : null, bf ? bar(bf, max, "b") : null,
          af ? el("div", { class: "cmp-fmt", text: fmtList(af) + " → " + fmtList(bf) }) : null));
      t.append(tr);
    };
    for (const k of d.kinds) row(k.kind, k.a_parameters, k.b_parameters, k.a_bytes, k.b_bytes, k.a_formats, k.b_formats);
    row("total", d.a.parameters, d.b.parameters, d.a.bytes, d.b.bytes, null, null, "cmp-total");
    if (d.a.bytes !== d.a.bytes_without_extra_layers || d.b.bytes !== d.b.bytes_without_extra_layers) {
      row("without extra layers", d.a.parameters_without_extra_layers, d.b.parameters_without_extra_layers,
        d.a.bytes_without_extra_layers, d.b.bytes_without_extra_layers, null, null, "cmp-total");
    }
    const n = d.changed.reduce((a, c) => a + (c.count || 1), 0);
    const list = el("ul", { class: "cmp-changed", id: "compare-changed" });
    for (const c of d.changed) {
      list.append(el("li", { data: { module: c.module, count: c.count || 1 } }, el("code", { text: c.module }), ` ${c.a_format} → ${c.b_format}`,
        c.count ? el("span", { class: "count", text: ` × ${int(c.count)}` }) : null));
    }
    body.replaceChildren(sides, t, el("h3", { text: n ? `${int(n)} module(s) changed their stored format` : "no module changed its stored format" }), list);
  }

  function fmtList(m) {
    return Object.entries(m || {}).sort((x, y) => y[1] - x[1]).map(([f, n]) => `${f} ${gb(n)}`).join(" + ") || "none";
  }

  return { show };
})();
