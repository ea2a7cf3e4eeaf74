// quantscope page: loads the wasm engine, opens a repo, renders the
// inventory, and samples modules. No framework, no build step.
"use strict";

const $ = id => document.getElementById(id);
const DEFAULT_ENDPOINT = "https://huggingface.co";
const state = { inv: null, tensors: null, token: sessionStorage.getItem("qs-token") || "", module: "", table: null, opening: 0 };

function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "data") for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = dv;
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k);
  return e;
}

const nf = new Intl.NumberFormat("en-US");
const int = n => nf.format(n);
function bytes(n) {
  // decimal units, as the hub's file list, diff and fit write sizes
  const u = ["B", "kB", "MB", "GB", "TB", "PB"];
  let i = 0, v = n;
  while (v >= 1000 && i < u.length - 1) { v /= 1000; i++; }
  return (i === 0 ? v : v.toFixed(1)) + " " + u[i];
}
function count(n) {
  if (n >= 1e12) return (n / 1e12).toFixed(2) + " T";
  if (n >= 1e9) return (n / 1e9).toFixed(2) + " B";
  if (n >= 1e6) return (n / 1e6).toFixed(2) + " M";
  if (n >= 1e3) return (n / 1e3).toFixed(1) + " K";
  return String(n);
}
const fmtClass = f => "fmt fmt-" + String(f).replace(/[^a-z0-9]/g, "");
const formatColor = f => {
  const v = { nvfp4: "--f-nvfp4", mxfp4: "--f-mxfp4", fp8: "--f-fp8", mxfp8: "--f-fp8" }[f] ||
    (/^int/.test(f) ? "--f-int" : /^(bf16|f16)$/.test(f) ? "--f-dense" : /^(f32|f64)$/.test(f) ? "--f-wide" : "--f-other");
  return `var(${v})`;
};

// ---- engine ----
const engine = Engine.start(); // web/engine.js: in a Web Worker, else on the page

// ---- settings ----
function endpoint() {
  const sel = $("endpoint").value;
  if (sel === "custom") return $("endpoint-custom").value.trim() || DEFAULT_ENDPOINT;
  return sel;
}
function setEndpoint(v) {
  if (!v) v = $("endpoint").dataset.default || DEFAULT_ENDPOINT;
  const opt = [...$("endpoint").options].find(o => o.value === v);
  if (opt) { $("endpoint").value = v; $("endpoint-custom").hidden = true; }
  else { $("endpoint").value = "custom"; $("endpoint-custom").hidden = false; $("endpoint-custom").value = v; }
}
$("endpoint").append(el("option", { value: "custom", text: "another endpoint…" }));
$("endpoint").addEventListener("change", () => {
  $("endpoint-custom").hidden = $("endpoint").value !== "custom";
  if ($("endpoint").value !== "custom") choose($("endpoint").value);
});
$("endpoint-custom").addEventListener("change", () => choose($("endpoint-custom").value.trim()));

// Where the token may go: Hugging Face's hosts, this page's own server (its
// local hub) and the endpoints chosen in Settings in this tab; never a hub
// that only a link's ?endpoint= or a source URL names, which a crafted link
// would otherwise be sent the token by. The engine checks the same list.
const HF_HOSTS = ["huggingface.co", "www.huggingface.co", "hf.co"];
const chosen = new Set(JSON.parse(sessionStorage.getItem("qs-token-hosts") || "[]"));
function hostOf(u) { try { return new URL(u, location.href).host; } catch (e) { return ""; } }
function choose(ep) {
  const h = hostOf(ep);
  if (h && !chosen.has(h)) { chosen.add(h); sessionStorage.setItem("qs-token-hosts", JSON.stringify([...chosen])); }
}
function tokenHosts() { return [...HF_HOSTS, location.host, ...chosen]; }
function tokenFor(source, ep) {
  const h = /^[a-z][a-z0-9+.-]*:\/\//i.test(source) ? hostOf(source) : hostOf(ep);
  return h && tokenHosts().includes(h) ? state.token : "";
}
$("token").value = state.token;
$("remember").checked = !!sessionStorage.getItem("qs-token");
$("token").addEventListener("input", () => { state.token = $("token").value.trim(); if ($("remember").checked) sessionStorage.setItem("qs-token", state.token); });
$("remember").addEventListener("change", () => { if ($("remember").checked) sessionStorage.setItem("qs-token", state.token); else sessionStorage.removeItem("qs-token"); });
$("theme").addEventListener("click", () => {
  const dark = document.documentElement.dataset.theme === "dark" || (!document.documentElement.dataset.theme && matchMedia("(prefers-color-scheme: dark)").matches);
  document.documentElement.dataset.theme = dark ? "light" : "dark";
  localStorage.setItem("qs-theme", document.documentElement.dataset.theme);
  if (state.inv) renderBars(state.inv);
});
if (localStorage.getItem("qs-theme")) document.documentElement.dataset.theme = localStorage.getItem("qs-theme");

