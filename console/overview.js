// #/overview: the broker at a glance, and live charts of the last five minutes from the metrics
// poller (metrics.js): messages in and out per second, stored messages and bytes, how full the
// store and the commit log are, connections. The current numbers stand beside each chart.
import {h, replace, facts} from "./dom.js";
import {LineChart, niceStepBytes} from "./chart.js";
import {metrics, commitLogUse} from "./metrics.js";
import * as fmt from "./format.js";

const compact = new Intl.NumberFormat("en-US", {notation: "compact", maximumFractionDigits: 1});
const axisCount = (v) => compact.format(v);
const axisRate = (v) => `${compact.format(v)}/s`;
const axisBytes = (v) => (v === 0 ? "0" : fmt.bytes(v));
const axisPercent = (v) => `${Math.round(v * 100)}%`;

const kCharts = [
  {id: "rates", title: "Messages in and out", format: axisRate, minTop: 1,
   series: [{label: "in (enqueued)", key: "rateIn", color: "--series-1", show: fmt.rate},
            {label: "out (acknowledged)", key: "rateOut", color: "--series-2", show: fmt.rate}]},
  {id: "stored", title: "Stored messages", format: axisCount, minTop: 10,
   series: [{label: "stored", key: "depth", color: "--series-1", show: fmt.count},
            {label: "in flight", key: "inFlight", color: "--series-3", show: fmt.count}]},
  {id: "bytes", title: "Stored bytes", format: axisBytes, minTop: 1024 * 1024, step: niceStepBytes,
   series: [{label: "live pages", key: "liveBytes", color: "--series-1", show: fmt.bytes},
            {label: "data.mdb on disk", key: "fileBytes", color: "--series-2", show: fmt.bytes}]},
  {id: "fill", title: "Store and commit log fill", format: axisPercent, max: 1,
   series: [{label: "store map", key: "storeFill", color: "--series-1", show: fmt.percent},
            {label: "commit log", key: "logFill", color: "--series-2", show: fmt.percent}]},
  {id: "connections", title: "Connections", format: axisCount, minTop: 5,
   series: [{label: "STOMP connections", key: "connections", color: "--series-1", show: fmt.count}]},
];

export function mount(view) {
  const summary = h("div", {class: "summary-facts"});
  const charts = [];
  const grid = h("div", {class: "charts"});
  for (const spec of kCharts) {
    const canvas = h("canvas", {class: "chart", id: `chart-${spec.id}`, role: "img",
                                "aria-label": spec.title + ", last five minutes"});
    const legend = h("ul", {class: "legend"});
    const values = spec.series.map((s) => {
      const value = h("span", {class: "value", dataset: {series: s.key}}, "–");
      legend.appendChild(h("li", null, h("span", {class: `swatch ${s.color.slice(2)}`}), h("span", {class: "label"}, s.label), value));
      return value;
    });
    grid.appendChild(h("section", {class: "card chart-card", id: `card-${spec.id}`},
      h("h2", null, spec.title), h("div", {class: "chart-body"}, canvas, legend)));
    const chart = new LineChart(canvas, {series: spec.series, format: spec.format, max: spec.max ?? null,
                                         minTop: spec.minTop ?? 1, step: spec.step});
    charts.push({spec, chart, values, legend});
  }
  const root = h("div", {class: "page overview", id: "overview"},
    h("h1", null, "Overview"), summary, grid,
    h("p", {class: "hint"}, "Sampled every 2 seconds, the last five minutes kept; rates are the differences of the broker's counters."));
  replace(view, root);

  function update(err) {
    const latest = metrics.latest;
    root.dataset.points = String(metrics.points.length);
    if (latest) renderSummary(summary, latest);
    else if (err) replace(summary, h("p", {class: "placeholder"}, "no metrics yet: " + err.reason));
    const times = metrics.points.map((p) => p.t);
    const last = metrics.points[metrics.points.length - 1] || {};
    for (const {spec, chart, values} of charts) {
      chart.setData(times, spec.series.map((s) => metrics.points.map((p) => p[s.key])));
      spec.series.forEach((s, i) => { values[i].textContent = s.show(last[s.key]); });
    }
    const noLog = latest && !commitLogUse(latest);
    const fillCard = charts.find((c) => c.spec.id === "fill");
    fillCard.legend.classList.toggle("log-unknown", !!noLog);
    if (noLog) fillCard.values[1].textContent = "not reported";
  }
  const unsubscribe = metrics.subscribe(update);
  update(metrics.lastError);
  return () => {
    unsubscribe();
    for (const c of charts) c.chart.destroy();
  };
}

function renderSummary(el, m) {
  const store = m.store || {};
  const totals = m.totals || {};
  const branches = m.branches || {};
  const prepared = branches.prepared ?? 0;
  const storeState = store.writable === false ? h("span", {class: "bad"}, "not writable (a sync failed: restart escrowd)")
    : store.refusing_sends ? h("span", {class: "warn"}, "refusing new messages (storage.max-size or min-free-disk)")
      : h("span", {class: "good"}, "writable");
  const log = commitLogUse(m);
  replace(el, facts([
    ["escrowd", `${m.version || "?"}, up ${fmt.seconds(m.uptime_seconds)}`],
    ["listeners", (m.listeners || []).join(", ") || "none"],
    ["store", h("span", null, storeState, `, ${fmt.bytes(store.file_bytes)} on disk, map ${fmt.bytes(store.map_used_bytes)} of ` +
      `${fmt.bytes(store.map_size_bytes)}, ${fmt.bytes(store.disk_free_bytes)} free on its disk`)],
    ["commit log", log ? `${fmt.percent(log.used / log.size)} of ${fmt.bytes(store.log_bytes)}` : `${fmt.bytes(store.log_bytes)} ring`],
    ["queues", `${fmt.count(totals.queues)} holding ${fmt.count(totals.depth)} messages (${fmt.count(totals.in_flight)} in flight)`],
    ["since start", `${fmt.count(totals.enqueued)} enqueued, ${fmt.count(totals.acknowledged)} acknowledged, ` +
      `${fmt.count(totals.expired)} expired, ${fmt.count(totals.dead_lettered)} dead-lettered, ` +
      `${fmt.count(totals.failed_logins)} failed logins`],
    ["XA branches", h("span", {class: prepared ? "warn" : null},
      Object.entries(branches).filter(([, n]) => n).map(([s, n]) => `${n} ${s}`).join(", ") || "none",
      prepared ? `; the oldest prepared for ${fmt.seconds(m.xa_oldest_prepared_age_seconds)}` : "")],
  ], "facts summary"));
}
