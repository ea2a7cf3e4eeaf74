// quantscope page: the model-level "W4A / calibration" card, shown only
// while a companion is connected (web/companion.js). It runs the companion's
// "eval" op (perplexity, dense and W4A side by side, per-line NLL) and its
// "calibrate" op (per-producer amax and NVFP4 global scales, DESIGN.md's
// report shape), and draws both over lines and layers. Uses app.js's $ and
// el at call time.
"use strict";

const w4aUI = { source: "", rev: "", inv: null, job: null, results: false };

// renderW4A is app.js's hook: a repo is on screen (source, revision). A job
// still running for the repo before is cancelled, and what it returns is
// not shown here.
function renderW4A(inv, source, rev) {
  if (w4aUI.job && (source !== w4aUI.source || rev !== w4aUI.rev)) companion.cancel(w4aUI.job.id);
  Object.assign(w4aUI, { inv, source, rev, results: false, scales: null });
  const body = $("w4a-body");
  if (!body) return;
  if (!body.dataset.built) {
    body.replaceChildren(w4aControls(), el("progress", { id: "w4a-progress", hidden: "", "aria-label": "job progress" }),
      el("div", { id: "w4a-status", class: "hint", role: "status", "aria-live": "polite" }),
      el("div", { id: "w4a-eval-out" }), el("div", { id: "w4a-calib-out" }));
    body.dataset.built = "1";
  }
  $("w4a-eval-out").replaceChildren();
  $("w4a-calib-out").replaceChildren();
  $("w4a-status").textContent = "";
  $("w4a-progress").hidden = true;
  delete $("w4a").dataset.state; // the last repo's job, its outcome: not this repo's
  w4aShow();
}

// w4aShow shows the card while a companion is connected, and says what the
// connected one cannot do. When the companion goes away the card stays if
// it holds results or a job's outcome, its buttons off and the reason said.
function w4aShow() {
  const card = $("w4a");
  if (!card) return;
  const on = !!(window.companion && companion.connected() && w4aUI.source);
  if (!on) {
    const keep = !card.hidden && w4aUI.source && (w4aUI.results || w4aUI.job || card.dataset.state === "error");
    card.hidden = !keep;
    if (keep) {
      for (const id of ["w4a-eval", "w4a-calib", "w4a-cancel"]) $(id).disabled = true;
      $("w4a-ops").textContent = "The companion is not connected: these results stay, and the jobs come back when it does (Settings → Companion).";
    }
    return;
  }
  card.hidden = false;
  $("w4a-ops").textContent = "";
  $("w4a-cancel").disabled = false;
  const ops = (companion.info() || {}).ops || [];
  // Calibration reads a token-ids file on the companion's machine, which a
  // companion allows only under the folder it was started with (--in-dir).
  const files = !!(companion.info() || {}).local_files;
  $("w4a-eval").disabled = !ops.includes("eval");
  $("w4a-calib").disabled = !ops.includes("calibrate") || !files;
  $("w4a-calib-data").disabled = !files;
  $("w4a-calib-data").placeholder = files ? "calibration ids file, relative to the companion's --in-dir" :
    "no local files on this companion";
  // What the forward can run on this repo (the inventory's "forward"): a
  // Llama decoder, W4A on GPTQ INT4 projections, text with a tokenizer.json.
  const f = (w4aUI.inv || {}).forward || {};
  const llama = !!f.llama, w4aWhy = f.w4a_refused ? f.w4a_refused.replace(/--w4a needs/, "W4A needs") : "";
  if (!llama) {
    $("w4a-eval").disabled = $("w4a-calib").disabled = true;
  } else if (w4aWhy) {
    $("w4a-calib").disabled = true; // act_max measures the W4A forward's producers
  }
  for (const o of $("w4a-mode").options) o.disabled = o.value !== "none" && !!w4aWhy;
  if (w4aWhy && $("w4a-mode").value !== "none") $("w4a-mode").value = "none";
  if (!w4aWhy && $("w4a-mode").value === "none" && !w4aUI.modeChosen) $("w4a-mode").value = "fp8";
  $("w4a-kind").options[0].disabled = !f.tokenizer;
  if (!f.tokenizer && $("w4a-kind").value === "text") {
    $("w4a-kind").value = "ids";
    w4aUI.kindAuto = true;
    if ($("w4a-text").value === w4aDefaultText) $("w4a-text").value = w4aDefaultIDs;
  } else if (f.tokenizer && w4aUI.kindAuto) { // set for a repo without one: back to text
    $("w4a-kind").value = "text";
    w4aUI.kindAuto = false;
    if ($("w4a-text").value === w4aDefaultIDs) $("w4a-text").value = w4aDefaultText;
  }
  if (w4aUI.job) $("w4a-eval").disabled = $("w4a-calib").disabled = true; // one job at a time
  $("w4a-why").textContent = !llama ? `The companion's forward runs Llama decoders (LlamaForCausalLM); this repo's model is ` +
      `${f.model_type || "not stated"}${(f.architectures || []).length ? " (" + f.architectures.join(", ") + ")" : ""}, so neither job can run on it.` :
    [w4aWhy ? `Perplexity runs dense only, and calibration not at all: ${w4aWhy}.` : "",
      f.tokenizer ? "" : "The repo has no tokenizer.json: give token ids, one sequence per line."].filter(Boolean).join(" ");
  const missing = ["eval", "calibrate"].filter(o => !ops.includes(o));
  $("w4a-ops").textContent = missing.length ? "This companion has no " + missing.map(o => `"${o}"`).join(" or ") +
    " operation (it offers " + (ops.join(", ") || "none") + "); update quantscope to run it." : "";
  $("w4a-files").textContent = !files && ops.includes("calibrate") ? "Calibration reads a file of token ids on the companion's machine, " +
    "and this companion reads none: start it with `quantscope serve --in-dir DIR` and name a file under DIR." : "";
}
window.addEventListener("companion", w4aShow);

