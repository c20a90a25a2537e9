// The console API of escrowd (/api/v1/...): the session, the metrics and the ADMIN commands.
//
// The session's CSRF value lives only in this module's memory: never in a URL, a cookie we can
// read, or localStorage. Every POST carries it as X-Escrow-CSRF. The session itself is the
// HttpOnly cookie escrowd sets, which fetch sends on its own (same origin).

let csrf = null;
let lostHandler = null;

export class ApiError extends Error {
  constructor(status, body, what) {
    const text = body && typeof body.error === "string" ? body.error : `HTTP ${status}`;
    super(status ? `${what}: ${text} (HTTP ${status})` : `${what}: ${text}`);
    this.status = status;
    this.body = body || {};
    this.what = what;
  }

  // The broker's own words, without the request.
  get reason() {
    return typeof this.body.error === "string" ? this.body.error : `HTTP ${this.status}`;
  }
}

export function setCsrf(value) {
  csrf = value || null;
}

// Called with the ApiError when a request that needs a session gets 401: the session expired or
// was ended elsewhere. The console then shows its login form.
export function onSessionLost(handler) {
  lostHandler = handler;
}

async function request(method, path, {query, body, needsSession = true} = {}) {
  const url = new URL("/api/v1/" + path, location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null) url.searchParams.set(k, String(v));
  }
  const headers = {Accept: "application/json"};
  const init = {method, headers, credentials: "same-origin", cache: "no-store"};
  if (method === "POST") {
    headers["Content-Type"] = "application/json";
    if (csrf) headers["X-Escrow-CSRF"] = csrf;
    init.body = JSON.stringify(body || {});
  }
  const what = `${method} ${url.pathname}`;
  let res;
  try {
    res = await fetch(url, init);
  } catch (e) {
    throw new ApiError(0, {error: `escrowd did not answer (${e.message})`}, what);
  }
  const text = await res.text();
  let json = null;
  if (text) {
    try {
      json = JSON.parse(text);
    } catch {
      json = {error: text.trim().slice(0, 300)};
    }
  }
  if (res.ok) return json;
  // A purge or move cut short answers with its JSON so far, and the broker's words in a header.
  const said = res.headers.get("X-Escrow-Admin-Message");
  const failure = json && typeof json.error === "string" ? json : {...(json || {}), error: said || `HTTP ${res.status}`};
  const err = new ApiError(res.status, failure, what);
  if (res.status === 401 && needsSession && lostHandler) lostHandler(err);
  throw err;
}

export function get(path, query) {
  return request("GET", path, {query});
}

export function post(path, body) {
  return request("POST", path, {body});
}

// GET /api/v1/session: the session JSON, or throws ApiError 401 (body.login_required says
// whether a login form is needed).
export function getSession() {
  return request("GET", "session", {needsSession: false});
}

// POST /api/v1/login with {user, password}, or {} for the anonymous operator session of a broker
// without a users file.
export async function login(credentials) {
  const session = await request("POST", "login", {body: credentials || {}, needsSession: false});
  setCsrf(session && session.csrf);
  return session;
}

export async function logout() {
  try {
    await request("POST", "logout", {needsSession: false});
  } finally {
    setCsrf(null);
  }
}

// Every page of a paged ADMIN list (queues, connections, subscriptions, xa-list): asks with
// limit and follows `next` while `more` is true. Returns {ARRAY: [...entries of every page], pages}.
export async function fetchAll(command, arrays, query = {}, limit = 1000) {
  const out = {pages: 0};
  for (const name of arrays) out[name] = [];
  let after;
  for (;;) {
    const page = await get("admin/" + command, {...query, limit, after});
    out.pages++;
    for (const name of arrays) {
      const list = page && page[name];
      if (Array.isArray(list)) for (const entry of list) out[name].push(entry);
    }
    if (!page || !page.more || typeof page.next !== "string" || page.next === after) break;
    after = page.next;
  }
  return out;
}
