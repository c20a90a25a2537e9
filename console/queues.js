// #/queues: every queue and durable subscription (ADMIN queues, every page of it), with rates from
// the differences between two fetches. Sorted, filtered and paged in memory (table.js), so that
// 10,000 queues or more stay quick; fetched again every 5 seconds, or less often when a fetch of
// all of them takes long. Anyone may open a queue by name here, admin or not.
import {h, replace, route, adminNote} from "./dom.js";
import * as api from "./api.js";
import * as fmt from "./format.js";
import {DataTable} from "./table.js";
import {showError} from "./ui.js";

const kRefreshMs = 5000;

// The form that opens #/queue/NAME: what a user without admin uses to browse.
export function openQueueForm() {
  const input = h("input", {type: "text", id: "open-queue-name", placeholder: "queue name, e.g. orders",
                            "aria-label": "queue name", autocomplete: "off", spellcheck: "false"});
  const form = h("form", {class: "open-queue", id: "open-queue"},
    h("label", {for: "open-queue-name"}, "Open a queue by name "), input,
    h("button", {type: "submit"}, "Browse"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const name = input.value.trim().replace(/^\/queue\//, "");
    if (name) location.hash = route("queue", name);
  });
  return form;
}

export const queueColumns = [
  {key: "name", label: "Name", render: (q) => h("a", {href: route("queue", q.name), class: "queue-link"}, q.name)},
  {key: "kind", label: "Kind", render: (q) => (q.topic ? `${q.kind} (${q.topic})` : q.kind)},
  {key: "depth", label: "Depth", numeric: true, render: (q) => fmt.count(q.depth)},
  {key: "in_flight", label: "In flight", numeric: true, render: (q) => fmt.count(q.in_flight)},
  {key: "consumers", label: "Consumers", numeric: true, render: (q) => fmt.count(q.consumers)},
  {key: "rate_in", label: "In/s", numeric: true, render: (q) => fmt.rate(q.rate_in)},
  {key: "rate_out", label: "Out/s", numeric: true, render: (q) => fmt.rate(q.rate_out)},
  {key: "enqueued", label: "Enqueued", numeric: true, render: (q) => fmt.count(q.enqueued)},
  {key: "acknowledged", label: "Acked", numeric: true, render: (q) => fmt.count(q.acknowledged)},
  {key: "dead_lettered", label: "Dead-lettered", numeric: true, render: (q) => fmt.count(q.dead_lettered)},
  {key: "expired", label: "Expired", numeric: true, render: (q) => fmt.count(q.expired)},
  {key: "oldest_age_ms", label: "Oldest", numeric: true, render: (q) => fmt.age(q.oldest_age_ms)},
];

export function mount(view, ctx) {
  const status = h("span", {class: "status-line", id: "queues-status"}, "loading…");
  const refresh = h("button", {type: "button", id: "queues-refresh"}, "Refresh");
  const table = new DataTable({id: "queues", columns: queueColumns, filterText: (q) => q.name,
                               filterPlaceholder: "filter by name", sort: {key: "name", dir: 1},
                               emptyText: "no queues yet: a SEND to /queue/NAME creates one",
                               rowClass: (q) => (q.depth > 0 && q.consumers === 0 ? "unconsumed" : null)});
  const body = h("section", {class: "card queues-body"}, table.element);
  const root = h("div", {class: "page queues", id: "queues"},
    h("h1", null, "Queues and topics"),
    openQueueForm(),
    h("div", {class: "bar"}, status, refresh),
    body);
  replace(view, root);

  let timer = null;
  let stopped = false;
  let previous = new Map();  // name -> {enqueued, acknowledged, t} of the last fetch
  let loading = false;

  async function load() {
    if (loading || stopped) return;
    loading = true;
    clearTimeout(timer);
    const started = performance.now();
    let fetchMs = 0;
    try {
      const all = await api.fetchAll("queues", ["queues"]);
      if (stopped) return;
      fetchMs = performance.now() - started;
      const processStart = performance.now();
      const now = Date.now();
      const next = new Map();
      for (const q of all.queues) {
        const before = previous.get(q.name);
        const dt = before ? (now - before.t) / 1000 : 0;
        q.rate_in = before && dt > 0 && q.enqueued >= before.enqueued ? (q.enqueued - before.enqueued) / dt : null;
        q.rate_out = before && dt > 0 && q.acknowledged >= before.acknowledged
          ? (q.acknowledged - before.acknowledged) / dt : null;
        next.set(q.name, {enqueued: q.enqueued, acknowledged: q.acknowledged, t: now});
      }
      previous = next;
      table.setRows(all.queues);
      const processMs = performance.now() - processStart;
      replace(status, `${fmt.count(all.queues.length)} queues and durable subscriptions, ${all.pages} ` +
              `${all.pages === 1 ? "page" : "pages"} fetched in ${Math.round(fetchMs)} ms, shown in ` +
              `${processMs.toFixed(1)} ms; refreshed every ${Math.round(nextDelay(fetchMs) / 1000)} s`);
      root.dataset.loaded = String(all.queues.length);
      if (window.escrowConsole) {
        window.escrowConsole.queuesLoad = {rows: all.queues.length, pages: all.pages, fetchMs, processMs,
                                           renderMs: table.lastRenderMs};
      }
    } catch (err) {
      if (stopped) return;
      if (err.status === 403) {
        replace(body, adminNote("the list of queues", ctx.session));
        replace(status, "");
        refresh.hidden = true;
        root.dataset.loaded = "refused";
        return;  // no point in asking again
      }
      showError(err);
      replace(status, "could not fetch the queues: " + err.reason);
    } finally {
      loading = false;
    }
    if (!stopped) timer = setTimeout(load, nextDelay(fetchMs));
  }

  refresh.addEventListener("click", load);
  load();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

// Every 5 s, but never more than a fifth of the time spent fetching.
function nextDelay(fetchMs) {
  return Math.max(kRefreshMs, 5 * fetchMs);
}