const w4aDefaultText = "The quick brown fox jumps over the lazy dog.\nPerplexity is the exponential of the mean negative log likelihood.";
const w4aDefaultIDs = "1 2 3 4 5 6 7 8\n9 10 11 12 13 14 15 16"; // small ids: inside any vocabulary

function w4aControls() {
  const text = el("textarea", { id: "w4a-text", rows: 4, spellcheck: "false",
    placeholder: "one sequence per line: text (tokenized by the repo's tokenizer.json) or token ids" });
  text.value = w4aDefaultText;
  const kind = el("select", { id: "w4a-kind" }, el("option", { value: "text", text: "text" }), el("option", { value: "ids", text: "token ids" }));
  const mode = el("select", { id: "w4a-mode", onchange: () => { w4aUI.modeChosen = true; } },
    el("option", { value: "fp8", text: "W4A-FP8" }), el("option", { value: "nvfp4", text: "W4A-NVFP4" }), el("option", { value: "none", text: "nothing (dense only)" }));
  const recipe = el("select", { id: "w4a-recipe" }, ...["least_squares", "nvidia", "four_six", "least_squares_grid"].map(r => el("option", { value: r, text: r })));
  return el("div", {},
    el("p", { class: "hint", text: "Runs on the connected companion, layer by layer: perplexity dense vs W4A, and the act_max calibration (GPT-QModel's producer maximum)." }),
    el("p", { id: "w4a-why", class: "warn-text" }),
    el("p", { id: "w4a-ops", class: "warn-text" }),
    el("p", { id: "w4a-files", class: "hint" }),
    text,
    el("div", { class: "tools" },
      el("label", { for: "w4a-kind", text: "lines are" }), kind,
      el("label", { for: "w4a-mode", text: "compare with" }), mode,
      el("button", { id: "w4a-eval", type: "button", text: "Perplexity", onclick: w4aEval }),
      el("label", { for: "w4a-recipe", text: "NVFP4 recipe" }), recipe,
      el("input", { id: "w4a-calib-data", type: "text", size: 28, autocomplete: "off", spellcheck: "false", "aria-label": "Calibration data file",
        placeholder: "calibration ids file on the companion's machine" }),
      el("button", { id: "w4a-calib", type: "button", text: "Calibrate (act_max)", onclick: w4aCalibrate }),
      el("button", { id: "w4a-cancel", type: "button", text: "Cancel", hidden: "", onclick: () => w4aUI.job && companion.cancel(w4aUI.job.id) })));
}

// w4aData reads the textarea as the op's inline data.
function w4aData() {
  const lines = $("w4a-text").value.split("\n").map(l => l.replace(/\r$/, "")).filter(l => l.trim() !== "");
  if (!lines.length) throw new Error("paste at least one line");
  if ($("w4a-kind").value === "text") return { lines };
  return { sequences: lines.map((l, i) => l.split(/[\s,]+/).filter(Boolean).map(s => {
    if (!/^\d+$/.test(s)) throw new Error(`line ${i + 1}: "${s}" is not a token id`);
    return Number(s);
  })) };
}

