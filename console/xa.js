// #/xa: transaction branches (ADMIN xa-list, every page). In doubt first: prepared branches,
// waiting for their transaction manager, and heuristically completed ones, waiting to be
// forgotten; each with its owner, age and what it holds (the messages it sends, and where they go
// on commit; the messages it consumed, and from where). Operators may decide a prepared branch
// heuristically (commit or roll back) and forget a completed one, after a confirmation that says
// what a heuristic decision risks (docs/operations.md, "Resolving in-doubt transactions").
// Below: the branches of running transactions, which are not in doubt.
import {h, replace, adminNote} from "./dom.js";
import * as api from "./api.js";
import * as fmt from "./format.js";
import {DataTable} from "./table.js";
import {confirmAction, notify, showError} from "./ui.js";

const kListed = 5;  // sends and consumptions listed per branch; the rest are counted

const inDoubt = (b) => b.state === "prepared" || b.state.startsWith("heuristically");

function holds(b) {
  const lines = [];
  for (const s of b.sent || []) {
    const to = (s.queues || []).join(", ") || "no queue (nothing subscribed)";
    lines.push(`sends message ${s.message_id} to ${to}`);
  }
  for (const c of b.consumed || []) {
    lines.push(c.nack ? `returns message ${c.message_id} to ${c.queue} (NACK)` : `consumed message ${c.message_id} of ${c.queue}`);
  }
  if (!lines.length) return h("span", {class: "hint"}, "nothing");
  const shown = lines.slice(0, kListed);
  return h("ul", {class: "holds"}, shown.map((l) => h("li", null, l)),
    lines.length > kListed ? h("li", {class: "hint"}, `and ${lines.length - kListed} more`) : null);
}

