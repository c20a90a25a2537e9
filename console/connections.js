// #/connections: open STOMP connections (ADMIN connections), every consumer's subscription and
// every durable subscription (ADMIN subscriptions, whose pages hold both lists). All pages are
// fetched and shown 50 rows at a time; fetched again every 5 seconds.
import {h, replace, route, adminNote} from "./dom.js";
import * as api from "./api.js";
import * as fmt from "./format.js";
import {DataTable} from "./table.js";
import {showError} from "./ui.js";

const queueLink = (name) => h("a", {href: route("queue", name)}, name);

export function mount(view, ctx) {
  const connections = new DataTable({
    id: "connections", sort: {key: "id", dir: 1}, emptyText: "no open connections",
    filterText: (c) => `${c.id} ${c.peer} ${c.user} ${c.login} ${c.client_id}`, filterPlaceholder: "filter: peer, user, client-id",
    columns: [
      {key: "id", label: "ID", numeric: true},
      {key: "peer", label: "Peer"},
      {key: "user", label: "User"},
      {key: "login", label: "Login"},
      {key: "client_id", label: "Client-id"},
      {key: "version", label: "STOMP"},
      {key: "subscriptions", label: "Subscriptions", numeric: true, render: (c) => fmt.count(c.subscriptions)},
      {key: "in_flight", label: "In flight", numeric: true, render: (c) => fmt.count(c.in_flight)},
      {key: "transactions", label: "Transactions", numeric: true, render: (c) => fmt.count(c.transactions)},
      {key: "xa_branch", label: "XA branch", cls: "xid"},
    ]});
  const subscriptions = new DataTable({
    id: "subscriptions", sort: {key: "connection", dir: 1}, emptyText: "no consumers",
    filterText: (s) => `${s.connection} ${s.id} ${s.destination} ${s.queue}`, filterPlaceholder: "filter: id, destination",
    columns: [
      {key: "connection", label: "Connection", numeric: true},
      {key: "id", label: "ID"},
      {key: "kind", label: "Kind"},
      {key: "destination", label: "Destination"},
      {key: "queue", label: "Queue", render: (s) => queueLink(s.queue)},
      {key: "ack", label: "Ack"},
      {key: "in_flight", label: "In flight", numeric: true, render: (s) => fmt.count(s.in_flight)},
      {key: "depth", label: "Depth", numeric: true, render: (s) => fmt.count(s.depth)},
    ]});
  const durable = new DataTable({
    id: "durable", sort: {key: "name", dir: 1}, emptyText: "no durable subscriptions",
    filterText: (d) => `${d.name} ${d.user} ${d.topic}`, filterPlaceholder: "filter: name, user, topic",
    columns: [
      {key: "name", label: "Name", render: (d) => queueLink(d.name)},
      {key: "client_id", label: "Client-id"},
      {key: "subscription", label: "Subscription"},
      {key: "user", label: "User"},
      {key: "topic", label: "Topic"},
      {key: "active", label: "Active", value: (d) => (d.active ? 1 : 0), render: (d) => (d.active ? "yes" : "no")},
      {key: "depth", label: "Depth", numeric: true, render: (d) => fmt.count(d.depth)},
    ]});
  const status = h("span", {class: "status-line"}, "loading…");
  const refresh = h("button", {type: "button", id: "connections-refresh"}, "Refresh");
  const body = h("div", null,
    h("section", {class: "card"}, h("h2", null, "Connections"), connections.element),
    h("section", {class: "card"}, h("h2", null, "Subscriptions"), subscriptions.element),
    h("section", {class: "card"}, h("h2", null, "Durable subscriptions"),
      h("p", {class: "hint"}, "Depth: the messages waiting for the subscription, how far behind it is."), durable.element));
  const root = h("div", {class: "page connections", id: "connections-page"},
    h("h1", null, "Connections and subscriptions"), h("div", {class: "bar"}, status, refresh), body);
  replace(view, root);

  let stopped = false;
  let timer = null;
  async function load() {
    clearTimeout(timer);
    try {
      const [c, s] = await Promise.all([
        api.fetchAll("connections", ["connections"]),
        api.fetchAll("subscriptions", ["subscriptions", "durable"]),
      ]);
      if (stopped) return;
      connections.setRows(c.connections);
      subscriptions.setRows(s.subscriptions);
      durable.setRows(s.durable);
      replace(status, `${fmt.count(c.connections.length)} connections, ${fmt.count(s.subscriptions.length)} subscriptions, ` +
              `${fmt.count(s.durable.length)} durable subscriptions; refreshed every 5 s`);
      root.dataset.loaded = "true";
    } catch (err) {
      if (stopped) return;
      if (err.status === 403) {
        replace(body, adminNote("the connections and subscriptions", ctx.session));
        replace(status, "");
        refresh.hidden = true;
        root.dataset.loaded = "refused";
        return;
      }
      showError(err);
    }
    if (!stopped) timer = setTimeout(load, 5000);
  }
  refresh.addEventListener("click", load);
  load();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