// w4aRun submits op with params (and the textarea's lines when inline),
// showing progress and the error if the companion refuses.
async function w4aRun(op, params, inline) {
  const status = $("w4a-status");
  if (w4aUI.job) return null; // one job at a time (its buttons are off meanwhile)
  let data = {};
  if (inline) try { data = w4aData(); } catch (e) { status.textContent = e.message; return null; }
  const all = Object.assign(data, params);
  // A message past the companion's limit would close the connection (every
  // job with it): refused here, with what to do instead.
  const limit = ((companion.info() || {}).limits || {}).max_message_bytes;
  const size = new TextEncoder().encode(JSON.stringify(all)).length;
  if (limit && size > limit - 4096) {
    status.textContent = `${op}: the pasted lines are ${bytes(size)}, past the companion's ${bytes(limit)} message limit: paste fewer, or run quantscope ${op} on the command line with a file`;
    $("w4a").dataset.state = "error";
    return null;
  }
  const mine = w4aUI.source + "@" + w4aUI.rev;
  const p = companion.submit(op, w4aUI.source, w4aUI.rev, "", all,
    m => {
      if (w4aUI.source + "@" + w4aUI.rev !== mine) return;
      const bar = $("w4a-progress");
      bar.hidden = !m.total;
      if (m.total) { bar.max = m.total; bar.value = m.done; }
      status.textContent = `${op}: ${m.total ? Math.floor(100 * m.done / m.total) + "%, " : ""}${m.phase} step ${m.done}${m.total ? " of " + m.total : ""} (${(m.elapsed_ms / 1000).toFixed(1)} s)`;
    });
  w4aUI.job = p;
  $("w4a-cancel").hidden = false;
  $("w4a").dataset.state = "running";
  w4aShow(); // its buttons off while it runs
  try {
    const r = await p;
    if (w4aUI.source + "@" + w4aUI.rev !== mine) return null; // another repo is on screen now
    status.textContent = `${op}: done in ${(r.elapsedMS / 1000).toFixed(1)} s`;
    $("w4a").dataset.state = "done";
    w4aUI.results = true;
    return r;
  } catch (e) {
    if (w4aUI.source + "@" + w4aUI.rev !== mine) return null;
    const cancelled = /cancel/i.test(e.code || "") || /^cancelled$/i.test(e.message);
    status.textContent = cancelled ? `${op}: cancelled` : `${op} failed: ${e.message}`;
    $("w4a").dataset.state = cancelled ? "cancelled" : "error";
    return null;
  } finally {
    $("w4a-cancel").hidden = true;
    $("w4a-progress").hidden = true;
    w4aUI.job = null;
    w4aShow();
  }
}

async function w4aEval() {
  const mode = $("w4a-mode").value;
  const calibrated = mode === "nvfp4" ? w4aScalesParams() : null;
  const recipe = calibrated ? calibrated.recipe : mode === "nvfp4" ? $("w4a-recipe").value : "";
  const r = await w4aRun("eval", mode === "none" ? { w4a: "none" } : Object.assign({ w4a: mode, compare: true }, recipe ? { recipe } : {}, calibrated || {}), true);
  if (!r) return;
  const j = mode === "none" ? { dense: r.json } : r.json;
  const row = (name, p, id) => el("tr", {}, el("th", { text: name }),
    el("td", { text: String(p.tokens) }),
    el("td", { id: id + "-nll", text: p.nll.toFixed(6), data: { value: String(p.nll) } }),
    el("td", { id: id + "-ppl", text: p.perplexity.toFixed(4), data: { value: String(p.perplexity) } }));
  const d = j.difference;
  const table = el("table", { class: "small", id: "w4a-ppl" },
    el("tr", {}, el("th", { text: "" }), el("th", { text: "tokens" }), el("th", { text: "mean NLL" }), el("th", { text: "perplexity" })),
    row("dense", j.dense, "w4a-dense"), d ? row("W4A " + j.w4a_mode + (recipe ? ` (${recipe}${calibrated ? ", calibrated scales" : ""})` : ""), j.w4a, "w4a-w4a") : null,
    d ? el("tr", {}, el("th", { text: "difference" }), el("td", {}),
      el("td", { text: (d.nll >= 0 ? "+" : "") + d.nll.toFixed(6) }),
      el("td", { id: "w4a-ratio", text: `${d.perplexity >= 0 ? "+" : ""}${d.perplexity.toFixed(4)} (×${d.perplexity_ratio.toFixed(5)})`, data: { value: String(d.perplexity_ratio) } })) : null);
  const dense = r.arrays["nll.none"], w4 = d ? r.arrays["nll." + j.w4a_mode] : null;
  const canvas = el("canvas", { id: "w4a-lines-plot", class: "w4a-plot" });
  $("w4a-eval-out").replaceChildren(...[el("h3", { text: "Perplexity" }), table,
    j.note ? el("p", { class: "hint", text: j.note }) : null, j.causal_note ? el("p", { class: "warn-text", id: "w4a-causal", text: j.causal_note }) : null,
    el("h3", { text: "Mean NLL per line" }), canvas].filter(Boolean)); // replaceChildren writes a null as "null"
  w4aPlot(canvas, [{ name: "dense", values: dense ? Array.from(dense.data) : [], color: "--f-dense" },
    ...(d ? [{ name: "W4A " + j.w4a_mode, values: w4 ? Array.from(w4.data) : [], color: "--f-fp8" }] : [])], { xlabel: "line", ylabel: "NLL" });
}

