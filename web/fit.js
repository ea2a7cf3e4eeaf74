// quantscope page: the "Will it fit" card. The numbers come from the wasm
// engine (formats/fit through quantscope.fit, the same estimate as
// `quantscope fit --json`); this file only draws them and asks again when a
// control moves. Uses app.js's $, el and engine at call time.
"use strict";

const fitUI = { seq: 0, built: false, rep: null, limit: 0 };

// gb writes bytes as decimal GB, as vendors state GPU memory (fit.HumanGB).
function gb(n) {
  if (n >= 1e8) return (n / 1e9).toFixed(2) + " GB";
  if (n >= 1e6) return (n / 1e6).toFixed(1) + " MB";
  if (n >= 1e3) return (n / 1e3).toFixed(1) + " kB";
  return n + " B";
}

// The context slider moves in eighths of a power of two, from 256 tokens to
// the model's max_position_embeddings.
const ctxToSlider = t => Math.round(8 * Math.log2(Math.max(t, 1)));
const sliderToCtx = v => Math.max(1, Math.round(2 ** (v / 8)));

function fitControls() {
  const tp = el("select", { id: "fit-tp" }, ...[1, 2, 4, 8].map(n => el("option", { value: n, text: String(n) })));
  const ctx = el("input", { id: "fit-context", type: "range", min: ctxToSlider(256), max: ctxToSlider(256), step: 1 });
  const batch = el("input", { id: "fit-batch", type: "number", min: 1, max: 4096, value: 1, size: 4 });
  const gpu = el("select", { id: "fit-gpu" });
  const custom = el("input", { id: "fit-custom", type: "text", placeholder: "or NAME:GB", size: 10, autocomplete: "off" });
  const mtp = el("label", { class: "inline", id: "fit-mtp-label", hidden: "" }, el("input", { id: "fit-mtp", type: "checkbox" }), " MTP layers");
  const again = () => fitUpdate();
  tp.addEventListener("change", again);
  ctx.addEventListener("input", () => { $("fit-context-value").textContent = int(fitContext()); again(); });
  batch.addEventListener("change", again);
  gpu.addEventListener("change", () => { fitDraw(fitUI.rep); });
  custom.addEventListener("change", again);
  mtp.firstChild.addEventListener("change", again);
  return el("div", { class: "tools fit-tools" },
    el("label", { for: "fit-gpu", text: "GPU" }), gpu, custom,
    el("label", { for: "fit-tp", text: "TP" }), tp,
    el("label", { for: "fit-context", text: "context" }), ctx, el("output", { id: "fit-context-value", for: "fit-context" }),
    el("label", { for: "fit-batch", text: "batch" }), batch, mtp);
}

function fitContext() {
  const s = $("fit-context");
  return Number(s.value) >= Number(s.max) ? fitUI.limit : sliderToCtx(Number(s.value));
}

// renderFit is app.js's hook: a repo's inventory is on screen.
function renderFit(inv) {
  const body = $("fit-body");
  if (!body) return;
  if (!fitUI.built) {
    body.replaceChildren(fitControls(), el("div", { id: "fit-out" }));
    fitUI.built = true;
  }
  fitUI.rep = null;
  $("fit-mtp").checked = false;
  $("fit-custom").value = "";
  $("fit-batch").value = 1;
  $("fit-tp").value = "1";
  $("fit-context").dataset.fresh = "1"; // the first answer sets the slider to the default context
  fitUpdate();
}

