// DOM helpers. Everything the console shows is built with these, so text from the broker (queue
// names, headers, bodies) always goes in as text, never as markup: no innerHTML anywhere.

// h("tr", {class: "x", dataset: {name: "q"}, onclick: f}, child, "text", [more children]) -> Element.
// Attributes: class, dataset (an object), on<event> (a listener), hidden/disabled/checked (booleans),
// anything else through setAttribute. Children: nodes, strings, numbers, arrays; null and false are
// skipped.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [name, value] of Object.entries(attrs)) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") el.className = value;
      else if (name === "dataset") Object.assign(el.dataset, value);
      else if (name.startsWith("on") && typeof value === "function") el.addEventListener(name.slice(2), value);
      else if (value === true) el.setAttribute(name, "");
      else el.setAttribute(name, String(value));
    }
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
  return el;
}

// Replaces every child of `el` with `children`.
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

// A link to a console page: route("queue", name) -> "#/queue/NAME" (the name percent-encoded).
export function route(page, ...args) {
  return "#/" + [page, ...args.map((a) => encodeURIComponent(a))].join("/");
}

// A definition list of [label, value] pairs as a two-column table (values: nodes or text).
export function facts(pairs, cls = "facts") {
  return h("table", {class: cls},
    h("tbody", null, pairs.filter((p) => p).map(([label, value]) =>
      h("tr", null, h("th", {scope: "row"}, label), h("td", null, value)))));
}

// The note a page shows instead of its content when the API refused it for want of the admin
// permission (403), with what the user can still do.
export function adminNote(what, session, extra) {
  return h("div", {class: "note needs-admin", role: "note"},
    h("strong", null, "This needs the admin permission: "),
    `only operators see ${what}`,
    session && session.user ? ` (user '${session.user}' is not one)` : "",
    ". Ask for the admin role, or browse a queue by name.",
    extra || null);
}
