// The Escrow web console: the session (login form, or the silent anonymous login of a broker
// without a users file), the page frame and hash routing (#/overview, #/queues, #/queue/NAME,
// #/connections, #/xa, #/config). Pages are modules with mount(view, ctx) -> unmount function.
// No framework, no build step; everything the broker says is put in as text (dom.js).
import * as api from "./api.js";
import {h, replace} from "./dom.js";
import {metrics} from "./metrics.js";
import {initMessages, notify, clearMessages} from "./ui.js";
import * as overview from "./overview.js";
import * as queues from "./queues.js";
import * as queue from "./queue.js";
import * as connections from "./connections.js";
import * as xa from "./xa.js";
import * as config from "./config.js";

const kPages = {
  overview: {module: overview, title: "Overview", nav: "overview"},
  queues: {module: queues, title: "Queues", nav: "queues"},
  queue: {module: queue, title: "Queue", nav: "queues"},
  connections: {module: connections, title: "Connections", nav: "connections"},
  xa: {module: xa, title: "In-doubt XA", nav: "xa"},
  config: {module: config, title: "Configuration", nav: "config"},
};

const view = document.getElementById("view");
const nav = document.getElementById("nav");
const who = document.getElementById("who");
const whoName = document.getElementById("who-name");
const logoutButton = document.getElementById("logout");

let session = null;
let loginRequired = true;
let unmount = null;

// For tests and the curious: what is shown, and how long the tables took to render.
window.escrowConsole = {
  renders: [],
  get session() {
    return session ? {user: session.user, admin: !!session.admin} : null;
  },
};

function setState(state, page = "") {
  document.body.dataset.state = state;
  document.body.dataset.page = page;
}

function leavePage() {
  if (unmount) {
    try {
      unmount();
    } catch (e) {
      console.error(e);
    }
  }
  unmount = null;
}

function begin(s) {
  session = s;
  loginRequired = s.login_required !== false;
  api.setCsrf(s.csrf);
  whoName.textContent = s.user ? `${s.user}${s.admin ? " (admin)" : ""}` : s.admin ? "anonymous operator" : "anonymous";
  who.hidden = false;
  nav.hidden = false;
  metrics.start();
  route();
}

function end() {
  leavePage();
  session = null;
  api.setCsrf(null);
  metrics.reset();
  nav.hidden = true;
  who.hidden = true;
}

function route() {
  if (!session) return;
  const hash = location.hash.replace(/^#\/?/, "");
  const parts = hash ? hash.split("/") : [];
  let name = parts[0] || "";
  if (!kPages[name] || (name === "queue" && !parts[1])) {
    name = "overview";
    if (location.hash !== "#/overview") {
      history.replaceState(null, "", "#/overview");
    }
  }
  let params;
  try {
    params = parts.slice(1).map((p) => decodeURIComponent(p));
  } catch {
    params = parts.slice(1);
  }
  if (name === "queue") params = [params.join("/")];  // a name with an unencoded slash
  leavePage();
  clearMessages();
  const page = kPages[name];
  for (const a of nav.querySelectorAll("a")) {
    if (a.dataset.nav === page.nav) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.title = `${name === "queue" ? params[0] : page.title} · Escrow console`;
  setState("open", name);
  view.replaceChildren();
  try {
    unmount = page.module.mount(view, {session, params}) || null;
  } catch (e) {
    console.error(e);
    notify(`the ${page.title} page failed: ${e.message}`, "error");
  }
}

function showLogin(message, kind = "info") {
  end();
  setState("login");
  document.title = "Log in · Escrow console";
  const user = h("input", {id: "login-user", name: "user", type: "text", autocomplete: "username", required: true,
                           autocapitalize: "none", spellcheck: "false"});
  const password = h("input", {id: "login-password", name: "password", type: "password", autocomplete: "current-password"});
  const submit = h("button", {id: "login-submit", type: "submit", class: "primary"}, "Log in");
  const problem = h("p", {id: "login-message", class: `login-message ${kind}`, role: kind === "error" ? "alert" : "status",
                          hidden: !message}, message || "");
  const form = h("form", {id: "login-form", class: "login card"},
    h("h1", null, "Escrow console"),
    h("p", {class: "hint"}, "Log in with a user of escrowd's users file."),
    problem,
    h("label", {for: "login-user"}, "User"), user,
    h("label", {for: "login-password"}, "Password"), password,
    submit);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    submit.disabled = true;
    try {
      const s = await api.login({user: user.value, password: password.value});
      clearMessages();
      begin(s);
    } catch (err) {
      password.value = "";
      problem.hidden = false;
      problem.className = "login-message error";
      problem.setAttribute("role", "alert");
      problem.textContent = err.status === 401 ? `Login refused: ${err.reason}` : err.message;
      submit.disabled = false;
      password.focus();
    }
  });
  replace(view, form);
  user.focus();
}

// A broker without a users file: the anonymous operator session, without a form (loopback only).
async function silentLogin(afterLoss = false) {
  try {
    begin(await api.login({}));
  } catch (err) {
    end();
    setState("failed");
    replace(view, h("div", {class: "card note", id: "login-failed"},
      h("h1", null, "No session"),
      h("p", null, err.message),
      h("button", {type: "button", class: "primary", onclick: () => start()}, "Try again")));
    if (!afterLoss) notify(err.message, "error");
  }
}

api.onSessionLost((err) => {
  if (!session) return;
  if (err.body && err.body.login_required === false) {
    end();
    silentLogin(true);
    return;
  }
  showLogin("Your session has ended (it expired, or escrowd restarted): log in again.", "error");
});

logoutButton.addEventListener("click", async () => {
  try {
    await api.logout();
  } catch (err) {
    if (err.status !== 401) notify(err.message, "error");
  }
  const anonymous = !loginRequired;
  end();
  if (anonymous) {
    setState("logged-out");
    replace(view, h("div", {class: "card note", id: "logged-out"},
      h("h1", null, "Logged out"),
      h("p", null, "This broker has no users file: anyone on this machine may open the console."),
      h("button", {type: "button", class: "primary", onclick: () => silentLogin()}, "Open the console again")));
  } else {
    showLogin("You have logged out.");
  }
});

window.addEventListener("hashchange", route);

async function start() {
  setState("starting");
  try {
    begin(await api.getSession());
  } catch (err) {
    if (err.status === 401) {
      if (err.body && err.body.login_required === false) return silentLogin();
      return showLogin();
    }
    end();
    setState("failed");
    replace(view, h("div", {class: "card note", id: "start-failed"},
      h("h1", null, "escrowd did not answer"),
      h("p", null, err.message),
      h("button", {type: "button", class: "primary", onclick: () => start()}, "Try again")));
  }
}

initMessages(document.getElementById("messages"));
start();