// The producers of a decoder layer, in NUMERICS.md's order
// (model.layers.{i}.KIND; "input" only where no earlier layer's "output"
// carries the stream, i.e. layer 0).
const w4aProducers = ["input", "self_attn.o_proj.input", "post_attention_residual", "mlp.down_proj.input", "output"];
const w4aColors = ["--f-dense", "--f-fp8", "--f-int", "--f-other", "--f-nvfp4"];

async function w4aCalibrate() {
  // Calibration data is a file on the companion's machine, kept apart from
  // the text evaluated above (the report names it; eval refuses the same file).
  const data = $("w4a-calib-data").value.trim();
  if (!data) { $("w4a-status").textContent = "calibrate: give the calibration data file (token ids, one sequence per line), relative to the companion's --in-dir folder"; return; }
  const r = await w4aRun("calibrate", { pass: "act_max", w4a: "nvfp4", recipe: $("w4a-recipe").value, data }, false);
  if (!r) return;
  const rep = r.json || {};
  const b = rep.boundaries || {};
  const layers = Math.max(0, ...Object.keys(b).map(k => { const m = /^model\.layers\.(\d+)\./.exec(k); return m ? Number(m[1]) + 1 : 0; }));
  if (!layers) { $("w4a-calib-out").replaceChildren(el("p", { class: "hint", text: "The calibration report names no model.layers.N producers." })); return; }
  const series = key => w4aProducers.map((p, i) => ({ name: p, color: w4aColors[i],
    values: Array.from({ length: layers }, (_, l) => { const e = b[`model.layers.${l}.${p}`]; return e ? e[key] : NaN; }) }));
  const amax = el("canvas", { id: "w4a-amax-plot", class: "w4a-plot" });
  const gs = el("canvas", { id: "w4a-gs-plot", class: "w4a-plot" });
  const first = Object.values(b)[0] || {};
  $("w4a-calib-out").replaceChildren(el("h3", { text: "Calibration: amax per layer (log)" }), amax,
    el("h3", { text: "NVFP4 global scale per layer (log)" }), gs,
    el("p", { class: "hint", id: "w4a-calib-summary", data: { producers: String(Object.keys(b).length) },
      text: `${Object.keys(b).length} producers over ${layers} layers (${rep.algorithm || "act_max"}, recipe ${rep.recipe || "?"}` +
        (first.tokens !== undefined ? `, ${first.tokens} tokens in ${first.samples} samples` : "") + ")" }));
  w4aPlot(amax, series("amax"), { log: true, xlabel: "layer", ylabel: "amax" });
  w4aPlot(gs, series("global_scale"), { log: true, xlabel: "layer", ylabel: "global scale" });
  // What a calibration is for: the W4A-NVFP4 perplexity with these global
  // scales (as eval --scales FILE), and the report itself (calibrate --out's).
  w4aUI.scales = { report: rep, source: w4aUI.source, rev: w4aUI.rev };
  const use = el("input", { type: "checkbox", id: "w4a-use-scales" });
  if (w4aUI.reportURL) URL.revokeObjectURL(w4aUI.reportURL); // the last report's
  const url = w4aUI.reportURL = URL.createObjectURL(new Blob([JSON.stringify(rep) + "\n"], { type: "application/json" }));
  $("w4a-calib-out").append(el("p", { class: "tools" },
    el("label", {}, use, ` use these global scales in the W4A-NVFP4 perplexity (recipe ${rep.recipe}${rep.attention ? ", attention " + rep.attention : ""})`),
    el("a", { id: "w4a-calib-download", href: url, download: "act_max.json", text: "download the report (as calibrate --out writes it, for eval --scales)" })));
}

