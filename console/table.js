// A table of many rows kept in memory: filtered and sorted there, and only one page of it (50 rows)
// in the DOM, so that 10,000 queues or more render as fast as 50. Clicking a column header sorts by
// it (again: the other way); the filter box keeps rows whose filter text contains what is typed.
//
//   const t = new DataTable({id: "queues", columns: [...], filterText: (row) => row.name});
//   parent.append(t.element); t.setRows(rows);
//
// A column: {key, label, numeric, value: row -> sort value (default row[key]; null sorts last),
// render: row -> node or text (default the value), cls}.
// Each render is timed (performance.now()); the time is on the table element as data-render-ms
// and in window.escrowConsole.renders, for the tests and for anyone curious.
import {h, replace} from "./dom.js";
import {count} from "./format.js";

export class DataTable {
  constructor({id, columns, pageSize = 50, filterText = null, filterPlaceholder = "filter",
               emptyText = "nothing to show", sort = null, rowClass = null}) {
    this.id = id;
    this.columns = columns;
    this.pageSize = pageSize;
    this.filterTextOf = filterText;
    this.emptyText = emptyText;
    this.rowClass = rowClass;
    this.rows = [];
    this.view = [];  // indices into rows: filtered, sorted
    this.search = null;  // lower-cased filter text of each row
    this.filter = "";
    this.sortKey = sort ? sort.key : null;
    this.sortDir = sort ? sort.dir : 1;
    this.page = 0;
    this.dirty = true;
    this.lastRenderMs = 0;

    this.heads = new Map();
    const headRow = h("tr", null, columns.map((c) => {
      const button = h("button", {type: "button", class: "sort", dataset: {key: c.key}}, c.label);
      button.addEventListener("click", () => this.sortBy(c.key));
      const th = h("th", {scope: "col", class: c.numeric ? "num" : null, dataset: {key: c.key}}, button);
      this.heads.set(c.key, th);
      return th;
    }));
    this.tbody = h("tbody");
    this.table = h("table", {class: "data", id: id ? `${id}-table` : null}, h("thead", null, headRow), this.tbody);
    this.summary = h("span", {class: "summary"});
    this.filterInput = filterText ? h("input", {type: "search", class: "filter", placeholder: filterPlaceholder,
                                                "aria-label": filterPlaceholder, id: id ? `${id}-filter` : null})
      : null;
    if (this.filterInput) {
      this.filterInput.addEventListener("input", () => {
        this.filter = this.filterInput.value.trim().toLowerCase();
        this.page = 0;
        this.dirty = true;
        this.render();
      });
    }
    this.pageLabel = h("span", {class: "page-label"});
    this.buttons = {
      first: h("button", {type: "button", class: "page-first", "aria-label": "first page"}, "«"),
      prev: h("button", {type: "button", class: "page-prev", "aria-label": "previous page"}, "‹ Previous"),
      next: h("button", {type: "button", class: "page-next", "aria-label": "next page"}, "Next ›"),
      last: h("button", {type: "button", class: "page-last", "aria-label": "last page"}, "»"),
    };
    this.buttons.first.addEventListener("click", () => this.goto(0));
    this.buttons.prev.addEventListener("click", () => this.goto(this.page - 1));
    this.buttons.next.addEventListener("click", () => this.goto(this.page + 1));
    this.buttons.last.addEventListener("click", () => this.goto(Infinity));
    this.pager = h("div", {class: "pager"}, this.buttons.first, this.buttons.prev, this.pageLabel,
                   this.buttons.next, this.buttons.last);
    this.element = h("div", {class: "datatable", id: id || null},
      h("div", {class: "toolbar"}, this.filterInput, this.summary),
      h("div", {class: "scroll"}, this.table),
      this.pager);
    this.markSort();
  }

  // New rows (a fresh fetch): the filter, sort order and page stay.
  setRows(rows) {
    this.rows = rows;
    this.search = null;
    this.dirty = true;
    this.render();
  }

  sortBy(key) {
    if (this.sortKey === key) {
      this.sortDir = -this.sortDir;
    } else {
      this.sortKey = key;
      const column = this.columns.find((c) => c.key === key);
      this.sortDir = column && column.numeric ? -1 : 1;  // numbers: the biggest first
    }
    this.page = 0;
    this.dirty = true;
    this.markSort();
    this.render();
  }