async function fitUpdate() {
  const my = ++fitUI.seq;
  const fresh = $("fit-context").dataset.fresh === "1";
  const opts = { tp: Number($("fit-tp").value), batch: Math.max(1, Number($("fit-batch").value) || 1), mtp: $("fit-mtp").checked };
  if (!fresh) opts.context = fitContext();
  const custom = $("fit-custom").value.trim();
  if (custom && fitUI.rep) opts.gpus = fitUI.rep.catalog.map(g => g.name).concat(custom);
  let rep;
  try {
    rep = JSON.parse(await (await engine).fit(opts));
  } catch (err) {
    if (my !== fitUI.seq) return;
    // the engine's words are the CLI's: here the field is "or NAME:GB", not --gpu
    const msg = (err.message || String(err)).replace(/--gpu ("[^"]*")/, "GPU $1").replace(/give its memory as NAME:GB/, "type its memory as NAME:GB (e.g. A100:80)");
    $("fit-out").replaceChildren(el("p", { class: "small fit-error", id: "fit-error", text: msg }));
    $("fit").dataset.state = "error";
    return;
  }
  if (my !== fitUI.seq) return;
  if (fresh) {
    const s = $("fit-context");
    fitUI.limit = rep.max_position_embeddings || 1 << 20;
    s.min = ctxToSlider(Math.min(256, fitUI.limit));
    s.max = ctxToSlider(fitUI.limit);
    s.value = ctxToSlider(rep.context);
    delete s.dataset.fresh;
    $("fit-context-value").textContent = int(rep.context);
    const sel = $("fit-gpu");
    if (!sel.options.length) sel.replaceChildren(...rep.catalog.map(g => el("option", { value: g.name, text: g.name })));
    $("fit-mtp-label").hidden = !rep.extra_layers;
  }
  fitUI.rep = rep;
  fitDraw(rep);
}

function fitDraw(rep) {
  if (!rep) return;
  const out = $("fit-out");
  const need = rep.per_gpu_weight_bytes + rep.per_gpu_staged_bytes + rep.per_gpu_kv_bytes;
  const attn = rep.attention.toUpperCase() + ", " + rep.kv_dtype + (rep.sliding_layers ? `, ${rep.sliding_layers} of ${rep.kv_layers} layers capped at ${int(rep.window)} tokens` : "");
  const lines = kv([
    ["weights", `${gb(rep.weights_bytes)} loaded${rep.stored_bytes !== rep.weights_bytes ? ` (${gb(rep.stored_bytes)} stored)` : ""}; ${gb(rep.per_gpu_weight_bytes)} a GPU at TP ${rep.tp}`, "fit-weights", rep.per_gpu_weight_bytes],
    rep.staged_bytes ? ["W4A staged", `${gb(rep.per_gpu_staged_bytes)} a GPU`, "fit-staged", rep.per_gpu_staged_bytes] : null,
    ["KV cache", `${attn}: ${int(rep.kv_bytes_per_token)} B a token; ${int(rep.context)} tokens × ${rep.batch} = ${gb(rep.per_gpu_kv_bytes)} a GPU`, "fit-kv", rep.per_gpu_kv_bytes],
    ["need", `${gb(need)} a GPU at TP ${rep.tp}, before the reserve`, "fit-need", need],
    rep.tp_refused ? ["TP " + rep.tp, `cannot run this model: ${rep.tp_refused}`, "fit-tp-refused"] : null,
    rep.context_refused ? ["context", `${int(rep.context)} cannot be served: ${rep.context_refused}`, "fit-past-max"] : null,
  ].filter(Boolean));
  // The chosen GPU's memory: weights, KV, reserve and what is left.
  const chosen = rep.gpus.find(g => g.name === $("fit-gpu").value) || rep.gpus[0];
  const bar = el("div", { class: "stack", id: "fit-bar", role: "img" });
  const legend = el("div", { class: "legend" });
  const mem = chosen.memory_bytes;
  const parts = [["weights", rep.per_gpu_weight_bytes, "var(--f-nvfp4)"], ["W4A staged", rep.per_gpu_staged_bytes, "var(--f-int)"],
    ["KV cache", rep.per_gpu_kv_bytes, "var(--f-fp8)"], ["reserve", mem - chosen.usable_bytes, "var(--f-dense)"]];
  let used = 0;
  for (const [name, n, c] of parts) {
    if (!n) continue;
    const w = Math.max(0, Math.min(n, mem - used));
    used += n;
    if (w > 0) bar.append(el("span", { style: `width:${(100 * w / mem).toFixed(3)}%;background:${c}`, title: `${name}: ${gb(n)}` }));
    legend.append(el("span", {}, el("i", { style: "background:" + c }), `${name} ${gb(n)}`));
  }
  legend.append(el("span", { id: "fit-left", class: used <= mem ? "" : "fit-over" }, used <= mem ? `free ${gb(mem - used)}` : `over by ${gb(used - mem)}`));
  bar.setAttribute("aria-label", `${chosen.name}: ${used <= mem ? "fits" : "does not fit"} at TP ${rep.tp}`);
  if (rep.tp_refused) {
    // the model cannot be split this way: no memory picture to draw
    bar.replaceChildren();
    bar.hidden = true;
    legend.replaceChildren(el("span", { id: "fit-left", class: "fit-over", text: `TP ${rep.tp} cannot run this model` }));
  }
  const t = el("table", { class: "small", id: "fit-table" });
  t.append(el("tr", {}, ...["GPU", "memory", `fits at TP ${rep.tp}`, "GPUs needed", `max context (TP ${rep.tp})`].map((h, i) => el("th", { class: i ? "num" : "", text: h }))));
  for (const g of rep.gpus) {
    t.append(el("tr", { class: g.name === chosen.name ? "chosen" : "", data: { gpu: g.name, fits: g.fits, count: g.count, max: g.max_context } },
      el("td", { text: g.name }), el("td", { class: "num", text: gb(g.memory_bytes) }),
      el("td", { class: "num " + (g.fits ? "yes" : "no"), text: g.fits ? "yes" : rep.tp_refused ? "no (TP)" : rep.context_refused ? "no (context)" : "no" }),
      el("td", { class: "num", text: g.count ? String(g.count) : rep.context_refused ? "—" : "more than 8" }),
      el("td", { class: "num", text: rep.tp_refused ? "—" : int(g.max_context) })));
  }
  const notes = el("details", { id: "fit-assumptions" }, el("summary", { text: `assumptions (${rep.assumptions.length})` }),
    el("ul", { class: "small" }, ...rep.assumptions.map(a => el("li", { text: a }))));
  out.replaceChildren(lines, el("div", { class: "small", text: `${chosen.name}, ${gb(mem)}, at TP ${rep.tp}` }), bar, legend, el("div", { class: "fit-scroll" }, t), notes);
  $("fit").dataset.state = "ready";
  $("fit").dataset.context = rep.context;
}