// When served by `quantscope serve`, its local hub and demo repos are offered.
async function serverInfo() {
  try {
    const r = await fetch("quantscope/info", { cache: "no-store" });
    if (!r.ok) return;
    const info = await r.json();
    if (info.local_hub) {
      const here = new URL(".", location.href).href.replace(/\/$/, "");
      $("endpoint").prepend(el("option", { value: here, text: "this server's local hub (" + here + ")" }));
      $("endpoint").dataset.default = here;
      $("endpoint").value = here;
    }
    if (info.demos && info.demos.length) {
      $("demos").hidden = false;
      for (const d of info.demos) {
        $("demo-list").append(el("li", {}, el("button", { type: "button", title: d.about, data: { repo: d.id },
          onclick: () => { setEndpoint($("endpoint").dataset.default); go({ source: d.id, rev: "", module: "" }); } }, d.id.split("/")[1]),
          el("span", { class: "about small", text: d.about })));
        const tok = /\b(hf_[A-Za-z0-9_]+)\b/.exec(d.about || "");
        if (tok) state.demoToken = tok[1];
      }
    }
  } catch (e) { /* a static host: no local hub */ }
}

// ---- navigation ----
function urlState() {
  const p = new URLSearchParams(location.search);
  return { source: p.get("source") || "", rev: p.get("rev") || "", module: p.get("module") || "", endpoint: p.get("endpoint") || "", compare: p.get("compare") || "" };
}
function pushState(s, replace) {
  const p = new URLSearchParams();
  if (s.source) p.set("source", s.source);
  if (s.rev) p.set("rev", s.rev);
  if (s.module) p.set("module", s.module);
  if (s.compare) p.set("compare", s.compare);
  const ep = endpoint();
  if (s.source && ep !== ($("endpoint").dataset.default || DEFAULT_ENDPOINT)) p.set("endpoint", ep);
  const url = location.pathname + (p.toString() ? "?" + p : "");
  if (replace) history.replaceState(s, "", url); else history.pushState(s, "", url);
}
function go(s) { pushState(s, false); apply(s); }
let current = { source: "", rev: "" };
async function apply(s) {
  if (s.endpoint) setEndpoint(s.endpoint);
  $("source").value = s.source;
  $("rev").value = s.rev;
  $("compare").value = s.compare || "";
  if (!s.source) { showIntro(); return; }
  if (s.source !== current.source || s.rev !== current.rev || !state.inv) {
    current = { source: s.source, rev: s.rev };
    const ok = await openRepo(s.source, s.rev);
    if (!ok) return;
  }
  $("module-missing").hidden = true;
  if (s.module && !findModule(s.module)) {
    // a link to a module this repo lacks: said, and dropped from the address
    const leaf = s.module.split(".").pop();
    const near = state.inv.modules.filter(m => m.name.endsWith("." + leaf)).map(m => m.name);
    $("module-missing").textContent = `No module "${s.module}" in this repo` +
      (near.length ? `; modules ending in .${leaf}: ${near.slice(0, 3).join(", ")}${near.length > 3 ? ` and ${near.length - 3} more` : ""}.` : ".");
    $("module-missing").hidden = false;
    s = Object.assign({}, s, { module: "" });
    pushState(s, true);
  }
  if (s.module) openModule(s.module, false); else closePanel(false);
  Compare.show(s);
}
window.addEventListener("popstate", () => apply(urlState()));
$("open-form").addEventListener("submit", e => {
  e.preventDefault();
  go({ source: $("source").value.trim(), rev: $("rev").value.trim(), module: "", compare: $("compare").value.trim() });
});
$("home").addEventListener("click", e => { e.preventDefault(); go({ source: "", rev: "", module: "" }); });

function showIntro() {
  state.inv = null;
  current = { source: "", rev: "" };
  $("intro").hidden = false;
  $("report").hidden = true;
  $("error").hidden = true;
  $("progress").hidden = true;
  closePanel(false);
}

// ---- opening ----
function progress(p, at) {
  const bar = $("progress");
  bar.hidden = false;
  const pct = p.shards ? Math.round(100 * p.shards_done / p.shards) : 0;
  bar.querySelector(".fill").style.width = pct + "%";
  bar.setAttribute("aria-valuenow", pct);
  bar.querySelector(".label").textContent = p.shards ? `headers: ${p.shards_done} of ${p.shards} shards, ${bytes(p.bytes)} received` : "listing the repo…";
  const mark = name => performance.mark(name, at === undefined ? undefined : { startTime: at });
  if (p.shards && p.shards_done === 1) mark("qs-headers-first");
  if (p.shards && p.shards_done === p.shards) mark("qs-headers-done");
}

