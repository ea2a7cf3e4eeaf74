// quantscope page: the link to a companion (`quantscope serve` on this
// machine) over its websocket. The companion reads tensor bytes itself and
// runs the heavy operations; this file speaks the protocol of
// docs/protocol.md (companion/proto) and offers window.companion:
//
//   companion.submit(op, source, revision, module, params, onProgress, opts) → Promise<{json, arrays, files, note}>
//       (the promise has .id; opts: {endpoint, hubToken}, default from companion.defaults(source))
//   companion.cancel(id)
//   companion.connected() → bool;  companion.info() → the hello (backends, cpu_cores, gpus, ops, limits)
//   companion.connect(url, token);  companion.disconnect()
//   window event "companion" (detail: {connected, info, error}) whenever that changes
//
// The token comes from the page's URL (?token=T, as `quantscope serve`
// prints it) or from the settings; it is kept in memory only and removed
// from the address bar at once, so that no bookmark, deep link or
// screenshot carries it.
"use strict";

// parseFrame reads one binary frame (companion/proto/frame.go's layout):
// magic "QSA\x01", dtype, ndim, id length, name length, dims (u32 LE), id,
// name, zero padding to 8, little-endian data. Anything off is refused.
function parseFrame(buf) {
  const fail = msg => { throw new Error("companion: binary frame: " + msg); };
  const len = buf.byteLength;
  if (len < 10) fail(len + " bytes, shorter than the 10-byte header");
  const dv = new DataView(buf);
  if (dv.getUint8(0) !== 0x51 || dv.getUint8(1) !== 0x53 || dv.getUint8(2) !== 0x41 || dv.getUint8(3) !== 1) fail("bad magic");
  const dtype = dv.getUint8(4);
  const types = { 1: ["f32", 4, Float32Array], 2: ["f64", 8, Float64Array], 3: ["i32", 4, Int32Array], 4: ["i64", 8, BigInt64Array], 5: ["u8", 1, Uint8Array] };
  const t = types[dtype];
  if (!t) fail("unknown dtype code " + dtype);
  const ndim = dv.getUint8(5);
  if (ndim > 8) fail(ndim + " dims, at most 8");
  const idLen = dv.getUint16(6, true), nameLen = dv.getUint16(8, true);
  const fixed = 10 + 4 * ndim;
  if (len < fixed + idLen + nameLen) fail("header runs past the frame");
  const shape = [];
  for (let i = 0; i < ndim; i++) shape.push(dv.getUint32(10 + 4 * i, true));
  const dec = new TextDecoder("utf-8", { fatal: true });
  let id, name;
  try {
    id = dec.decode(new Uint8Array(buf, fixed, idLen));
    name = dec.decode(new Uint8Array(buf, fixed + idLen, nameLen));
  } catch (e) { fail("id or name is not UTF-8"); }
  if (idLen < 1 || idLen > 256 || nameLen < 1 || nameLen > 1024) fail("id or name length out of range");
  const h = Math.ceil((fixed + idLen + nameLen) / 8) * 8;
  if (len < h) fail("header padding runs past the frame");
  for (let i = fixed + idLen + nameLen; i < h; i++) if (dv.getUint8(i) !== 0) fail("nonzero header padding");
  const room = Math.floor((len - h) / t[1]);
  let n = 1;
  for (const d of shape) {
    if (d !== 0 && n > room / d) fail("shape " + JSON.stringify(shape) + " holds more elements than the frame");
    n *= d;
  }
  if (n * t[1] !== len - h) fail((len - h) + " data bytes, shape " + JSON.stringify(shape) + " of " + t[0] + " needs " + n * t[1]);
  return { id, name, dtype: t[0], shape, data: new t[2](buf, h, n) };
}

if (typeof module !== "undefined") module.exports = { parseFrame }; // the Go test runs it under node

