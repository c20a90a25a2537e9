// #/config: the configuration in force (ADMIN config): every key of the file with the value escrowd
// runs with (defaults included), in the file's sections, with secrets hidden by the broker (files
// by their paths, passwords as ***). The answer is {config_file, command_line_keys, reloadable,
// config}; config is rendered as nested tables: one card per [section], a list of tables
// ([[address-settings]], ...) as a table with a column per key. Keys that SIGHUP applies, and
// keys the command line set, are marked.
import {h, replace, facts, adminNote} from "./dom.js";
import * as api from "./api.js";
import {showError} from "./ui.js";

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const isTableList = (v) => Array.isArray(v) && v.every(isObject);

function scalar(v) {
  if (v === null || v === undefined) return h("span", {class: "hint"}, "–");
  if (typeof v === "string") return v === "" ? h("span", {class: "hint"}, "\"\"") : h("code", null, v);
  return h("code", {class: typeof v}, String(v));
}

// marks(path) -> nodes shown after a key: whether SIGHUP applies it, whether the command line set it.
function render(v, path, marks) {
  if (Array.isArray(v)) {
    if (!v.length) return h("span", {class: "hint"}, "none");
    if (isTableList(v)) {
      const keys = [];
      for (const item of v) for (const k of Object.keys(item)) if (!keys.includes(k)) keys.push(k);
      return h("table", {class: "data config-list"},
        h("thead", null, h("tr", null, keys.map((k) => h("th", {scope: "col"}, k)))),
        h("tbody", null, v.map((item) => h("tr", null,
          keys.map((k) => h("td", null, k in item ? render(item[k], `${path}.${k}`, () => []) : ""))))));
    }
    if (v.every((x) => !isObject(x) && !Array.isArray(x))) {
      return h("span", {class: "list"}, v.map((x, i) => [i ? ", " : "", scalar(x)]));
    }
    return h("ol", {class: "config-array"}, v.map((x, i) => h("li", null, render(x, `${path}.${i}`, marks))));
  }
  if (isObject(v)) {
    const entries = Object.entries(v);
    if (!entries.length) return h("span", {class: "hint"}, "empty");
    return h("table", {class: "config"}, h("tbody", null, entries.map(([k, x]) => {
      const p = path ? `${path}.${k}` : k;
      return h("tr", {dataset: {key: p}}, h("th", {scope: "row"}, k, marks(p)), h("td", null, render(x, p, marks)));
    })));
  }
  return scalar(v);
}

export function mount(view, ctx) {
  const body = h("div", {class: "config-body"}, h("p", {class: "placeholder"}, "loading…"));
  const root = h("div", {class: "page config-page", id: "config"}, h("h1", null, "Configuration in force"),
    h("p", {class: "hint"}, "The settings escrowd runs with, defaults included; secrets are not shown. Keys marked " +
      "SIGHUP change when escrowd reloads (docs/configuration.md, \"Reloading with SIGHUP\"); the others take a restart."),
    body);
  replace(view, root);
  let stopped = false;
  (async () => {
    try {
      const answer = await api.get("admin/config");
      if (stopped) return;
      replace(body, ...renderAnswer(answer || {}));
      root.dataset.loaded = "true";
    } catch (err) {
      if (stopped) return;
      if (err.status === 403) {
        replace(body, adminNote("the configuration", ctx.session));
        root.dataset.loaded = "refused";
        return;
      }
      replace(body, h("p", {class: "note"}, err.reason));
      showError(err);
    }
  })();
  return () => {
    stopped = true;
  };
}

function renderAnswer(answer) {
  const wrapped = isObject(answer.config);
  const settings = wrapped ? answer.config : answer;
  const reloadable = new Set(Array.isArray(answer.reloadable) ? answer.reloadable : []);
  const fromCommandLine = new Set(Array.isArray(answer.command_line_keys) ? answer.command_line_keys : []);
  const marks = (path) => {
    const out = [];
    if (reloadable.has(path)) out.push(h("span", {class: "badge reload", title: "SIGHUP applies a change"}, "SIGHUP"));
    if (fromCommandLine.has(path)) out.push(h("span", {class: "badge cli", title: "set on escrowd's command line"}, "command line"));
    return out;
  };
  const cards = [];
  if (wrapped) {
    cards.push(h("section", {class: "card", dataset: {key: "(file)"}}, facts([
      ["configuration file", answer.config_file ? h("code", null, answer.config_file)
        : h("span", {class: "hint"}, "none: the embedded defaults")],
      ["from the command line", fromCommandLine.size ? [...fromCommandLine].join(", ") : "nothing"],
    ])));
  }
  const general = {};
  for (const [key, value] of Object.entries(settings)) {
    if (isObject(value)) {
      cards.push(h("section", {class: "card", dataset: {key}}, h("h2", null, `[${key}]`, marks(key)), render(value, key, marks)));
    } else if (isTableList(value)) {
      cards.push(h("section", {class: "card", dataset: {key}}, h("h2", null, `[[${key}]]`, marks(key)), render(value, key, marks)));
    } else {
      general[key] = value;
    }
  }
  if (Object.keys(general).length) {
    cards.splice(wrapped ? 1 : 0, 0, h("section", {class: "card", dataset: {key: ""}}, h("h2", null, "Top level"),
                                        render(general, "", marks)));
  }
  return cards.length ? cards : [h("p", null, "escrowd reported no settings")];
}