async function openRepo(source, rev) {
  const my = ++state.opening;
  const qs = await engine;
  $("intro").hidden = true;
  $("error").hidden = true;
  $("report").hidden = true;
  closePanel(false);
  progress({ shards: 0, shards_done: 0, bytes: 0 });
  performance.clearMarks();
  performance.mark("qs-open");
  let json;
  try {
    json = await qs.open(source, { endpoint: endpoint(), revision: rev, token: tokenFor(source, endpoint()), tokenHosts: tokenHosts(),
      onProgress: (s, at) => { if (my === state.opening) progress(JSON.parse(s), at); },
      onTrace: (phase, at) => performance.mark("qs-engine-" + phase, { startTime: at }) });
  } catch (err) {
    if (my !== state.opening || err.kind === "cancelled") return false;
    $("progress").hidden = true;
    showError(err, source);
    return false;
  }
  if (my !== state.opening) return false;
  performance.mark("qs-engine-done");
  const inv = JSON.parse(json);
  performance.mark("qs-parsed");
  state.inv = inv;
  renderReport(inv);
  if (typeof renderW4A === "function") renderW4A(inv, source, rev); // web/w4a.js
  $("progress").hidden = true;
  performance.mark("qs-rendered");
  document.body.dataset.loaded = source;
  return true;
}