// w4aScalesParams is what the perplexity job takes from the calibration
// when the card says to use it: the scales, and the recipe and attention
// policy they were calibrated under (the job refuses any other).
function w4aScalesParams() {
  const c = w4aUI.scales, use = $("w4a-use-scales");
  if (!use || !use.checked || !c || c.source !== w4aUI.source || c.rev !== w4aUI.rev) return null;
  const p = { scales: c.report.global_scales, recipe: c.report.recipe };
  if (c.report.attention) p.attention = c.report.attention;
  return p;
}

// w4aPlot draws series as lines with dots over their index (log y when
// opts.log; NaN and non-positive log values are gaps), with a legend.
function w4aPlot(canvas, series, opts = {}) {
  // drawn again when the canvas changes width (the module panel opening
  // beside it narrows the report): its pixels would stretch instead
  if (!canvas.w4aObserved && window.ResizeObserver) {
    canvas.w4aObserved = true;
    let last = 0;
    new ResizeObserver(() => {
      if (canvas.isConnected && canvas.clientWidth && canvas.clientWidth !== last) { last = canvas.clientWidth; w4aPlot(canvas, canvas.w4aSeries, canvas.w4aOpts); }
    }).observe(canvas);
  }
  canvas.w4aSeries = series;
  canvas.w4aOpts = opts;
  const css = n => getComputedStyle(document.documentElement).getPropertyValue(n).trim() || "#888";
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 600, h = canvas.clientHeight || 200;
  canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  const f = v => opts.log ? (v > 0 ? Math.log10(v) : NaN) : v;
  let lo = Infinity, hi = -Infinity, n = 0;
  for (const s of series) { n = Math.max(n, s.values.length); for (const v of s.values) { const y = f(v); if (Number.isFinite(y)) { lo = Math.min(lo, y); hi = Math.max(hi, y); } } }
  canvas.dataset.points = String(series.reduce((a, s) => a + s.values.filter(v => Number.isFinite(f(v))).length, 0));
  if (!Number.isFinite(lo)) return;
  if (hi === lo) { hi += 0.5; lo -= 0.5; }
  const pad = { l: 56, r: 8, t: 22, b: 34 }; // the legend sits above the plot
  const X = i => pad.l + (n <= 1 ? 0.5 : i / (n - 1)) * (w - pad.l - pad.r);
  const Y = y => h - pad.b - (y - lo) / (hi - lo) * (h - pad.t - pad.b);
  g.font = "10px system-ui, sans-serif"; g.strokeStyle = css("--line"); g.fillStyle = css("--muted");
  g.textAlign = "right"; g.textBaseline = "middle";
  for (const y of [lo, (lo + hi) / 2, hi]) {
    g.fillText(Plots.fmt(opts.log ? 10 ** y : y), pad.l - 4, Y(y));
    g.beginPath(); g.moveTo(pad.l, Y(y) + 0.5); g.lineTo(w - pad.r, Y(y) + 0.5); g.stroke();
  }
  g.textAlign = "center"; g.textBaseline = "top";
  const step = Math.max(1, Math.ceil(n / 16));
  for (let i = 0; i < n; i += step) g.fillText(String(i), X(i), h - pad.b + 3);
  g.fillText(opts.xlabel || "", (pad.l + w - pad.r) / 2, h - 12);
  let lx = pad.l + 4;
  for (const s of series) {
    g.strokeStyle = g.fillStyle = css(s.color);
    g.beginPath();
    let pen = false;
    s.values.forEach((v, i) => { const y = f(v); if (!Number.isFinite(y)) { pen = false; return; } pen ? g.lineTo(X(i), Y(y)) : g.moveTo(X(i), Y(y)); pen = true; });
    g.stroke();
    s.values.forEach((v, i) => { const y = f(v); if (Number.isFinite(y)) { g.beginPath(); g.arc(X(i), Y(y), 2.5, 0, 7); g.fill(); } });
    g.textAlign = "left"; g.textBaseline = "top";
    g.fillRect(lx, 3, 8, 8);
    g.fillStyle = css("--fg"); g.fillText(s.name, lx + 11, 2);
    lx += 20 + g.measureText(s.name).width;
  }
}
