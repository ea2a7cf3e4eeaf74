// quantscope's engine in a Web Worker (started by web/engine.js). It runs
// the wasm engine, answers the page's calls, and gives the engine
// quantscopeFetch: fetch() done by the page's thread, which posts back each
// response's status, headers and body (whole, or chunk by chunk as it is
// read), so that this thread only parses and groups.
"use strict";

importScripts("../wasm/wasm_exec.js");

const now = () => performance.timeOrigin + performance.now();
const pending = new Map(); // fetch id → {resolve, reject}
const pulls = new Map();   // fetch id → {ctrl, done} of a body being read
let seq = 0;

// quantscopeFetch(url, {headers, signal, …}) → a Response-like object with
// status, url, redirected, headers.get(name) and body.getReader(): what
// wasm/jsfetch reads of a fetch() response.
self.quantscopeFetch = (url, init = {}) => new Promise((resolve, reject) => {
  const id = ++seq;
  const signal = init.signal;
  if (signal && signal.aborted) { reject(new DOMException("The request was aborted", "AbortError")); return; }
  if (signal) signal.addEventListener("abort", () => postMessage({ type: "abort", id }), { once: true });
  pending.set(id, { resolve, reject });
  postMessage({ type: "fetch", id, url: String(url), headers: Object.assign({}, init.headers) });
});

function response(m) {
  const headers = m.headers;
  const body = new ReadableStream({
    start(ctrl) {
      if (m.first.byteLength) ctrl.enqueue(new Uint8Array(m.first));
      if (m.done) ctrl.close();
    },
    pull(ctrl) {
      return new Promise(done => { pulls.set(m.id, { ctrl, done }); postMessage({ type: "read", id: m.id }); });
    },
    cancel() { pulls.delete(m.id); postMessage({ type: "cancelBody", id: m.id }); },
  }, { highWaterMark: 0 });
  return {
    status: m.status, url: m.url, redirected: m.redirected, body,
    headers: { get: name => (Object.prototype.hasOwnProperty.call(headers, name.toLowerCase()) ? headers[name.toLowerCase()] : null) },
  };
}

function chunk(m) {
  const p = pulls.get(m.id);
  if (!p) return; // cancelled meanwhile
  pulls.delete(m.id);
  try {
    if (m.error) p.ctrl.error(new TypeError(m.error));
    else if (m.done) p.ctrl.close();
    else p.ctrl.enqueue(new Uint8Array(m.value));
  } catch (e) { /* the stream was cancelled */ }
  p.done();
}

const engine = new Promise((resolve, reject) => {
  self.quantscopeReady = () => resolve(self.quantscope);
  const go = new Go();
  WebAssembly.instantiateStreaming(fetch("../wasm/quantscope.wasm"), go.importObject)
    .then(r => go.run(r.instance).then(() => postMessage({ type: "exited" })))
    .catch(reject);
});
engine.then(() => postMessage({ type: "ready" }), err => postMessage({ type: "failed", message: "the engine did not load: " + (err.message || err) }));

async function call(m) {
  const qs = await engine;
  const args = m.args || [];
  if (m.method === "open") {
    const o = Object.assign({}, args[1]);
    if (m.progress) o.onProgress = s => postMessage({ type: "progress", id: m.id, data: s, at: now() });
    if (m.trace) o.onTrace = phase => postMessage({ type: "trace", id: m.id, phase, at: now() });
    o.bytes = true; // the inventory as UTF-8, handed over without a copy; the page decodes it
    args[1] = o;
  }
  try {
    const v = await qs[m.method](...args);
    const moved = v instanceof Uint8Array ? [v.buffer] : v && v.values instanceof Float32Array ? [v.values.buffer] : [];
    postMessage({ type: "result", id: m.id, value: v }, moved);
  } catch (err) {
    const e = { message: err && err.message || String(err) };
    for (const k of ["name", "kind", "status", "rule", "tensor", "file"]) if (err && err[k] !== undefined) e[k] = err[k];
    postMessage({ type: "error", id: m.id, error: e });
  }
}

onmessage = e => {
  const m = e.data;
  switch (m.type) {
    case "call": call(m); break;
    case "cancel": engine.then(qs => qs.cancel()); break;
    case "fetched": {
      const p = pending.get(m.id);
      pending.delete(m.id);
      if (p) p.resolve(response(m));
      break;
    }
    case "fetchFailed": {
      const p = pending.get(m.id);
      pending.delete(m.id);
      if (!p) break;
      const err = m.name === "AbortError" ? new DOMException(m.message, "AbortError") : new TypeError(m.message);
      p.reject(err);
      break;
    }
    case "chunk": chunk(m); break;
  }
};