function showError(err, source) {
  const box = $("error");
  box.hidden = false;
  box.dataset.kind = err.kind || "other";
  const what = {
    auth: ["No access to this repo", "It is gated or private and needs a Hugging Face token with access (enter one under Settings and inspect again), or no repo has this name."],
    "not-found": ["Not found", "No such repo, revision or file on " + endpoint() + "."],
    format: ["The files break a format rule", "A header is invalid, so the checkpoint cannot be read as stored."],
    config: ["A config file cannot be read", "config.json or hf_quant_config.json is not what its producer writes."],
    "not-safetensors": ["Not a safetensors repo", "The repo holds no .safetensors files."],
    network: ["The request failed", "The network is down, or the server's CORS headers do not let this page read it."],
  }[err.kind] || ["Something went wrong", ""];
  const kids = [el("h2", { text: what[0] }), el("p", { text: what[1] })];
  if (err.rule) kids.push(el("p", {}, "rule ", el("span", { class: "rule", id: "error-rule", text: err.rule }),
    err.tensor ? " · tensor " : "", err.tensor ? el("code", { id: "error-tensor", text: err.tensor }) : null,
    err.file ? " · file " : "", err.file ? el("code", { text: err.file }) : null));
  // The engine's words are the CLI's; on the page, advice is the page's.
  const msg = (err.message || String(err)).replace(/:? ?pass --token or set HF_TOKEN/g, "").replace(/ ?\((?:--token or HF_TOKEN)\)|:? ?check --token or HF_TOKEN/g, "");
  kids.push(el("p", { class: "small", id: "error-message", text: msg }));
  if (err.kind === "auth") {
    const held = state.token && !tokenFor(source, endpoint());
    const given = held ? "The token in Settings was not sent to " + (hostOf(/:\/\//.test(source) ? source : endpoint()) || "this hub") +
      ": a token goes only to huggingface.co, this page's server and an endpoint chosen under Settings. Choose this one there to send it. "
      : state.token ? "The token in Settings was refused: it needs access to this repo. " : "";
    kids.splice(2, 0, el("p", { id: "error-advice" }, given + "Paste a token in the field under Settings (opened above) and press Inspect. ",
      state.demoToken && source.startsWith("quantscope-demo/") ? el("span", {}, "The demo repos' token is ", el("code", { text: state.demoToken }), ".") : null));
  }
  box.replaceChildren(...kids);
  if (err.kind === "auth") {
    $("settings").open = true;
    $("token").focus();
  }
}

// ---- report ----
// The inventory comes without tensors[] (a large repo lists 180,000 of
// them); they are asked for when a view needs them.
async function allTensors() {
  if (!state.tensors) state.tensors = JSON.parse(await (await engine).tensors());
  return state.tensors;
}

function renderReport(inv) {
  $("report").hidden = false;
  state.tensors = inv.tensors;
  $("show-tensors").checked = false;
  renderSummary(inv);
  renderScheme(inv.scheme);
  renderBars(inv);
  LayerMap.render(inv);
  renderFindings(inv.findings);
  renderTable(inv);
  if (typeof renderFit === "function") renderFit(inv); // web/fit.js
}

function kv(pairs) {
  const dl = el("dl", { class: "kv" });
  for (const [k, v, id, raw] of pairs) {
    const dd = el("dd", {}, v);
    if (id) { dd.id = id; if (raw !== undefined) dd.dataset.value = raw; }
    dl.append(el("dt", { text: k }), dd);
  }
  return dl;
}

function renderSummary(inv) {
  const s = inv.summary;
  const body = $("summary-body");
  body.replaceChildren(kv([
    ["source", inv.source, "sum-source"],
    // the commit the revision named when the hub answered (absent for a file the page was given)
    ...(inv.commit ? [["commit", inv.commit.slice(0, 12), "sum-commit", inv.commit]] : []),
    ["files", int(s.files), "sum-files", s.files],
    ["tensors", int(s.tensors), "sum-tensors", s.tensors],
    ["tensor bytes", int(s.bytes) + " (" + bytes(s.bytes) + ")", "sum-bytes", s.bytes],
    ["parameters", int(s.parameters) + " (" + count(s.parameters) + ")" + (s.bias_parameters ? `, of which ${int(s.bias_parameters)} in biases` : ""), "sum-parameters", s.parameters],
    ["bits per weight", s.bits_per_weight.toFixed(3), "sum-bpw", s.bits_per_weight],
    ["modules", int(s.modules) + " (" + int(s.quantized_modules) + " quantized)", "sum-quantized", s.quantized_modules],
    ["fetched", int(inv.fetch.requests) + " requests, " + bytes(inv.fetch.bytes), "sum-fetch", inv.fetch.requests],
  ]));
  const t = el("table", { class: "small", id: "by-format" });
  t.append(el("tr", {}, el("th", { text: "format" }), el("th", { class: "num", text: "parameters" }), el("th", { class: "num", text: "bytes" })));
  const fmts = Object.keys(Object.assign({}, s.parameters_by_format, s.bytes_by_format)).sort((a, b) => (s.parameters_by_format[b] || 0) - (s.parameters_by_format[a] || 0));
  for (const f of fmts) {
    t.append(el("tr", { data: { format: f } }, el("td", {}, el("span", { class: fmtClass(f), text: f })),
      el("td", { class: "num", data: { value: s.parameters_by_format[f] || 0 }, text: int(s.parameters_by_format[f] || 0) }),
      el("td", { class: "num", data: { value: s.bytes_by_format[f] || 0 }, text: bytes(s.bytes_by_format[f] || 0) })));
  }
  const dt = el("p", { class: "small" }, "by stored dtype: " + Object.entries(s.bytes_by_dtype).sort((a, b) => b[1] - a[1]).map(([d, n]) => `${d} ${bytes(n)}`).join(" · "));
  body.append(t, dt);
}

function renderScheme(sc) {
  const pairs = [];
  const names = { method: "method", family: "family", format: "format", quant_algo: "quant_algo", producer: "producer", version: "version",
    bits: "bits", group_size: "group size", symmetric: "symmetric", checkpoint_format: "checkpoint_format", fp8_format: "fp8 format",
    weight_block_size: "block size", activation_scheme: "activations", kv_cache: "kv cache", ignore: "not quantized (ignore)",
    exclude_modules: "exclude_modules", declared_in: "declared in" };
  for (const [k, label] of Object.entries(names)) {
    const v = sc[k];
    if (v === undefined || v === null || v === "" || (Array.isArray(v) && !v.length)) continue;
    const groups = { exclude_modules: sc.exclude_summary, ignore: sc.ignore_summary }[k];
    if (Array.isArray(v) && groups && v.length > 8) { pairs.push([label, nameGroups(v, groups, k), "scheme-" + k]); continue; }
    pairs.push([label, Array.isArray(v) ? v.join(", ") : String(v), "scheme-" + k]);
  }
  if (sc.config_groups) for (const g of sc.config_groups) {
    const w = g.weights || {};
    pairs.push(["group " + g.name, `${(g.targets || []).join(", ")} → ${w.type || ""}${w.num_bits || ""} ${w.strategy || ""}${w.group_size ? " g" + w.group_size : ""}`]);
  }
  // GPT-QModel's per-module overrides, in the order they are tried
  if (sc.dynamic) for (const r of sc.dynamic) {
    const o = [];
    if (r.bits) o.push(r.bits + "-bit");
    if (r.group_size) o.push("group " + r.group_size);
    if (r.sym !== undefined) o.push("sym " + r.sym);
    if (r.desc_act !== undefined) o.push("desc_act " + r.desc_act);
    if (r.weight_block_size) o.push("blocks " + r.weight_block_size.join("x"));
    pairs.push(["dynamic " + r.pattern, r.skip ? "not quantized" : (o.join(" ") || "base config")]);
  }
  if (sc.method === "none") pairs.push(["", "nothing declared: no quantization_config, no hf_quant_config.json"]);
  $("scheme-body").replaceChildren(kv(pairs));
}

// nameGroups shows a long exclusion list as its layer patterns ("N in
// 0–60"), with every entry on request.
function nameGroups(all, groups, key) {
  const box = el("span", { class: "groups" });
  const summary = groups.map(g => g.layers ? `${g.pattern} (N in ${g.layers}: ${g.count})` : g.pattern).join(", ");
  const btn = el("button", { type: "button", class: "linkish", id: "scheme-expand-" + key, text: `show all ${int(all.length)}` });
  const text = el("span", { class: "groups-text", text: summary + " " });
  btn.addEventListener("click", () => {
    const open = btn.dataset.open !== "1";
    btn.dataset.open = open ? "1" : "";
    text.textContent = (open ? all.join(", ") : summary) + " ";
    btn.textContent = open ? "show patterns" : `show all ${int(all.length)}`;
  });
  box.append(text, btn);
  return box;
}

// Module kinds get their own colours, none of them a format's, and stripes,
// so that the two bars never seem to speak of the same thing.
const KIND_COLORS = ["#ad1457", "#2e7d32", "#6d4c41", "#00838f", "#f9a825", "#455a64", "#8e24aa", "#d84315", "#1565c0", "#558b2f"];
function stack(title, parts, total, striped) {
  const bar = el("div", { class: "stack", role: "img", "aria-label": title });
  const legend = el("div", { class: "legend" });
  parts.forEach(([name, n, color], i) => {
    if (!n) return;
    const c = color || KIND_COLORS[i % KIND_COLORS.length];
    const bg = striped ? `repeating-linear-gradient(135deg, ${c} 0 6px, color-mix(in srgb, ${c} 70%, white) 6px 9px)` : c;
    bar.append(el("span", { style: `width:${(100 * n / total).toFixed(3)}%;background:${bg}`, title: `${name}: ${bytes(n)}`, data: { color: c } }));
    legend.append(el("span", {}, el("i", { style: "background:" + bg, data: { color: c } }), `${name} ${(100 * n / total).toFixed(1)}%`));
  });
  return [el("div", { class: "small", text: title }), bar, legend];
}

function renderBars(inv) {
  const s = inv.summary;
  const total = Object.values(s.bytes_by_format).reduce((a, b) => a + b, 0) || 1;
  const byFmt = Object.entries(s.bytes_by_format).sort((a, b) => b[1] - a[1]).map(([f, n]) => [f, n, formatColor(f)]);
  const byKind = Object.entries(s.bytes_by_kind).sort((a, b) => b[1] - a[1]);
  $("bars-body").replaceChildren(...stack("by format", byFmt, total), ...stack("by module kind", byKind, total, true));
}

function renderFindings(fs) {
  const list = $("findings-list");
  const n = sev => fs.filter(f => f.severity === sev).length;
  const plural = (k, w) => `${k} ${w}${k === 1 ? "" : "s"}`;
  $("findings-count").textContent = fs.length ? `(${plural(n("error"), "error")}, ${plural(n("warning"), "warning")}${n("info") ? ", " + plural(n("info"), "note") : ""})` : "(none: the metadata and the bytes agree)";
  // A broken repo can repeat one rule thousands of times: show the first
  // few of each, and the rest on request.
  // Notes (one per module, such as CT-004's) fold sooner than problems.
  const perRule = f => f.severity === "info" ? 3 : 25;
  const seen = new Map(), rest = new Map();
  const first = [];
  for (const f of fs) {
    const k = (seen.get(f.rule) || 0) + 1;
    seen.set(f.rule, k);
    if (k <= perRule(f)) first.push(f); else { if (!rest.has(f.rule)) rest.set(f.rule, []); rest.get(f.rule).push(f); }
  }
  const items = first.map(findingItem);
  for (const [rule, more] of rest) {
    const li = el("li", { class: "more", data: { moreRule: rule, moreCount: String(more.length) } }, el("button", { type: "button", class: "linkish", text: `… and ${int(more.length)} more ${rule}`,
      onclick: () => li.replaceWith(...more.map(findingItem)) }));
    items.push(li);
  }
  list.replaceChildren(...items);
}

function findingItem(f) {
  const where = f.tensor || f.module;
  const target = where ? f.module || moduleOfTensor(f.tensor) : "";
  const link = !where ? null : findModule(target)
    ? el("a", { href: "#", class: "where", text: where, onclick: e => { e.preventDefault(); selectModule(target); } })
    : el("code", { text: where });
  return el("li", { data: { rule: f.rule, severity: f.severity, tensor: f.tensor || "", module: f.module || "" } },
    el("span", { class: "sev sev-" + f.severity, text: f.severity }), " ", el("span", { class: "rule", text: f.rule }), " ",
    link, link ? ": " : "", f.message);
}

// moduleOfTensor drops a tensor name's role (weight, weight_scale, …).
function moduleOfTensor(name) {
  if (findModule(name)) return name;
  const m = /^(.*)(?:\.[a-z_0-9]+|_blocks|_scales|_bias)$/.exec(name || "");
  return m && findModule(m[1]) ? m[1] : name;
}
function findModule(name) {
  if (!state.inv) return null;
  if (!state.moduleIndex || state.moduleIndex.inv !== state.inv) {
    state.moduleIndex = { inv: state.inv, map: new Map(state.inv.modules.map(m => [m.name, m])) };
  }
  return state.moduleIndex.map.get(name) || null;
}

const layerOf = name => { const m = /\.(?:layers|h|blocks)\.(\d+)\./.exec(name + "."); return m ? Number(m[1]) : -1; };

async function renderTable(inv) {
  const tensors = $("show-tensors").checked;
  const list = tensors ? await allTensors() : null;
  const cols = tensors ? [
    { key: "layer", label: "layer", width: "4rem", num: true, render: r => r.layer < 0 ? "" : r.layer },
    { key: "name", label: "tensor", width: "minmax(14rem, 3fr)" },
    { key: "dtype", label: "dtype", width: "7rem" },
    { key: "shape", label: "shape", width: "minmax(7rem, 1fr)", value: r => r.nbytes, render: r => "[" + r.shape.join(", ") + "]" },
    { key: "nbytes", label: "bytes", width: "8rem", num: true, render: r => bytes(r.nbytes) },
    { key: "file", label: "file", width: "minmax(8rem, 1fr)" },
  ] : [
    { key: "layer", label: "layer", width: "4rem", num: true, render: r => r.layer < 0 ? "" : r.layer },
    { key: "name", label: "module", width: "minmax(14rem, 3fr)" },
    { key: "kind", label: "kind", width: Math.max(6, ...inv.modules.map(m => m.kind.length)) + 2 + "ch" },
    { key: "format", label: "format", width: "6rem", render: r => el("span", { class: fmtClass(r.format), text: r.format }) },
    { key: "shape", label: "logical shape", width: "minmax(7rem, 1fr)", value: r => r.parameters, render: r => "[" + r.weight_shape.join(", ") + "]" + (r.bias_parameters ? " + bias " + int(r.bias_parameters) : "") },
    { key: "parameters", label: "parameters (+bias)", width: "9rem", num: true, render: r => int(r.parameters) },
    { key: "bytes", label: "bytes", width: "7rem", num: true, render: r => bytes(r.bytes) },
    { key: "bpw", label: "bits/w", width: "5rem", num: true, render: r => r.parameters ? r.bpw.toFixed(2) : "" },
  ];
  const rows = tensors
    ? list.map((t, i) => ({ ...t, nbytes: t.data_offsets[1] - t.data_offsets[0], layer: layerOf(t.name), _name: t.name, _lname: t.name.toLowerCase(), _i: i, _module: t.module }))
    : inv.modules.map((m, i) => ({ ...m, layer: layerOf(m.name), bpw: m.parameters ? 8 * m.bytes / m.parameters : 0, _name: m.name, _lname: m.name.toLowerCase(), _i: i, _module: m.name }));
  state.table = new VirtualTable($("table"), cols, r => selectModule(r._module));
  $("modules").querySelector("h2").firstChild.textContent = tensors ? "Tensors " : "Modules ";
  $("table").addEventListener("viewchange", e => {
    const bad = state.table.filterError;
    $("filter").setAttribute("aria-invalid", bad ? "true" : "false");
    $("modules-count").textContent = bad ? `(the filter is no regular expression: ${bad})` : `(${int(e.detail)} of ${int(rows.length)} ${tensors ? "tensors" : "modules"})`;
  });
  state.table.setRows(rows);
  state.table.sortBy("layer", 1);
  if ($("filter").value) state.table.filter($("filter").value.trim());
}
$("filter").addEventListener("input", () => { if (state.table) state.table.filter($("filter").value.trim()); });
$("show-tensors").addEventListener("change", () => { if (state.inv) renderTable(state.inv); });

// ---- module panel ----
function selectModule(name) {
  const s = urlState();
  s.module = name;
  pushState(s, false);
  openModule(name, false);
}

function openModule(name, push) {
  const inv = state.inv;
  if (!inv) return;
  const m = findModule(name);
  if (!m) return;
  state.module = name;
  const p = $("panel");
  p.hidden = false;
  p.dataset.module = name;
  $("panel-title").textContent = name;
  document.body.classList.add("panel-open");
  const own = (inv.findings || []).filter(f => f.module === name || (f.tensor && moduleOfTensor(f.tensor) === name));
  $("panel-findings").hidden = !own.length;
  $("panel-findings").replaceChildren(el("li", { class: "head", text: `findings of this module (${own.length})` }), ...own.map(findingItem));
  const shape = m.weight_shape.join(" × ");
  $("panel-meta").replaceChildren(kv([
    ["format", el("span", { class: fmtClass(m.format), text: m.format + (m.layout ? " · " + m.layout : "") })],
    ["logical shape", shape + (m.shape_inferred ? " (inferred from the packed width)" : "")],
    ["parameters", int(m.parameters) + (m.bias_parameters ? ` (weight ${int(m.parameters - m.bias_parameters)} + bias ${int(m.bias_parameters)})` : ""), "mod-parameters", m.parameters],
    ["bytes", int(m.bytes) + " (" + (m.parameters ? (8 * m.bytes / m.parameters).toFixed(3) + " bits/weight" : "metadata only") + ")", "mod-bytes", m.bytes],
    ...(m.group_size ? [["group size", String(m.group_size)]] : []),
    ...(m.block ? [["block", m.block.join(" × ")]] : []),
  ]));
  const t = $("panel-tensors");
  t.replaceChildren(el("tr", {}, ...["role", "tensor", "dtype", "shape", "offsets", "bytes"].map(h => el("th", { text: h }))));
  engine.then(qs => qs.tensors(name)).then(js => { if (state.module === name) fillTensors(t, JSON.parse(js)); }).catch(() => {});
  $("sample").hidden = true;
  const rows = m.weight_shape.length ? m.weight_shape.slice(0, -1).reduce((a, b) => a * b, 1) : 0;
  $("row-start").max = Math.max(0, rows - 1);
  $("col-start").value = 0;
  $("sample-btn").disabled = m.format === "none";
  if (m.format !== "none") sample();
  if (typeof Heavy !== "undefined") Heavy.open(name, current.source, current.rev, m);
}

function fillTensors(t, list) {
  for (const x of list) {
    t.append(el("tr", {}, el("td", { text: x.role }), el("td", { text: x.name }), el("td", { text: x.dtype }),
      el("td", { text: "[" + x.shape.join(", ") + "]" }), el("td", { text: x.data_offsets.join("–") }),
      el("td", { class: "num", text: int(x.data_offsets[1] - x.data_offsets[0]) })));
  }
}

function closePanel(push) {
  if (typeof Heavy !== "undefined") Heavy.close();
  $("panel").hidden = true;
  document.body.classList.remove("panel-open");
  state.module = "";
  if (push) { const s = urlState(); s.module = ""; pushState(s, false); }
}
$("panel-close").addEventListener("click", () => closePanel(true));
document.addEventListener("keydown", e => { if (e.key === "Escape" && !$("panel").hidden) closePanel(true); });
$("sample-form").addEventListener("submit", e => { e.preventDefault(); sample(); });
const pageCols = d => { $("col-start").value = Math.max(0, (Number($("col-start").value) || 0) + d * 48); sample(); };
$("cols-prev").addEventListener("click", () => pageCols(-1));
$("cols-next").addEventListener("click", () => pageCols(1));

async function sample() {
  const qs = await engine;
  const name = state.module;
  const start = Math.max(0, Number($("row-start").value) || 0);
  const n = Math.min(64, Math.max(1, Number($("row-count").value) || 4));
  const m = findModule(name);
  const cols = m && m.weight_shape.length ? m.weight_shape[m.weight_shape.length - 1] : 0;
  const colFrom = Math.max(0, Math.min(Math.max(0, cols - 1), Math.floor(Number($("col-start").value) || 0)));
  $("col-start").value = colFrom;
  $("sample-stats").textContent = "decoding…";
  $("sample").hidden = false;
  let r;
  try {
    r = await qs.sample(name, start, n, colFrom);
  } catch (err) {
    $("sample-stats").textContent = "cannot decode: " + (err.rule ? `rule ${err.rule}: ` : "") + err.message;
    return;
  }
  if (name !== state.module) return;
  const s = JSON.parse(r.json);
  const v = r.values;
  const st = s.stats;
  const vcols = s.col_end - s.col_start;
  // Which values the statistics cover: the rows (with the expert they
  // belong to when experts are stacked, [E, rows, cols] read as E·rows rows)
  // and the columns decoded.
  const ws = m ? m.weight_shape : [];
  const per = ws.length === 3 ? ws[1] : 0, last = s.row_start + s.rows - 1;
  const rowsText = per && Math.floor(s.row_start / per) === Math.floor(last / per) ?
    `expert ${Math.floor(s.row_start / per)}, rows ${s.row_start % per}–${last % per} (rows ${s.row_start}–${last} of ${ws[0]} × ${per})` :
    per ? `rows ${s.row_start}–${last} of ${ws[0]} experts × ${per} (experts ${Math.floor(s.row_start / per)}–${Math.floor(last / per)})` : `rows ${s.row_start}–${last}`;
  const colsText = vcols < s.cols ? ` × columns ${s.col_start}–${s.col_end - 1} of ${s.cols} (this layout packs along the inputs, so only their words are read; page with “columns from”)` :
    ` × all ${s.cols} columns`;
  $("sample-stats").textContent = `${rowsText}${colsText} · min ${Plots.fmt(st.Min)} · max ${Plots.fmt(st.Max)} · mean ${Plots.fmt(st.Mean)} · std ${Plots.fmt(st.Std)}` +
    (st.NaN ? ` · ${st.NaN} NaN` : "") + (st.Inf ? ` · ${st.Inf} inf` : "") +
    ` · this sample fetched ${bytes(s.sample_bytes)} in ${int(s.sample_requests)} request${s.sample_requests === 1 ? "" : "s"} (${bytes(s.bytes_fetched)} this session)`;
  Plots.histogram($("hist"), s.histogram);
  const dense = !(s.codes && s.codes.length);
  $("codes-fig").hidden = dense;
  if (!dense) {
    // Value order (FP8's sign bit and E2M1's -0 put code order elsewhere);
    // -0 sorts before 0 and is labelled so; NaN codes last.
    const codes = [...s.codes].sort((a, b) => (isNaN(a.value) - isNaN(b.value)) || (a.value - b.value) || (Object.is(a.value, -0) ? -1 : Object.is(b.value, -0) ? 1 : 0));
    const label = v => Object.is(v, -0) ? "-0" : Plots.fmt(v);
    $("codes-cap").textContent = `${s.code_kind} code frequency, in value order${codes.length > 16 ? " (log count)" : ""}`;
    $("codes").dataset.labels = codes.map(c => label(c.value)).join(" ");
    Plots.bars($("codes"), codes.map(c => c.count), { labels: codes.map(c => label(c.value)), log: codes.length > 16, yAxis: true });
  }
  const scalesOK = !!(s.scale_histogram && s.scale_histogram.counts && s.scale_histogram.counts.length);
  $("scales-fig").hidden = !scalesOK;
  if (scalesOK) Plots.histogram($("scales"), s.scale_histogram);
  const notes = [dense ? `dense (${s.format}): no codes, no scales — stored unquantized` : "", !dense && s.scale_note ? "scales: " + s.scale_note : ""].filter(Boolean);
  $("plots-note").hidden = !notes.length;
  $("plots-note").textContent = notes.join(" · ");
  const off = Math.max(0, Math.min(colFrom - s.col_start, vcols - 1));
  const showCols = Math.min(vcols - off, 48);
  const grid = el("table", { id: "sample-table", data: { rowStart: s.row_start, rows: s.rows, cols: s.cols } });
  grid.append(el("tr", {}, el("th", { text: "row" }), ...Array.from({ length: showCols }, (_, j) => el("th", { text: String(s.col_start + off + j) }))));
  for (let i = 0; i < s.rows; i++) {
    const tr = el("tr", {}, el("th", { text: String(s.row_start + i) }));
    for (let j = 0; j < showCols; j++) {
      const x = v[i * vcols + off + j];
      tr.append(el("td", { class: x < 0 ? "neg" : "", data: { v: String(x) }, text: Plots.fmt(x) }));
    }
    grid.append(tr);
  }
  const note = s.cols > showCols ? el("p", { class: "small", id: "sample-cols", text: `shown: columns ${s.col_start + off}–${s.col_start + off + showCols - 1} of ${s.cols}` +
    (vcols > showCols ? ` (${s.col_start}–${s.col_end - 1} decoded)` : "") }) : null;
  $("cols-prev").disabled = s.col_start + off === 0;
  $("cols-next").disabled = s.col_start + off + showCols >= s.cols;
  $("sample-grid").replaceChildren(grid, ...(note ? [note] : []));
  $("sample").dataset.ready = name + ":" + s.row_start;
}

if (window.companion) companion.defaults = source => ({ endpoint: endpoint(), hubToken: tokenFor(source || "", endpoint()) });
serverInfo().then(() => { const s = urlState(); if (s.endpoint) setEndpoint(s.endpoint); pushState(s, true); apply(s); });