if (typeof window !== "undefined") (function () {
  const $ = id => document.getElementById(id);
  let ws = null, hello = null, seq = 0, lastError = "";
  const jobs = new Map(); // id → {resolve, reject, onProgress, result, arrays, want}

  // The token from the address bar: kept here, removed from the URL.
  const params = new URLSearchParams(location.search);
  let token = params.get("token") || "";
  if (params.has("token")) {
    params.delete("token");
    const q = params.toString();
    history.replaceState(history.state, "", location.pathname + (q ? "?" + q : "") + location.hash);
  }
  let url = localStorage.getItem("qs-companion-url") || "";

  function emit() {
    const detail = { connected: !!hello, info: hello, error: lastError };
    render(detail);
    window.dispatchEvent(new CustomEvent("companion", { detail }));
  }

  function render(d) {
    const st = $("companion-status");
    if (!st) return;
    st.dataset.state = d.connected ? "connected" : (ws ? "connecting" : "off");
    if (d.connected) {
      const gpus = d.info.gpus.length ? d.info.gpus.map(g => g.name + " (" + (g.memory_bytes / 2 ** 30).toFixed(0) + " GiB)").join(", ") : "no GPU";
      st.textContent = "companion: " + d.info.backends.join(", ") + " · " + gpus;
      st.title = "quantscope " + d.info.program + " (protocol " + d.info.protocol + ") on " + d.info.cpu_cores + " CPU cores; operations: " + d.info.ops.join(", ");
    } else {
      st.textContent = ws ? "companion: connecting…" : "no companion" + (d.error ? " (" + d.error + ")" : "");
      st.title = "Run `quantscope serve` and open the URL it prints (again after a reload: its token is kept in memory only), or set the companion in Settings.";
    }
  }

  function failAll(msg) {
    for (const [id, j] of jobs) j.reject(Object.assign(new Error(msg), { id, code: "disconnected" }));
    jobs.clear();
  }

  // wsURL turns a page URL (http://127.0.0.1:8080/, maybe with ?token=)
  // into the websocket's, taking a token found in it.
  function wsURL(base) {
    const u = new URL(base || location.origin, location.href);
    u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
    u.pathname = u.pathname.replace(/\/+$/, "") + "/ws";
    u.search = "?token=" + encodeURIComponent(token);
    u.hash = "";
    return u.href;
  }

  function connect(base, tok) {
    if (tok !== undefined) token = tok;
    if (base !== undefined) url = base;
    disconnect();
    if (!token) { lastError = "no token"; emit(); return; }
    lastError = "";
    const sock = new WebSocket(wsURL(url));
    ws = sock;
    sock.binaryType = "arraybuffer";
    emit();
    sock.onmessage = ev => { if (ws === sock) onMessage(ev.data); };
    sock.onclose = ev => {
      if (ws !== sock) return;
      ws = null;
      if (!hello) lastError = "refused or unreachable";
      else if (ev.code === 1009) lastError = "message too large";
      hello = null;
      failAll("the companion connection closed");
      emit();
    };
  }

  function disconnect() {
    if (ws) { const s = ws; ws = null; s.close(); }
    if (hello) { hello = null; failAll("disconnected"); }
    emit();
  }

  function onMessage(data) {
    if (typeof data !== "string") {
      let f;
      try { f = parseFrame(data); } catch (e) { console.error(e); return; }
      const j = jobs.get(f.id);
      if (!j || !j.result) return;
      j.arrays[f.name] = { dtype: f.dtype, shape: f.shape, data: f.data };
      if (--j.want === 0) done(f.id, j);
      return;
    }
    let m;
    try { m = JSON.parse(data); } catch (e) { console.error("companion: not JSON", e); return; }
    const j = m.id ? jobs.get(m.id) : null;
    switch (m.type) {
      case "hello":
        if (m.protocol !== 1) { lastError = "protocol " + m.protocol + " is not 1: update the page or the companion"; disconnect(); return; }
        hello = m;
        emit();
        return;
      case "progress":
        if (j && j.onProgress) try { j.onProgress(m); } catch (e) { console.error(e); }
        return;
      case "result":
        if (!j) return;
        j.result = m;
        j.want = m.arrays.length;
        if (j.want === 0) done(m.id, j);
        return;
      case "error":
        if (!j) { if (m.code !== "bad-request" || !m.id) console.warn("companion:", m.message); return; }
        jobs.delete(m.id);
        j.reject(Object.assign(new Error(m.message), m));
        return;
    }
  }

  function done(id, j) {
    jobs.delete(id);
    const r = j.result;
    j.resolve({ json: r.json, arrays: j.arrays, files: r.files || [], note: r.note || "", elapsedMS: r.elapsed_ms });
  }

  function submit(op, source, revision, module, params, onProgress, opts) {
    const o = Object.assign({}, api.defaults ? api.defaults(source) : {}, opts || {});
    const id = "j" + (++seq);
    const p = new Promise((resolve, reject) => {
      if (!hello || !ws) { reject(Object.assign(new Error("no companion connected"), { id, code: "disconnected" })); return; }
      jobs.set(id, { resolve, reject, onProgress, result: null, arrays: {}, want: 0 });
      const msg = { type: "submit", id, op, source, module: module || "", params: params || {} };
      if (revision) msg.revision = revision;
      if (o.endpoint) msg.endpoint = o.endpoint;
      if (o.hubToken) msg.hub_token = o.hubToken;
      ws.send(JSON.stringify(msg));
    });
    p.id = id;
    return p;
  }

  function cancel(id) {
    const j = jobs.get(id);
    if (!j || !ws) return;
    ws.send(JSON.stringify({ type: "cancel", id }));
  }

  const api = {
    submit, cancel, connect, disconnect,
    connected: () => !!hello,
    info: () => hello,
    defaults: null, // set by app.js: source => ({endpoint, hubToken})
  };
  window.companion = api;

  // Settings: the companion's URL and token.
  document.addEventListener("DOMContentLoaded", () => {
    const u = $("companion-url"), t = $("companion-token"), b = $("companion-connect");
    if (u) { u.value = url; u.placeholder = location.origin; }
    if (b) b.addEventListener("click", () => {
      let base = u.value.trim(), tok = t.value.trim();
      try { // the URL `quantscope serve` printed, token and all, is fine here: the token is taken out
        const x = new URL(base, location.href);
        if (base && x.searchParams.get("token")) {
          tok = tok || x.searchParams.get("token");
          base = x.origin + x.pathname.replace(/\/+$/, "");
          u.value = base;
        }
      } catch (e) { /* not a URL: connect reports it */ }
      if (base) localStorage.setItem("qs-companion-url", base); else localStorage.removeItem("qs-companion-url");
      connect(base, tok || token);
      t.value = "";
    });
    emit();
    // Opened with the URL `quantscope serve` printed: the token is that
    // server's, so it goes to this page's own origin, never to a companion
    // URL saved earlier (whatever listens there now would be handed it).
    if (token) connect("", token);
  });
})();