export function mount(view, ctx) {
  const actionsColumn = {key: "actions", label: "Decide", value: () => null, render: (b) => decideButtons(b)};
  const baseColumns = [
    {key: "xid", label: "XID", render: (b) => h("code", {class: "xid", dataset: {xid: b.xid}}, b.xid + (b.local ? " (local)" : ""))},
    {key: "user", label: "Owner", render: (b) => b.user || h("span", {class: "hint"}, "anonymous")},
    {key: "state", label: "State", render: (b) => h("span", {class: `state ${b.state.replace(/ /g, "-")}`}, b.state)},
    {key: "age_ms", label: "Age", numeric: true, render: (b) => fmt.age(b.age_ms)},
    {key: "sent", label: "Sent", numeric: true, value: (b) => (b.sent || []).length, render: (b) => String((b.sent || []).length)},
    {key: "consumed", label: "Consumed", numeric: true, value: (b) => (b.consumed || []).length,
     render: (b) => String((b.consumed || []).length)},
    {key: "holds", label: "What it holds", value: () => null, render: holds},
  ];
  const doubtful = new DataTable({id: "xa-in-doubt", sort: {key: "age_ms", dir: -1},
                                  columns: ctx.session.admin ? [...baseColumns, actionsColumn] : baseColumns,
                                  filterText: (b) => `${b.xid} ${b.user} ${b.state}`, filterPlaceholder: "filter: xid, owner, state",
                                  emptyText: "no branch is in doubt",
                                  rowClass: (b) => (b.state === "prepared" ? "prepared" : "heuristic")});
  const running = new DataTable({id: "xa-running", sort: {key: "age_ms", dir: -1}, columns: baseColumns,
                                 filterText: (b) => `${b.xid} ${b.user} ${b.state}`, filterPlaceholder: "filter: xid, owner, state",
                                 emptyText: "no running transaction"});
  const status = h("span", {class: "status-line"}, "loading…");
  const refresh = h("button", {type: "button", id: "xa-refresh"}, "Refresh");
  const body = h("div", null,
    h("section", {class: "card"}, h("h2", null, "In doubt"),
      h("p", {class: "hint"},
        "A prepared branch waits for its transaction manager: restart the manager or fix its connection first, and decide " +
        "here only when it cannot come back in time and you know what it decided. A heuristically completed branch stays " +
        "listed until the manager (or Forget) forgets it."),
      doubtful.element),
    h("section", {class: "card"}, h("h2", null, "Running transactions (not in doubt)"),
      h("p", {class: "hint"}, "Active and idle branches belong to running transactions; escrowd rolls them back itself " +
        "when they are not prepared within transactions.timeout-ms."),
      running.element));
  const root = h("div", {class: "page xa", id: "xa"}, h("h1", null, "In-doubt XA branches"),
    h("div", {class: "bar"}, status, refresh), body);
  replace(view, root);

  let stopped = false;
  let timer = null;
  async function load() {
    clearTimeout(timer);
    try {
      const all = await api.fetchAll("xa-list", ["branches"]);
      if (stopped) return;
      const doubt = all.branches.filter(inDoubt);
      doubtful.setRows(doubt);
      running.setRows(all.branches.filter((b) => !inDoubt(b)));
      const prepared = doubt.filter((b) => b.state === "prepared").length;
      replace(status, `${fmt.count(prepared)} prepared, ${fmt.count(doubt.length - prepared)} heuristically completed, ` +
              `${fmt.count(all.branches.length - doubt.length)} running; refreshed every 5 s`);
      root.dataset.loaded = String(all.branches.length);
    } catch (err) {
      if (stopped) return;
      if (err.status === 403) {
        replace(body, adminNote("the transaction branches", ctx.session));
        replace(status, "");
        refresh.hidden = true;
        root.dataset.loaded = "refused";
        return;
      }
      showError(err);
    }
    if (!stopped) timer = setTimeout(load, 5000);
  }

  function decideButtons(b) {
    const cell = h("div", {class: "decide"});
    if (b.state === "prepared") {
      cell.append(
        h("button", {type: "button", class: "xa-commit", onclick: () => decide(b, "xa-commit")}, "Commit…"),
        h("button", {type: "button", class: "xa-rollback", onclick: () => decide(b, "xa-rollback")}, "Roll back…"));
    } else if (b.state.startsWith("heuristically")) {
      cell.append(h("button", {type: "button", class: "xa-forget", onclick: () => decide(b, "xa-forget")}, "Forget…"));
    }
    return cell;
  }

  async function decide(b, command) {
    const who = b.user ? ` of user ${b.user}` : "";
    const texts = {
      "xa-commit": {title: `Commit branch ${b.xid}${who} heuristically?`, label: "Commit",
                    effect: "Its sends become visible and the messages it consumed are removed."},
      "xa-rollback": {title: `Roll back branch ${b.xid}${who} heuristically?`, label: "Roll back",
                      effect: "Its sends vanish and the messages it consumed return to their queues."},
      "xa-forget": {title: `Forget branch ${b.xid}${who}?`, label: "Forget",
                    effect: "The heuristically completed branch is removed; its transaction manager can no longer learn the outcome from escrowd."},
    }[command];
    const warning = command === "xa-forget"
      ? "Forget it only once the decision is recorded wherever your incident process needs it."
      : "This is a heuristic decision, taken without the transaction manager. If the manager decided the other way, this " +
        "branch and the transaction's other resources disagree and the data must be repaired by hand. The decision is " +
        "stored durably; the branch stays listed until it is forgotten.";
    const ok = await confirmAction({title: texts.title, text: [texts.effect, warning], confirmLabel: texts.label});
    if (!ok) return;
    try {
      await api.post("admin/" + command, {xid: b.xid, user: b.user || ""});
      notify(command === "xa-forget" ? `branch ${b.xid} forgotten`
        : `branch ${b.xid} ${command === "xa-commit" ? "committed" : "rolled back"} heuristically; forget it once the ` +
          "transaction manager has been told", "ok");
    } catch (err) {
      showError(err);
    }
    await load();
  }

  refresh.addEventListener("click", load);
  load();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
