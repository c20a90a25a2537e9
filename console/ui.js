// The message bar (errors from the API, outcomes of actions) and the confirmation dialog every
// action that changes the broker goes through.
import {h, replace} from "./dom.js";

let bar = null;

export function initMessages(element) {
  bar = element;
}

// Shows `text` in the message bar. kind: "error" (stays until dismissed), "ok" or "info" (go
// away after a while). The same text twice in a row counts up instead of stacking.
export function notify(text, kind = "error") {
  if (!bar) return;
  const last = bar.lastElementChild;
  if (last && last.dataset.text === text && last.dataset.kind === kind) {
    const n = Number(last.dataset.repeat || "1") + 1;
    last.dataset.repeat = String(n);
    last.querySelector(".repeat").textContent = ` (×${n})`;
    return;
  }
  const item = h("div", {class: `message ${kind}`, role: kind === "error" ? "alert" : "status",
                          dataset: {text, kind}},
    h("span", {class: "text"}, text), h("span", {class: "repeat"}),
    h("button", {class: "dismiss", type: "button", "aria-label": "dismiss", onclick: () => item.remove()}, "×"));
  bar.appendChild(item);
  while (bar.children.length > 5) bar.firstElementChild.remove();
  if (kind !== "error") setTimeout(() => item.remove(), 8000);
}

// An API failure in the message bar. A 401 is left to the login form, which the session loss
// brings up on its own.
export function showError(err) {
  if (err && err.status === 401) return;
  notify(err && err.message ? err.message : String(err), "error");
}

export function clearMessages() {
  if (bar) bar.replaceChildren();
}

// A modal confirmation. Resolves true when confirmed, false when cancelled (Cancel, Escape).
// typeToConfirm: the confirm button stays disabled until that exact text is typed (for purge).
export function confirmAction({title, text, confirmLabel = "Confirm", danger = true, typeToConfirm = null}) {
  return new Promise((resolve) => {
    const input = typeToConfirm === null ? null
      : h("input", {id: "confirm-input", type: "text", autocomplete: "off", spellcheck: "false",
                    "aria-label": `type ${typeToConfirm} to confirm`});
    const ok = h("button", {id: "confirm-ok", type: "submit", value: "ok", class: danger ? "danger" : "primary",
                            disabled: input !== null}, confirmLabel);
    const cancel = h("button", {id: "confirm-cancel", type: "submit", value: "cancel", formnovalidate: true}, "Cancel");
    const paragraphs = (Array.isArray(text) ? text : [text]).map((t) => h("p", null, t));
    const dialog = h("dialog", {id: "confirm-dialog", class: "confirm"},
      h("form", {method: "dialog"},
        h("h2", null, title),
        paragraphs,
        input ? h("label", {class: "type-to-confirm"}, "Type ", h("code", null, typeToConfirm), " to confirm: ", input) : null,
        h("div", {class: "buttons"}, cancel, ok)));
    if (input) input.addEventListener("input", () => { ok.disabled = input.value !== typeToConfirm; });
    dialog.addEventListener("close", () => {
      const confirmed = dialog.returnValue === "ok" && (!input || input.value === typeToConfirm);
      dialog.remove();
      resolve(confirmed);
    });
    document.body.appendChild(dialog);
    dialog.showModal();
    (input || cancel).focus();
  });
}

// A button that runs `action` (async) once at a time, disabled meanwhile.
export function actionButton(label, action, attrs = {}) {
  const button = h("button", {type: "button", ...attrs}, label);
  button.addEventListener("click", async () => {
    if (button.disabled) return;
    button.disabled = true;
    try {
      await action();
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

// Replaces the content of `el` with a one-line state ("loading…", an error).
export function placeholder(el, text, cls = "placeholder") {
  replace(el, h("p", {class: cls}, text));
}
