// quantscope heavy operations: a module panel's "full statistics", "recipe
// report" and "quantize…", run as jobs on a connected companion
// (web/companion.js, docs/protocol.md). Without a companion the buttons are
// hidden and a one-line hint says how to start one. app.js calls
// Heavy.open(module, source, revision) when it opens a module's panel.
"use strict";

const Heavy = (() => {
  const $ = id => document.getElementById(id);
  const mk = (tag, attrs = {}, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "text") e.textContent = v;
      else if (k === "class") e.className = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else if (k === "data") Object.assign(e.dataset, v);
      else e.setAttribute(k, v);
    }
    for (const k of kids) if (k != null) e.append(k);
    return e;
  };
  const nf = new Intl.NumberFormat("en-US");
  const pct = v => v == null ? "—" : (100 * v).toPrecision(3) + " %";
  const num = v => v == null ? "—" : Plots.fmt(v);
  // decimal units, as the rest of the page writes sizes
  const size = n => n >= 1e9 ? (n / 1e9).toFixed(2) + " GB" : n >= 1e6 ? (n / 1e6).toFixed(1) + " MB" : n >= 1000 ? (n / 1000).toFixed(1) + " kB" : n + " B";

  // The current module and the running job (one at a time per panel).
  const st = { module: "", source: "", rev: "", info: null, job: null, url: "" };

  function build() {
    const root = $("heavy");
    if (!root || root.dataset.built) return;
    root.dataset.built = "1";
    const opt = (v, t) => mk("option", { value: v, text: t || v });
    root.append(
      mk("h3", { text: "On the companion" }),
      mk("p", { id: "heavy-hint", class: "hint" },
        "Full statistics, the recipe report and quantize… run on a companion: start ", mk("code", { text: "quantscope serve" }),
        " and open the URL it prints (its token included), or give its address and token in Settings."),
      mk("div", { id: "heavy-actions", class: "tools", hidden: "" },
        mk("button", { id: "heavy-stats", type: "button", text: "full statistics", onclick: runStats }),
        mk("button", { id: "heavy-report", type: "button", text: "recipe report", onclick: runReport }),
        mk("button", { id: "heavy-quantize", type: "button", class: "ghost", text: "quantize…", onclick: () => { $("quantize-form").hidden = !$("quantize-form").hidden; } })),
      mk("form", { id: "quantize-form", class: "tools qform", hidden: "", onsubmit: e => { e.preventDefault(); runQuantize(); } },
        mk("label", { for: "q-format", text: "format" }),
        mk("select", { id: "q-format", onchange: formFields }, opt("nvfp4"), opt("fp8_e4m3"), opt("fp8_e5m2")),
        mk("span", { id: "q-recipe-f" }, mk("label", { for: "q-recipe", text: "recipe " }),
          mk("select", { id: "q-recipe" }, opt("max"), opt("mse"), opt("four_six"), opt("least_squares"))),
        mk("span", { id: "q-scale-f", hidden: "" }, mk("label", { for: "q-scale", text: "scale " }),
          mk("select", { id: "q-scale", onchange: formFields }, opt("row"), opt("tensor"), opt("block"))),
        mk("span", { id: "q-block-f", hidden: "" }, mk("label", { for: "q-block", text: "block " }),
          mk("input", { id: "q-block", type: "text", value: "128,128", size: "8", "aria-label": "block rows,cols" })),
        mk("label", { for: "q-naming", text: "naming" }),
        mk("select", { id: "q-naming" }, opt("modelopt"), opt("compressed-tensors"), opt("gptqmodel")),
        mk("label", { for: "q-path", text: "write to" }),
        mk("input", { id: "q-path", type: "text", placeholder: "(download) or a path under the companion's --out-dir", size: "28", autocomplete: "off", spellcheck: "false" }),
        mk("button", { id: "q-run", type: "submit", text: "Quantize" })),
      mk("div", { id: "heavy-job", class: "tools", hidden: "" },
        mk("div", { id: "heavy-progress", class: "progress", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": "100" },
          mk("div", { class: "fill" }), mk("span", { class: "label" })),
        mk("button", { id: "heavy-cancel", type: "button", class: "ghost", text: "Cancel", onclick: cancel })),
      mk("p", { id: "heavy-status", class: "small", role: "status" }),
      mk("div", { id: "heavy-out" }));
    formFields();
    window.addEventListener("companion", avail);
    avail();
  }

  // formFields shows the options of the chosen format, with its default naming.
  function formFields(e) {
    const fp8 = $("q-format").value !== "nvfp4";
    $("q-recipe-f").hidden = fp8;
    $("q-scale-f").hidden = !fp8;
    $("q-block-f").hidden = !fp8 || $("q-scale").value !== "block";
    $("q-naming").querySelector('option[value="gptqmodel"]').disabled = !fp8;
    if (e && e.target === $("q-format")) $("q-naming").value = fp8 ? "gptqmodel" : "modelopt";
  }

  function avail() {
    const on = !!(window.companion && companion.connected());
    if (!$("heavy-actions")) return;
    $("heavy-actions").hidden = !on;
    $("heavy-hint").hidden = on;
    if (!on) $("quantize-form").hidden = true;
    // The report and quantize take a 2-D [out, in] weight; a module with no
    // weight (format none) has nothing to run on.
    const none = st.info && st.info.format === "none";
    const flat = none || (st.info && st.info.weight_shape && st.info.weight_shape.length !== 2);
    for (const b of ["heavy-stats", "heavy-report", "heavy-quantize", "q-run"]) {
      $(b).disabled = !on || !!st.job || (b === "heavy-stats" ? none : flat);
      $(b).title = $(b).disabled && on && !st.job ? (none ? "this module has no weight" : "needs a 2-D [out, in] weight") : "";
    }
  }

  // open is called with each module the panel opens: its name, the page's
  // source and revision, and its inventory entry (format, weight_shape).
  function open(module, source, rev, info) {
    build();
    if (st.job && st.module !== module) cancel();
    st.module = module; st.source = source; st.rev = rev || ""; st.info = info || null;
    $("heavy-out").replaceChildren();
    $("heavy-status").textContent = "";
    delete $("heavy").dataset.state;
    avail();
  }

  // run submits op for the open module, showing its progress with a Cancel
  // button; it resolves with the result, or null when it failed or was
  // cancelled (the status line says which, as the command line would).
  async function run(op, params, what) {
    if (st.job || !companion.connected()) return null;
    const module = st.module;
    $("heavy-out").replaceChildren();
    const h = $("heavy");
    h.dataset.state = "running";
    h.dataset.op = op;
    $("heavy-job").hidden = false;
    setBar(0, what + ": starting…");
    $("heavy-status").textContent = "";
    const p = companion.submit(op, st.source, st.rev, module, params, m => {
      if (m.phase === "headers" || m.phase === "waiting") {
        setBar(m.total ? m.done / m.total : 0, m.phase === "waiting" ? "waiting for another job's read of the headers" : `reading headers: ${m.done}/${m.total || "?"} shards`);
      } else {
        const f = m.total ? m.done / m.total : 0;
        setBar(f, `${what}: ${m.total ? (100 * f).toFixed(0) + " %" : "running"} · ${(m.elapsed_ms / 1000).toFixed(1)} s`);
      }
      if (m.note) $("heavy-status").textContent = m.note;
    });
    st.job = p.id;
    h.dataset.job = p.id;
    avail();
    try {
      const r = await p;
      if (st.module !== module) return null;
      h.dataset.state = "done";
      $("heavy-status").textContent = `${what}: done in ${(r.elapsedMS / 1000).toFixed(2)} s${r.note ? " · " + r.note : ""}`;
      return r;
    } catch (err) {
      h.dataset.state = err.code === "cancelled" ? "cancelled" : "error";
      $("heavy-status").textContent = err.code === "cancelled" ? `${what}: cancelled` : errorLine(err);
      return null;
    } finally {
      if (st.job === p.id) st.job = null;
      $("heavy-job").hidden = true;
      avail();
    }
  }

  // errorLine prints a job's error as the command line's `error:` line, with
  // the rule, tensor, module and file it names.
  function errorLine(err) {
    let s = "error: " + err.message;
    const extra = [];
    if (err.rule && !s.includes(err.rule)) extra.push("rule " + err.rule);
    if (err.tensor && !s.includes(err.tensor)) extra.push("tensor " + err.tensor);
    if (err.module && !s.includes(err.module)) extra.push("module " + err.module);
    if (err.file && !s.includes(err.file)) extra.push("file " + err.file);
    if (err.status) extra.push("HTTP " + err.status);
    return s + (extra.length ? " (" + extra.join(", ") + ")" : "");
  }

  function setBar(f, label) {
    const b = $("heavy-progress");
    const v = Math.max(0, Math.min(1, f || 0));
    b.querySelector(".fill").style.width = (100 * v).toFixed(1) + "%";
    b.querySelector(".label").textContent = label;
    b.setAttribute("aria-valuenow", (100 * v).toFixed(0));
  }

  function cancel() {
    if (st.job) companion.cancel(st.job);
  }

  // ---- full statistics ----
  async function runStats() {
    const r = await run("stats", {}, "full statistics");
    if (!r) return;
    const s = r.json;
    const counts = Array.from(r.arrays["histogram.counts"].data, Number);
    const scounts = Array.from(r.arrays["scale_histogram.counts"].data, Number);
    const rows = [
      ["min", num(s.min), s.min], ["max", num(s.max), s.max], ["mean", num(s.mean), s.mean], ["std", num(s.std), s.std],
      ["nan", nf.format(s.nan), s.nan], ["inf", nf.format(s.inf), s.inf],
      ["at_max_fraction", pct(s.at_max_fraction), s.at_max_fraction],
      ["scale_at_max_fraction", pct(s.scale_at_max_fraction), s.scale_at_max_fraction],
      ["scale_subnormal_fraction", pct(s.scale_subnormal_fraction), s.scale_subnormal_fraction],
      ["bytes_read", size(s.bytes_read), s.bytes_read], ["seconds", s.seconds.toFixed(2) + " s", s.seconds],
    ];
    const label = { at_max_fraction: "values at the format's max", scale_at_max_fraction: "scales at E4M3 max", scale_subnormal_fraction: "scales subnormal", bytes_read: "bytes read" };
    const table = mk("table", { id: "stats-table", class: "kv small" },
      ...rows.map(([k, text, v]) => mk("tr", {}, mk("th", { text: label[k] || k }), mk("td", { class: "num", text, data: { key: k, v: JSON.stringify(v) } }))));
    const log = mk("input", { id: "stats-log", type: "checkbox", checked: "" });
    const hc = mk("canvas", { id: "stats-hist", width: "420", height: "170", data: { counts: counts.join(",") } });
    const sc = mk("canvas", { id: "stats-scales", width: "420", height: "170", data: { counts: scounts.join(",") } });
    const e = s.histogram.edges, se = s.scale_histogram.edges;
    const draw = () => Plots.bars(hc, counts, { log: log.checked, axis: [num(e[0]), num(e[e.length - 1])] });
    log.addEventListener("change", draw);
    const figs = [mk("figure", {}, hc, mk("figcaption", {}, `values of all ${nf.format(s.shape[0] * s.shape[1])} weights (${counts.length} bins) `,
      mk("label", { class: "inline" }, log, " log count")))];
    if (scounts.length) {
      const lg = se.map(x => Math.round(Math.log2(x)));
      figs.push(mk("figure", {}, sc, mk("figcaption", { text: `block scales on a log2 axis (${nf.format(s.scales)} scales${s.scale_zero ? ", " + nf.format(s.scale_zero) + " zero" : ""})` })));
      requestAnimationFrame(() => Plots.bars(sc, scounts, { labels: lg.slice(0, -1).map(k => "2^" + k), log: true }));
    }
    $("heavy-out").replaceChildren(mk("div", { class: "heavy-stats" }, table, mk("div", { class: "plots" }, ...figs)),
      mk("p", { class: "small", text: `${s.name} · ${s.format} · [${s.shape.join(" × ")}] · ${s.backend}` }));
    requestAnimationFrame(draw);
  }

  // ---- recipe report ----
  async function runReport() {
    const r = await run("report", { format: "nvfp4" }, "recipe report");
    if (!r) return;
    const rep = r.json;
    // The bars start 1 dB under the worst recipe, so that a fraction of a dB shows.
    const finite = rep.recipes.map(x => x.sqnr_db).filter(v => v != null);
    const best = finite.length ? Math.max(...finite) : 1, lo = finite.length ? Math.floor(Math.min(...finite)) - 1 : 0;
    // An exact recipe (no error at all: SQNR infinite) takes the whole bar,
    // drawn apart; the finite ones then reach 85% at most, so 33 dB never
    // looks the same as exact.
    const exact = rep.recipes.some(x => x.sqnr_db == null), top = exact ? 85 : 100;
    const table = mk("table", { id: "report-table", class: "small rtable" },
      mk("tr", {}, ...["recipe", "MSE", "SQNR (dB)", "", "max |err|", "blocks ≠ max"].map(h => mk("th", { text: h }))),
      ...rep.recipes.map(x => mk("tr", { data: { recipe: x.recipe } },
        mk("th", { text: x.recipe }),
        mk("td", { class: "num", text: num(x.mse), data: { key: "mse", v: JSON.stringify(x.mse) } }),
        mk("td", { class: "num", text: x.sqnr_db == null ? "exact" : x.sqnr_db.toFixed(2), data: { key: "sqnr_db", v: JSON.stringify(x.sqnr_db) } }),
        mk("td", { class: "barcell" }, mk("div", { class: "sqnr-bar" + (x.sqnr_db == null ? " exact" : ""), title: x.sqnr_db == null ? "exact: no error" : x.sqnr_db.toFixed(2) + " dB",
          style: `width:${x.sqnr_db == null ? 100 : Math.max(2, top * (x.sqnr_db - lo) / (best - lo || 1)).toFixed(1)}%` })),
        mk("td", { class: "num", text: num(x.max_abs_err), data: { key: "max_abs_err", v: JSON.stringify(x.max_abs_err) } }),
        mk("td", { class: "num", text: pct(x.blocks_changed), data: { key: "blocks_changed", v: JSON.stringify(x.blocks_changed) } }))));
    const maps = [];
    for (const name of ["mse", "least_squares", "four_six"]) {
      const a = r.arrays["blocks_changed." + name];
      if (!a) continue;
      const [mr, mc] = a.shape;
      const cv = mk("canvas", { class: "blockmap", id: "blockmap-" + name, data: { rows: mr, cols: mc } });
      const down = mr < rep.shape[0] || mc < rep.shape[1] / 16;
      const cell = down ? ` (downsampled: a cell is ${(rep.shape[0] / mr).toFixed(1)} rows × ${(rep.shape[1] / 16 / mc).toFixed(1)} blocks, its shade the share that differ)` : "";
      const none = a.data.every(v => v === 0);
      maps.push(mk("figure", { style: `max-width:${mapWidth(mc) + 2}px` }, cv, mk("figcaption", { text: none ?
        `${name}: no block's scale code differs from max's (the map is blank)` :
        `${name}: where its scale code differs from max's — ${mr} rows ↓ × ${mc} 16-blocks →${cell}` })));
      requestAnimationFrame(() => blockMap(cv, a.data, mr, mc));
    }
    $("heavy-out").replaceChildren(table, mk("p", { class: "small", text: `NVFP4 recipes on ${rep.module} [${rep.shape.join(" × ")}]; higher SQNR is better; ${exact ? "an exact recipe's bar is full, and the others" : "the bars"} run from ${lo} dB to the best finite, ${best.toFixed(2)} dB${exact ? ", at 85%" : ""}.` }),
      mk("div", { class: "plots" }, ...maps));
  }

  // blockMap paints a [rows, cols] 0..255 map: each cell one block (or a
  // cell of several), shaded by its share; aspect kept within sane bounds.
  const mapWidth = cols => Math.min(240, Math.max(120, cols * 4));
  function blockMap(canvas, data, rows, cols) {
    const w = mapWidth(cols);
    const h = Math.min(260, Math.max(40, Math.round(w * rows / cols)));
    canvas.style.width = w + "px";
    canvas.style.height = h + "px";
    const img = new ImageData(cols, rows);
    const acc = getComputedStyle(document.documentElement).getPropertyValue("--accent").trim() || "#3d5afe";
    const m = /^#?([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(acc) || [0, "3d", "5a", "fe"];
    const [R, G, B] = [1, 2, 3].map(i => parseInt(m[i], 16));
    let marked = 0;
    for (let i = 0; i < rows * cols; i++) {
      const v = data[i];
      if (v) marked++;
      img.data[4 * i] = R; img.data[4 * i + 1] = G; img.data[4 * i + 2] = B;
      img.data[4 * i + 3] = v ? 40 + Math.round(215 * v / 255) : 14;
    }
    canvas.dataset.marked = String(marked);
    const off = document.createElement("canvas");
    off.width = cols; off.height = rows;
    off.getContext("2d").putImageData(img, 0, 0);
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
    const g = canvas.getContext("2d");
    g.imageSmoothingEnabled = false;
    g.drawImage(off, 0, 0, canvas.width, canvas.height);
  }

  // ---- quantize… ----
  async function runQuantize() {
    const f = $("q-format").value;
    const p = { format: f, naming: $("q-naming").value };
    if (f === "nvfp4") p.recipe = $("q-recipe").value;
    else {
      p.scale = $("q-scale").value;
      if (p.scale === "block") p.block = $("q-block").value.trim();
    }
    const path = $("q-path").value.trim();
    if (path) p.path = path;
    const r = await run("quantize", p, "quantize " + f);
    if (!r) return;
    const q = r.json, file = r.files[0];
    if (st.url) URL.revokeObjectURL(st.url);
    let where;
    if (file.path) {
      where = mk("p", { id: "quantize-written", data: { path: file.path } }, "written on the companion's machine to ", mk("code", { text: file.path }), ` (${size(q.bytes)})`);
    } else {
      const a = r.arrays["file:" + file.name];
      st.url = URL.createObjectURL(new Blob([a.data], { type: "application/octet-stream" }));
      where = mk("p", {}, mk("a", { id: "quantize-download", href: st.url, download: file.name, text: "download " + file.name }), ` (${size(a.data.length)})`);
    }
    $("heavy-out").replaceChildren(where,
      mk("p", { class: "small", text: `${q.format} · ${q.recipe} · ${q.naming} naming · tensors ${q.tensors.join(", ")}` }));
  }

  // close is called when the module panel closes (or the page loads another
  // source): a job still running for the module is cancelled, as a closed
  // terminal would stop the command.
  function close() {
    if (st.job) cancel();
  }

  document.addEventListener("DOMContentLoaded", build);
  return { open, close, errorLine };
})();
