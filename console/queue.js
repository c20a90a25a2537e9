// #/queue/NAME: one queue or durable subscription. Its details and consumers (ADMIN queue-show,
// operators only), its stored messages in delivery order (ADMIN browse, which changes nothing:
// for anyone with the browse permission on the queue's address), each message's headers and body,
// and for operators Purge and, for a queue of dead letters or expired messages, moving them back
// to where they came from (ADMIN move, with the _HQ_ORIG_ADDRESS filter) or elsewhere.
//
// Browse pages with a cursor: a page asks for 50 messages after the `next` of the page before
// (kept for every page seen, so Previous goes back without a scan), however deep the queue.
import {h, replace, route, facts, adminNote} from "./dom.js";
import * as api from "./api.js";
import * as fmt from "./format.js";
import {confirmAction, notify, showError, actionButton} from "./ui.js";

const kPageSize = 50;
const kBodyShown = 64 * 1024;
const kOriginHeader = "_HQ_ORIG_ADDRESS";

export function mount(view, ctx) {
  const name = ctx.params[0] || "";
  const details = h("section", {class: "card details", id: "queue-details"}, h("p", {class: "placeholder"}, "loading…"));
  const actions = h("section", {class: "card actions", id: "queue-actions", hidden: true});
  const messages = h("section", {class: "card messages", id: "queue-messages"});
  const root = h("div", {class: "page queue", id: "queue", dataset: {name}},
    h("p", {class: "crumbs"}, h("a", {href: route("queues")}, "Queues"), " / "),
    h("h1", null, h("span", {class: "kind-label"}, "Queue "), h("span", {id: "queue-name"}, name)),
    details, actions, messages);
  replace(view, root);

  let stopped = false;
  let timer = null;
  let page = 0;
  let browsed = [];  // the messages of the page shown
  let cursors = [null];  // cursors[p]: the `after` that asks for page p (null: the head)
  let more = false;  // another page follows the one shown
  let selected = null;  // message_id shown in the detail panel

  // -- details ------------------------------------------------------------------------------------

  async function loadDetails() {
    clearTimeout(timer);
    try {
      const q = await api.get("admin/queue-show", {name});
      if (stopped) return;
      renderDetails(q);
      details.dataset.depth = String(q.depth);
    } catch (err) {
      if (stopped) return;
      if (err.status === 403) {
        replace(details, adminNote("the details of a queue (depth, settings, consumers)", ctx.session,
                                   h("span", null, " Its messages are below, if you may browse them.")));
        details.dataset.refused = "true";
        return;  // not again
      }
      if (err.status === 404) {
        replace(details, h("p", {class: "note"}, err.reason));
        details.dataset.missing = "true";
      } else {
        showError(err);
      }
    }
    if (!stopped) timer = setTimeout(loadDetails, 5000);
  }

  function renderDetails(q) {
    const s = q.settings || {};
    const ms = (v) => (v === undefined || v === null ? "–" : v < 0 ? "none" : `${fmt.count(v)} ms`);
    replace(details,
      h("h2", null, "Details"),
      h("div", {class: "columns"},
        facts([
          ["kind", q.topic ? `${q.kind} of topic ${q.topic}` : q.kind],
          ["depth", h("span", {id: "queue-depth"}, fmt.count(q.depth))],
          ["in flight", fmt.count(q.in_flight)],
          ["consumers", fmt.count(q.consumers)],
          ["oldest message", fmt.age(q.oldest_age_ms)],
          ["since start", `${fmt.count(q.enqueued)} enqueued, ${fmt.count(q.delivered)} delivered, ` +
            `${fmt.count(q.acknowledged)} acknowledged, ${fmt.count(q.redelivered)} redelivered, ` +
            `${fmt.count(q.expired)} expired, ${fmt.count(q.dead_lettered)} dead-lettered` +
            (q.dropped ? `, ${fmt.count(q.dropped)} dropped` : "")],
        ]),
        facts([
          ["address", s.address ?? "–"],
          ["dead-letter-address", s.dead_letter_address || "none (dead letters are dropped)"],
          ["expiry-address", s.expiry_address || "none (expired messages are dropped)"],
          ["max-delivery-attempts", s.max_delivery_attempts === -1 ? "unlimited" : fmt.count(s.max_delivery_attempts)],
          ["expiry-delay", ms(s.expiry_delay_ms)],
          ["redelivery-delay", ms(s.redelivery_delay_ms)],
        ])),
      consumersTable(q.consumers_detail || []));
  }

  // -- actions (operators) ------------------------------------------------------------------------

  function renderActions() {
    if (!ctx.session.admin) {
      actions.hidden = true;
      return;
    }
    actions.hidden = false;
    const purge = actionButton("Purge…", purgeQueue, {id: "purge-button", class: "danger"});
    const parts = [h("h2", null, "Actions"),
      h("div", {class: "action-row"}, purge,
        h("span", {class: "hint"}, "deletes every ready message for good; held ones (in flight, in a transaction) stay"))];
    const origins = [...new Set(browsed.map((m) => m.headers && m.headers[kOriginHeader]).filter(Boolean))];
    if (origins.length || looksLikeDeadLetters(name)) {
      const back = origins.map((origin) => {
        const n = browsed.filter((m) => m.headers && m.headers[kOriginHeader] === origin).length;
        return actionButton(`Move back to ${origin}…`, () => moveMessages(origin, origin),
                            {class: "move-back", dataset: {origin}, title: `${n} of the messages shown came from ${origin}`});
      });
      const target = h("input", {type: "text", id: "move-target", placeholder: "orders or /queue/orders or /topic/t",
                                 "aria-label": "destination to move to", autocomplete: "off", spellcheck: "false"});
      const onlyFrom = h("select", {id: "move-filter", "aria-label": "which messages"},
        h("option", {value: ""}, "every message"),
        origins.map((o) => h("option", {value: o}, `only those from ${o}`)));
      const form = h("form", {class: "move-form", id: "move-form"},
        h("label", {for: "move-target"}, "Move "), onlyFrom, h("span", null, " to "), target,
        h("button", {type: "submit"}, "Move…"));
      form.addEventListener("submit", (e) => {
        e.preventDefault();
        const to = target.value.trim();
        if (!to) {
          notify("name the queue or topic to move the messages to", "error");
          return;
        }
        moveMessages(to, onlyFrom.value || null);
      });
      parts.push(h("div", {class: "move"},
        h("h3", null, "Dead letters and expired messages"),
        origins.length ? h("div", {class: "action-row"}, back,
          h("span", {class: "hint"}, "moves the messages whose _HQ_ORIG_ADDRESS is that address back to it")) : null,
        form));
    }
    replace(actions, ...parts);
  }

  async function purgeQueue() {
    const ok = await confirmAction({
      title: `Purge ${name}?`,
      text: [`Every ready message of ${name} is deleted for good. Messages in flight or held by a transaction stay ` +
             "(they return to the queue if they are not acknowledged).", "This cannot be undone."],
      confirmLabel: "Purge", typeToConfirm: name});
    if (!ok) return;
    try {
      const r = await api.post("admin/purge", {name});
      notify(`purged ${fmt.count(r.purged)} ${r.purged === 1 ? "message" : "messages"} from ${r.queue}` +
             (r.held_left ? `; ${fmt.count(r.held_left)} in flight or in a transaction stay (they return if not acknowledged)` : ""),
             "ok");
    } catch (err) {
      showError(err);
    }
    page = 0;  // the cursors past the head name messages that may have gone
    cursors = [null];
    await Promise.all([loadDetails(), loadMessages()]);
  }

  async function moveMessages(to, filter) {
    const which = filter ? `the messages of ${name} that came from ${filter}` : `every stored message of ${name}`;
    const ok = await confirmAction({
      title: `Move messages of ${name}?`,
      text: [`Moves ${which} to ${to}. Each message arrives there as a fresh copy (a new id, delivery count 0, ` +
             "the _HQ_ headers removed) and leaves this queue in the same store batch.",
             "Messages in flight or in a transaction are skipped."],
      confirmLabel: "Move", danger: false});
    if (!ok) return;
    const body = {from: name, to};
    if (filter) body.filter = filter;
    try {
      const r = await api.post("admin/move", body);
      notify(`moved ${fmt.count(r.moved)} ${r.moved === 1 ? "message" : "messages"} from ${r.from} to ${r.to}` +
             (r.held_skipped ? `; ${fmt.count(r.held_skipped)} held ones skipped` : ""), "ok");
    } catch (err) {
      showError(err);
    }
    page = 0;  // the cursors past the head name messages that may have gone
    cursors = [null];
    await Promise.all([loadDetails(), loadMessages()]);
  }

  // -- messages -----------------------------------------------------------------------------------

  async function loadMessages() {
    replace(messages, h("h2", null, "Messages"), h("p", {class: "placeholder"}, "loading…"));
    try {
      const params = {name, count: kPageSize};
      if (cursors[page]) params.after = cursors[page];
      const r = await api.get("admin/browse", params);
      if (stopped) return;
      browsed = r.messages || [];
      more = Boolean(r.more);
      cursors.length = page + 1;
      if (more) cursors.push(r.next);
      renderMessages();
    } catch (err) {
      if (stopped) return;
      browsed = [];
      messages.dataset.refused = err.status === 403 ? "true" : "false";
      replace(messages, h("h2", null, "Messages"),
        h("p", {class: err.status === 403 ? "note needs-permission" : "note"},
          err.status === 403 ? `Browsing ${name} was refused: ${err.reason}` : err.reason));
      if (err.status !== 403 && err.status !== 404) showError(err);
    }
    renderActions();
  }

  function renderMessages() {
    const from = page * kPageSize;
    const shown = browsed;
    const now = Date.now();
    const rows = shown.map((m) => {
      const origin = m.headers ? m.headers[kOriginHeader] : null;
      const tr = h("tr", {class: m.message_id === selected ? "selected" : null, dataset: {id: String(m.message_id)},
                          tabindex: "0"},
        h("td", {class: "num"}, String(m.message_id)),
        h("td", {class: "num"}, String(m.priority)),
        h("td", {class: "num"}, String(m.delivery_count)),
        h("td", {class: `state ${m.state}`}, m.state),
        h("td", {class: "num"}, m.readable && m.timestamp ? fmt.age(now - m.timestamp) : "–"),
        h("td", null, origin || ""),
        h("td", {class: "num"}, m.readable ? fmt.count(m.body_bytes) : "–"),
        h("td", {class: "body-preview"}, m.readable ? fmt.preview(m.body) : h("em", null, "unreadable record")));
      const open = () => showMessage(m, tr);
      tr.addEventListener("click", open);
      tr.addEventListener("keydown", (e) => { if (e.key === "Enter") open(); });
      return tr;
    });
    const prev = h("button", {type: "button", class: "page-prev", disabled: page === 0}, "‹ Previous");
    const next = h("button", {type: "button", class: "page-next", disabled: !more}, "Next ›");
    prev.addEventListener("click", () => { page = Math.max(0, page - 1); loadMessages(); });
    next.addEventListener("click", () => { page++; loadMessages(); });
    const refresh = h("button", {type: "button", id: "browse-refresh"}, "Refresh");
    refresh.addEventListener("click", loadMessages);
    const panel = h("div", {class: "message-detail", id: "message-detail", hidden: true});
    replace(messages,
      h("h2", null, "Messages"),
      h("div", {class: "bar"},
        h("span", {class: "status-line"}, shown.length
          ? `messages ${fmt.count(from + 1)}–${fmt.count(from + shown.length)} in delivery order`
          : page === 0 ? "no stored messages" : "no more messages"),
        refresh),
      h("div", {class: "scroll"}, h("table", {class: "data", id: "messages-table"},
        h("thead", null, h("tr", null, ["ID", "Priority", "Deliveries", "State", "Age", "Origin", "Bytes", "Body"].map((label, i) =>
          h("th", {scope: "col", class: [0, 1, 2, 4, 6].includes(i) ? "num" : null}, label)))),
        h("tbody", null, rows.length ? rows
          : h("tr", {class: "empty"}, h("td", {colspan: 8}, "nothing stored (non-persistent messages are not shown)"))))),
      h("div", {class: "pager"}, prev, h("span", {class: "page-label"}, `page ${page + 1}`), next),
      panel);
    messages.dataset.count = String(browsed.length);
    messages.dataset.page = String(page + 1);
    const again = shown.find((m) => m.message_id === selected);
    if (again) showMessage(again, rows[shown.indexOf(again)]);
  }

  function showMessage(m, tr) {
    selected = m.message_id;
    for (const other of messages.querySelectorAll("tr.selected")) other.classList.remove("selected");
    if (tr) tr.classList.add("selected");
    const panel = messages.querySelector("#message-detail");
    if (!panel) return;
    panel.hidden = false;
    if (!m.readable) {
      replace(panel, h("h3", null, `Message ${m.message_id}`),
        h("p", {class: "note"}, "Its record could not be read (escrow check examines the store)."));
      return;
    }
    const headers = Object.entries(m.headers || {});
    const body = String(m.body ?? "");
    replace(panel,
      h("h3", null, `Message ${m.message_id}`),
      h("button", {type: "button", class: "close", "aria-label": "close", onclick: () => {
        panel.hidden = true;
        selected = null;
        if (tr) tr.classList.remove("selected");
      }}, "×"),
      facts([
        ["destination", m.destination],
        ["state", m.state],
        ["priority", String(m.priority)],
        ["deliveries", String(m.delivery_count)],
        ["persistent", m.persistent ? "yes" : "no"],
        ["timestamp", fmt.time(m.timestamp)],
        ["expires", m.expires ? fmt.time(m.expires) : "never"],
        ["body", `${fmt.count(m.body_bytes)} bytes` + (m.body_utf8 === false ? ", not UTF-8 (such bytes are shown as �)" : "")],
      ]),
      h("h4", null, "Headers"),
      headers.length ? h("table", {class: "data headers"}, h("tbody", null, headers.map(([k, v]) =>
        h("tr", null, h("th", {scope: "row"}, k), h("td", null, String(v)))))) : h("p", null, "none"),
      h("h4", null, "Body"),
      h("pre", {class: "body", id: "message-body"}, body.length > kBodyShown ? body.slice(0, kBodyShown) : body),
      body.length > kBodyShown ? h("p", {class: "hint"}, `the first ${fmt.count(kBodyShown)} characters of ${fmt.count(body.length)}`) : null);
  }

  loadDetails();
  loadMessages();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

function consumersTable(list) {
  return h("div", {class: "consumers"},
    h("h3", null, "Consumers"),
    list.length ? h("table", {class: "data", id: "consumers-table"},
      h("thead", null, h("tr", null, h("th", {class: "num"}, "Connection"), h("th", null, "Subscription"),
                          h("th", null, "Ack"), h("th", {class: "num"}, "In flight"))),
      h("tbody", null, list.map((c) => h("tr", null,
        h("td", {class: "num"}, String(c.connection)), h("td", null, c.subscription), h("td", null, c.ack),
        h("td", {class: "num"}, fmt.count(c.in_flight))))))
      : h("p", {class: "hint"}, "none"));
}

function looksLikeDeadLetters(name) {
  return /^(DLQ|ExpiryQueue)$|dlq|dead|expir/i.test(name);
}
