// quantscope virtual table: renders only the rows in view, so that a repo
// with 180,000 tensors scrolls as smoothly as one with 30.
"use strict";

class VirtualTable {
  constructor(el, columns, onOpen) {
    this.el = el;
    this.columns = columns; // [{key, label, num, width, render(row) -> string|Node, value(row)}]
    this.onOpen = onOpen;
    this.rows = [];
    this.view = [];
    this.sortKey = null;
    this.sortDir = 1;
    this.rowH = 26;
    this.selected = -1;
    const tmpl = columns.map(c => c.width || "1fr").join(" ");
    this.head = document.createElement("div");
    this.head.className = "head";
    this.head.style.gridTemplateColumns = tmpl;
    this.head.setAttribute("role", "row");
    for (const c of columns) {
      const d = document.createElement("div");
      d.textContent = c.label;
      d.setAttribute("role", "columnheader");
      d.dataset.key = c.key;
      d.tabIndex = 0;
      d.addEventListener("click", () => this.sortBy(c.key));
      d.addEventListener("keydown", e => { if (e.key === "Enter") this.sortBy(c.key); });
      if (c.num) d.style.textAlign = "right";
      this.head.appendChild(d);
    }
    this.body = document.createElement("div");
    this.body.className = "body";
    el.replaceChildren(this.head, this.body);
    this.tmpl = tmpl;
    this.pool = [];
    el.addEventListener("scroll", () => this.schedule(), { passive: true });
    el.addEventListener("keydown", e => this.key(e));
    window.addEventListener("resize", () => { this.fit(); this.schedule(); });
  }

  setRows(rows) {
    this.rows = rows;
    this.apply(this.filterText || "");
  }

  filter(text) { this.apply(text); }

  apply(text) {
    this.filterText = text;
    let test = () => true;
    this.filterError = "";
    const m = /^\/(.*)\/([i]*)$/.exec(text);
    if (m) {
      try {
        const re = new RegExp(m[1], m[2]);
        test = r => re.test(r._name);
      } catch (e) {
        test = () => false;
        this.filterError = e.message; // said beside the count, not a silent empty table
      }
    } else if (text) {
      const t = text.toLowerCase();
      test = r => r._lname.includes(t);
    }
    this.view = this.rows.filter(test);
    if (this.sortKey) this.sortView();
    this.selected = -1;
    this.body.style.height = (this.view.length * this.rowH) + "px";
    this.fit();
    this.el.scrollTop = 0;
    this.render(true);
    this.el.dispatchEvent(new CustomEvent("viewchange", { detail: this.view.length }));
  }

  // fit sizes the table to its rows, up to most of the window (a few rows
  // get a short table, thousands a tall one that scrolls).
  fit() {
    const head = this.head.offsetHeight || 28;
    const want = head + Math.max(3, this.view.length) * this.rowH + 2;
    this.el.style.height = Math.min(want, Math.max(240, Math.round(window.innerHeight * 0.8))) + "px";
  }

  // sortBy sorts by a column; a second click reverses. The first click on a
  // numeric column sorts descending (largest first), on text ascending;
  // dir (1 or -1) forces the direction.
  sortBy(key, dir) {
    const col = this.columns.find(c => c.key === key);
    if (dir) { this.sortKey = key; this.sortDir = dir; }
    else if (this.sortKey === key) this.sortDir = -this.sortDir;
    else { this.sortKey = key; this.sortDir = col && col.num ? -1 : 1; }
    this.sortView();
    for (const h of this.head.children) h.setAttribute("aria-sort", h.dataset.key === key ? (this.sortDir > 0 ? "ascending" : "descending") : "none");
    this.render(true);
  }

  sortView() {
    const col = this.columns.find(c => c.key === this.sortKey);
    const val = col.value || (r => r[col.key]);
    const dir = this.sortDir;
    this.view.sort((a, b) => {
      const x = val(a), y = val(b);
      if (x < y) return -dir;
      if (x > y) return dir;
      return a._i - b._i;
    });
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.render(false); });
  }

  render(force) {
    const top = this.el.scrollTop;
    const h = this.el.clientHeight || 400;
    const first = Math.max(0, Math.floor(top / this.rowH) - 5);
    const last = Math.min(this.view.length, Math.ceil((top + h) / this.rowH) + 5);
    if (!force && first === this.first && last === this.last) return;
    this.first = first;
    this.last = last;
    const need = last - first;
    while (this.pool.length < need) {
      const r = document.createElement("div");
      r.className = "r";
      r.setAttribute("role", "row");
      r.style.gridTemplateColumns = this.tmpl;
      for (const c of this.columns) {
        const d = document.createElement("div");
        if (c.num) d.className = "n";
        r.appendChild(d);
      }
      r.addEventListener("click", () => this.open(Number(r.dataset.idx)));
      this.pool.push(r);
      this.body.appendChild(r);
    }
    for (let k = 0; k < this.pool.length; k++) {
      const r = this.pool[k];
      const i = first + k;
      if (i >= last) { r.style.display = "none"; continue; }
      const row = this.view[i];
      r.style.display = "";
      r.style.transform = `translateY(${i * this.rowH}px)`;
      r.dataset.idx = i;
      r.dataset.name = row._name;
      r.classList.toggle("sel", i === this.selected);
      for (let j = 0; j < this.columns.length; j++) {
        const c = this.columns[j];
        const v = c.render ? c.render(row) : row[c.key];
        const cell = r.children[j];
        if (v instanceof Node) { cell.replaceChildren(v); cell.title = v.textContent; } else { cell.textContent = v; cell.title = v; }
      }
    }
  }

  open(i) {
    if (i < 0 || i >= this.view.length) return;
    this.selected = i;
    this.render(true);
    this.onOpen(this.view[i]);
  }

  key(e) {
    if (e.target !== this.el) return;
    if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      e.preventDefault();
      const n = Math.min(this.view.length - 1, Math.max(0, this.selected + (e.key === "ArrowDown" ? 1 : -1)));
      this.selected = n;
      const y = n * this.rowH;
      if (y < this.el.scrollTop + this.rowH) this.el.scrollTop = Math.max(0, y - this.rowH);
      if (y > this.el.scrollTop + this.el.clientHeight - 2 * this.rowH) this.el.scrollTop = y - this.el.clientHeight + 2 * this.rowH;
      this.render(true);
    } else if (e.key === "Enter") {
      this.open(this.selected);
    }
  }
}
