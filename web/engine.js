// quantscope's engine, as the page sees it. The wasm engine runs in a Web
// Worker (web/worker.js) and this thread sends its HTTP requests for it: the
// worker asks, this thread fetches and hands over each body as one
// transferred ArrayBuffer, so that handling the responses (here) and parsing
// and grouping the headers (there) run side by side. Where Worker is
// missing, or the worker cannot start, the engine runs on this thread as
// before. Either way Engine.start() resolves to the API of wasm/main.go
// (open, sample, tensors, fit, compare, cancel), also put on
// window.quantscope; document.body.dataset.engine says where it runs
// ("worker" or "page"). open's onProgress and onTrace get, after their
// argument, the time on this page's clock (performance.now()) at which the
// engine reported it. With the worker, a "qs-net-body" performance mark
// (detail: url, bytes) says when this thread had each response's body.
"use strict";

const Engine = (() => {
  // A body is read whole up to this (the engine's largest JSON file, any
  // header range); a response that may be longer (a server that ignored
  // Range) is streamed, chunk by chunk as the engine asks.
  const MAX_WHOLE = 64 << 20;

  function onPage() {
    return new Promise((resolve, reject) => {
      window.quantscopeReady = () => resolve(window.quantscope);
      const go = new Go();
      WebAssembly.instantiateStreaming(fetch("wasm/quantscope.wasm"), go.importObject)
        .then(r => go.run(r.instance))
        .catch(reject);
    }).then(qs => {
      const api = {
        ...qs, // sample, tensors, fit, compare, cancel unchanged
        open: (source, o = {}) => qs.open(source, {
          ...o,
          onProgress: o.onProgress && (s => o.onProgress(s, performance.now())),
          onTrace: o.onTrace && (p => o.onTrace(p, performance.now())),
        }),
      };
      document.body.dataset.engine = "page";
      return api;
    });
  }

  function inWorker() {
    return new Promise((resolve, reject) => {
      const w = new Worker("web/worker.js");
      const calls = new Map();   // call id → {resolve, reject, onProgress, onTrace}
      const fetches = new Map(); // fetch id → {ctl, reader}
      let seq = 0, ready = false;
      const fail = msg => {
        const err = new Error(msg);
        if (!ready) reject(err);
        for (const c of calls.values()) c.reject(err);
        calls.clear();
      };
      const call = (method, args, extra = {}) => new Promise((res, rej) => {
        const id = ++seq;
        calls.set(id, { resolve: res, reject: rej, ...extra });
        w.postMessage({ type: "call", id, method, args, progress: !!extra.onProgress, trace: !!extra.onTrace });
      });
      const clean = o => Object.fromEntries(Object.entries(o || {}).filter(([, v]) => typeof v !== "function"));
      const api = {
        open: (source, o = {}) => call("open", [source, clean(o)], { onProgress: o.onProgress, onTrace: o.onTrace }),
        sample: (...a) => call("sample", a),
        tensors: (...a) => call("tensors", a),
        fit: (o) => call("fit", o === undefined ? [] : [o]),
        compare: (source, o) => call("compare", [source, clean(o)]),
        cancel: () => w.postMessage({ type: "cancel" }),
      };
      const at = t => t - performance.timeOrigin; // the worker's clock on this page's
      w.onerror = e => { e.preventDefault(); fail("the engine's worker failed: " + (e.message || "it did not start")); };
      w.onmessage = e => {
        const m = e.data, c = calls.get(m.id);
        switch (m.type) {
          case "ready": ready = true; document.body.dataset.engine = "worker"; resolve(api); break;
          case "failed": fail(m.message); break;
          case "exited": fail("the engine stopped"); break;
          case "fetch": send(w, fetches, m); break;
          case "read": read(w, fetches, m.id); break;
          case "abort": { const f = fetches.get(m.id); if (f) f.ctl.abort(); fetches.delete(m.id); break; }
          case "cancelBody": { const f = fetches.get(m.id); if (f && f.reader) f.reader.cancel().catch(() => {}); fetches.delete(m.id); break; }
          case "progress": if (c && c.onProgress) c.onProgress(m.data, at(m.at)); break;
          case "trace": if (c && c.onTrace) c.onTrace(m.phase, at(m.at)); break;
          case "result": if (c) { calls.delete(m.id); c.resolve(m.value instanceof Uint8Array ? new TextDecoder().decode(m.value) : m.value); } break;
          case "error": if (c) { calls.delete(m.id); c.reject(Object.assign(new Error(m.error.message), m.error)); } break;
        }
      };
    });
  }

  // send makes one request for the worker and posts back its status,
  // headers and body: the whole of it when it is an answer to a Range (206)
  // or a whole small file, else only the head, the body following read by
  // read.
  async function send(w, fetches, m) {
    const ctl = new AbortController();
    const f = { ctl, reader: null };
    fetches.set(m.id, f);
    try {
      const r = await fetch(m.url, { method: "GET", headers: m.headers, redirect: "follow", credentials: "omit", cache: "no-store", signal: ctl.signal });
      const headers = {};
      r.headers.forEach((v, k) => { headers[k] = v; });
      const ranged = Object.keys(m.headers || {}).some(k => k.toLowerCase() === "range");
      const whole = r.status === 206 || !ranged || r.status < 200 || r.status > 299;
      f.reader = r.body ? r.body.getReader() : null;
      const chunks = [];
      let n = 0, done = !f.reader;
      while (whole && !done && n <= MAX_WHOLE) {
        const x = await f.reader.read();
        if (x.done) done = true;
        else { chunks.push(x.value); n += x.value.length; }
      }
      const first = new Uint8Array(n);
      for (let i = 0, off = 0; i < chunks.length; off += chunks[i].length, i++) first.set(chunks[i], off);
      if (done) fetches.delete(m.id);
      performance.mark("qs-net-body", { detail: { url: m.url, bytes: n, done } }); // this thread has the body (or its first part)
      w.postMessage({ type: "fetched", id: m.id, status: r.status, url: r.url, redirected: r.redirected, headers, first: first.buffer, done }, [first.buffer]);
    } catch (err) {
      fetches.delete(m.id);
      w.postMessage({ type: "fetchFailed", id: m.id, name: err.name || "TypeError", message: err.message || String(err) });
    }
  }

  async function read(w, fetches, id) {
    const f = fetches.get(id);
    if (!f || !f.reader) { w.postMessage({ type: "chunk", id, done: true }); return; }
    try {
      const x = await f.reader.read();
      if (x.done) { fetches.delete(id); w.postMessage({ type: "chunk", id, done: true }); return; }
      const v = x.value.byteOffset === 0 && x.value.byteLength === x.value.buffer.byteLength ? x.value : x.value.slice();
      w.postMessage({ type: "chunk", id, value: v.buffer }, [v.buffer]);
    } catch (err) {
      fetches.delete(id);
      w.postMessage({ type: "chunk", id, error: (err.name || "TypeError") + ": " + (err.message || String(err)) });
    }
  }

  function start() {
    const p = typeof Worker === "function" ? inWorker().catch(err => { console.warn("quantscope: " + err.message + "; the engine runs on the page"); return onPage(); }) : onPage();
    return p.then(api => { window.quantscope = api; return api; });
  }

  return { start };
})();
