// quantscope plots: small canvas bar charts, drawn by hand (no library).
"use strict";

const Plots = (() => {
  function css(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";
  }

  function fmt(v) {
    if (v === 0) return "0";
    const a = Math.abs(v);
    if (a >= 1e4 || a < 1e-3) return v.toExponential(1);
    return String(Number(v.toPrecision(3)));
  }

  // count formats an axis count compactly (12, 3.4K, 1.2M).
  function count(n) {
    if (n >= 1e6) return (n / 1e6).toPrecision(2) + "M";
    if (n >= 1e4) return Math.round(n / 1e3) + "K";
    if (n >= 1e3) return (n / 1e3).toPrecision(2) + "K";
    return String(n);
  }

  // bars draws counts as bars over a count axis (linear, or log when
  // opts.log); labels (optional) under some of them.
  function bars(canvas, counts, opts = {}) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || canvas.width, h = canvas.clientHeight || canvas.height;
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const pad = { l: 36, r: 6, t: 8, b: 20 };
    const n = counts.length;
    canvas.dataset.max = "";
    if (n === 0) return;
    let max = 0;
    for (const c of counts) max = Math.max(max, c);
    if (max === 0) max = 1;
    canvas.dataset.max = String(max);
    // The count axis: 0, the middle (linear only) and the largest count.
    g.strokeStyle = css("--line");
    g.fillStyle = css("--muted");
    g.font = "10px system-ui, sans-serif";
    g.textAlign = "right";
    g.textBaseline = "middle";
    const ticks = opts.log ? [0, max] : [0, max / 2, max];
    for (const tv of ticks) {
      const y = h - pad.b - (opts.log ? Math.log1p(tv) / Math.log1p(max) : tv / max) * (h - pad.t - pad.b);
      g.fillText(count(Math.round(tv)), pad.l - 4, y);
      g.beginPath(); g.moveTo(pad.l - 2, y + 0.5); g.lineTo(w - pad.r, y + 0.5); g.stroke();
    }
    g.save(); g.translate(8, (h - pad.b + pad.t) / 2); g.rotate(-Math.PI / 2); g.textAlign = "center";
    g.fillText(opts.log ? "count (log)" : "count", 0, 0); g.restore();
    const bw = (w - pad.l - pad.r) / n;
    g.fillStyle = opts.color || css("--accent");
    for (let i = 0; i < n; i++) {
      const v = opts.log ? Math.log1p(counts[i]) / Math.log1p(max) : counts[i] / max;
      const bh = v * (h - pad.t - pad.b);
      g.fillRect(pad.l + i * bw + bw * 0.08, h - pad.b - bh, Math.max(bw * 0.84, 1), bh);
    }
    g.fillStyle = css("--muted");
    g.font = "10px system-ui, sans-serif";
    g.textBaseline = "top";
    const labels = opts.labels || [];
    const every = Math.max(1, Math.ceil(labels.length / Math.max(1, Math.floor((w - pad.l - pad.r) / 34))));
    for (let i = 0; i < labels.length; i += every) {
      if (labels[i] === undefined) continue;
      const x = pad.l + i * bw + bw / 2;
      g.textAlign = "center";
      g.fillText(labels[i], x, h - pad.b + 4);
    }
    if (opts.axis) {
      g.textAlign = "left";
      g.fillText(opts.axis[0], pad.l, h - pad.b + 4);
      g.textAlign = "right";
      g.fillText(opts.axis[1], w - pad.r, h - pad.b + 4);
    }
  }

  // histogram draws a {lo, hi, counts, log2} histogram with its range.
  function histogram(canvas, hist) {
    const lo = hist.log2 ? "2^" + fmt(hist.lo) : fmt(hist.lo);
    const hi = hist.log2 ? "2^" + fmt(hist.hi) : fmt(hist.hi);
    bars(canvas, hist.counts || [], { axis: [lo, hi] });
  }

  return { bars, histogram, fmt };
})();