  goto(page) {
    const pages = Math.max(1, Math.ceil(this.view.length / this.pageSize));
    this.page = Math.min(Math.max(0, page), pages - 1);
    this.render();
  }

  markSort() {
    for (const [key, th] of this.heads) {
      if (key === this.sortKey) th.setAttribute("aria-sort", this.sortDir > 0 ? "ascending" : "descending");
      else th.removeAttribute("aria-sort");
    }
  }

  // Filter and sort the rows into this.view (indices), only when something changed.
  computeView() {
    const rows = this.rows;
    let view = [];
    if (this.filter && this.filterTextOf) {
      if (!this.search) this.search = rows.map((r) => String(this.filterTextOf(r) ?? "").toLowerCase());
      const needle = this.filter;
      const search = this.search;
      for (let i = 0; i < rows.length; i++) if (search[i].includes(needle)) view.push(i);
    } else {
      view = new Array(rows.length);
      for (let i = 0; i < rows.length; i++) view[i] = i;
    }
    const column = this.columns.find((c) => c.key === this.sortKey);
    if (column) {
      const valueOf = column.value || ((r) => r[column.key]);
      const keys = new Array(rows.length);
      for (const i of view) {
        const v = valueOf(rows[i]);
        keys[i] = v === undefined ? null : v;
      }
      const dir = this.sortDir;
      view.sort((a, b) => {
        const x = keys[a];
        const y = keys[b];
        if (x === y) return a - b;
        if (x === null) return 1;  // unknown values last, either way
        if (y === null) return -1;
        return (x < y ? -1 : x > y ? 1 : 0) * dir || a - b;
      });
    }
    this.view = view;
    this.dirty = false;
  }

  render() {
    const started = performance.now();
    if (this.dirty) this.computeView();
    const pages = Math.max(1, Math.ceil(this.view.length / this.pageSize));
    if (this.page >= pages) this.page = pages - 1;
    const from = this.page * this.pageSize;
    const to = Math.min(this.view.length, from + this.pageSize);
    const fragment = document.createDocumentFragment();
    for (let n = from; n < to; n++) {
      const row = this.rows[this.view[n]];
      const tr = document.createElement("tr");
      if (this.rowClass) {
        const cls = this.rowClass(row);
        if (cls) tr.className = cls;
      }
      for (const c of this.columns) {
        const td = document.createElement("td");
        if (c.numeric) td.className = "num";
        if (c.cls) td.classList.add(c.cls);
        td.dataset.key = c.key;
        const shown = c.render ? c.render(row) : row[c.key];
        if (shown instanceof Node) td.appendChild(shown);
        else if (shown !== null && shown !== undefined) td.textContent = String(shown);
        tr.appendChild(td);
      }
      fragment.appendChild(tr);
    }
    if (to === from) {
      fragment.appendChild(h("tr", {class: "empty"},
        h("td", {colspan: this.columns.length}, this.rows.length ? "no row matches the filter" : this.emptyText)));
    }
    this.tbody.replaceChildren(fragment);
    const filtered = this.view.length !== this.rows.length;
    replace(this.summary, to > from ? `rows ${count(from + 1)}–${count(to)} of ${count(this.view.length)}` : "no rows",
            filtered ? ` (filtered from ${count(this.rows.length)})` : "");
    this.pageLabel.textContent = `page ${count(this.page + 1)} of ${count(pages)}`;
    this.buttons.first.disabled = this.buttons.prev.disabled = this.page === 0;
    this.buttons.next.disabled = this.buttons.last.disabled = this.page >= pages - 1;
    this.pager.hidden = pages <= 1;
    const ms = performance.now() - started;
    this.lastRenderMs = ms;
    this.element.dataset.renderMs = ms.toFixed(2);
    this.element.dataset.rows = String(this.view.length);
    this.element.dataset.total = String(this.rows.length);
    this.element.dataset.page = String(this.page + 1);
    const log = window.escrowConsole && window.escrowConsole.renders;
    if (log) {
      log.push({table: this.id, ms, rows: this.rows.length, shown: to - from});
      if (log.length > 200) log.splice(0, log.length - 200);
    }
  }
}
