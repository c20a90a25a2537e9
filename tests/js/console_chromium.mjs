#!/usr/bin/env node
// The web console (console/) in a real browser: headless Chromium (Debian's /usr/bin/chromium,
// driven by puppeteer-core) against a real escrowd, as tests/integration/test_console.py runs it.
//
//   node tests/js/console_chromium.mjs OPTIONS-JSON
//
// OPTIONS-JSON: scenario (below), base ("http://127.0.0.1:HTTP-PORT", escrowd's HTTP listener),
// user and password (absent: a broker without a users file, whose console logs in by itself),
// artifacts (the directory for screenshots), doc_images (a directory: also write the screenshots
// docs/ shows there), timeout_ms (default 20000), chromium (default $CHROMIUM or
// /usr/bin/chromium), and what the scenario needs.
//
// Scenarios: pages (every page renders; logout and a lost session bring back the login form),
// queue-depth, queue-actions, xa-decide, non-admin, many-queues, cross-site. Each is described where it is
// defined below.
//
// Talking to the test: stdout carries one JSON object per line. {"sync": LABEL, ...} asks the test
// to do something (send messages, check escrow xa list) and waits for one JSON line on stdin, its
// answer. The last line is {"result": {...}, "console": [...]} (exit status 0) or {"error":
// MESSAGE, "console": [...], "screenshot": PATH} (exit status 1). Diagnostics go to stderr.

import {createServer} from 'node:http';
import {mkdirSync, copyFileSync} from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import puppeteer from 'puppeteer-core';

const opts = JSON.parse(process.argv[2] || '{}');
const TIMEOUT = opts.timeout_ms ?? 20000;
const chromium = opts.chromium ?? process.env.CHROMIUM ?? '/usr/bin/chromium';
const base = opts.base;
const artifacts = opts.artifacts || path.resolve('artifacts');
mkdirSync(artifacts, {recursive: true});
// The screenshots the manual shows (docs/images), written when the test asks for them.
const DOC_IMAGES = {overview: 'console-overview.png', queue: 'console-queue.png', xa: 'console-xa.png'};

// -- talking to the test ---------------------------------------------------------------------------

function out(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

const stdinLines = [];
let stdinWaiter = null;
const rl = readline.createInterface({input: process.stdin});
rl.on('line', (line) => {
  if (stdinWaiter) {
    const w = stdinWaiter;
    stdinWaiter = null;
    w(line);
  } else {
    stdinLines.push(line);
  }
});
rl.on('close', () => {
  if (stdinWaiter) stdinWaiter(null);
});

// Asks the test to do `label` and returns its answer (an object).
async function sync(label, data = {}) {
  out({sync: label, ...data});
  const line = stdinLines.length ? stdinLines.shift() : await new Promise((r) => { stdinWaiter = r; });
  if (line === null) throw new Error(`the test closed stdin instead of answering ${label}`);
  const answer = JSON.parse(line || '{}');
  if (answer.abort) throw new Error(`the test gave up at ${label}: ${answer.abort}`);
  return answer;
}

// -- the browser -----------------------------------------------------------------------------------

const consoleLines = [];
const pageErrors = [];
let browser = null;
let current = null;  // the page a failure screenshot is taken of

async function launch(extraArgs = []) {
  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', ...extraArgs],
  });
  return browser;
}

async function newPage(context = browser) {
  const page = await context.newPage();
  await page.setViewport({width: 1400, height: 900, deviceScaleFactor: 1});
  page.setDefaultTimeout(TIMEOUT);
  page.on('console', (m) => consoleLines.push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => pageErrors.push(e.message));
  // A console that broke its own CSP (an inline script or style) would show here.
  await page.evaluateOnNewDocument(() => {
    window.__cspViolations = [];
    document.addEventListener('securitypolicyviolation',
      (e) => window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`));
  });
  current = page;
  return page;
}

async function screenshot(page, name) {
  const file = path.join(artifacts, `${name}.png`);
  await page.screenshot({path: file, fullPage: true});
  if (opts.doc_images && DOC_IMAGES[name]) {
    mkdirSync(opts.doc_images, {recursive: true});
    copyFileSync(file, path.join(opts.doc_images, DOC_IMAGES[name]));
  }
  return file;
}

async function cspViolations(page) {
  return page.evaluate(() => window.__cspViolations || []);
}

// Opens the console and logs in: with the form when opts.user is set, else (no users file) by
// itself. Returns once a page is shown.
async function login(page, user = opts.user, password = opts.password, hash = '#/overview') {
  await page.goto(`${base}/${hash}`);
  await page.waitForSelector('body[data-state="login"], body[data-state="open"], body[data-state="failed"]');
  const state = await page.$eval('body', (b) => b.dataset.state);
  if (state === 'failed') throw new Error('the console could not start: ' + await page.$eval('#view', (v) => v.innerText));
  if (state === 'login') {
    if (!user) throw new Error('the console asks for a login, and the test gave no user');
    await typeLogin(page, user, password);
  }
  await page.waitForSelector('body[data-state="open"]');
}

async function typeLogin(page, user, password) {
  await page.waitForSelector('#login-form');
  await page.$eval('#login-user', (i) => { i.value = ''; });
  await page.type('#login-user', user);
  await page.type('#login-password', password || '');
  await page.click('#login-submit');
}

// Shows a page by its hash and waits for `ready` (a selector) to match.
async function show(page, hash, ready) {
  await page.evaluate((h) => { location.hash = h; }, hash);
  await page.waitForSelector(`body[data-page="${hash.split('/')[1]}"]`);
  if (ready) await page.waitForSelector(ready);
}

async function text(page, selector) {
  return page.$eval(selector, (e) => e.innerText.trim());
}

// The element handle of the first element matching `selector` inside the table row whose
// element `rowMarker` matches; waits for it.
async function inRow(page, rowMarker, selector) {
  const handle = await page.waitForFunction((marker, sel) => {
    const m = document.querySelector(marker);
    const tr = m && m.closest('tr');
    return tr && tr.querySelector(sel);
  }, {}, rowMarker, selector);
  return handle.asElement();
}

async function confirmDialog(page, {type} = {}) {
  await page.waitForSelector('#confirm-dialog[open]');
  const title = await text(page, '#confirm-dialog h2');
  if (type !== undefined) {
    const disabled = await page.$eval('#confirm-ok', (b) => b.disabled);
    if (!disabled) throw new Error('the confirm button was enabled before the name was typed');
    await page.type('#confirm-input', type);
  }
  await page.click('#confirm-ok');
  await page.waitForFunction(() => !document.querySelector('#confirm-dialog'));
  return title;
}

async function messageBar(page) {
  return page.$$eval('#messages .message', (ms) => ms.map((m) => ({kind: m.dataset.kind, text: m.dataset.text})));
}

async function waitMessage(page, kind, pattern) {
  await page.waitForFunction((k, p) => [...document.querySelectorAll('#messages .message')]
    .some((m) => m.dataset.kind === k && new RegExp(p).test(m.dataset.text)), {}, kind, pattern);
}

// A request from inside the page (its cookie, its origin): {status, body}.
async function pageFetch(page, url, init) {
  return page.evaluate(async (u, i) => {
    const r = await fetch(u, i);
    const t = await r.text();
    let body = t;
    try { body = JSON.parse(t); } catch { /* text */ }
    return {status: r.status, body};
  }, url, init || {});
}

// -- scenarios ------------------------------------------------------------------------------------

const scenarios = {};

// Every page with a real broker behind it (the test put queues, dead letters, a prepared branch
// and traffic there first), each screenshotted; then a session that ends under the console (its
// cookie gone) brings back the login form, and Log out does too.
scenarios.pages = async () => {
  await launch();
  const page = await newPage();
  await login(page);
  const r = {};
  r.who = await text(page, '#who-name');

  await show(page, '#/overview', '#overview');
  const points = opts.overview_points ?? 3;
  await page.waitForFunction((n) => Number(document.querySelector('#overview').dataset.points) >= n,
                             {timeout: Math.max(TIMEOUT, points * 2000 + 20000)}, points);
  r.overview = await page.evaluate(() => ({
    charts: [...document.querySelectorAll('canvas.chart')].map((c) => c.id),
    values: Object.fromEntries([...document.querySelectorAll('ul.legend .value')].map((v) => [v.dataset.series, v.textContent])),
    summary: document.querySelector('.summary-facts').innerText,
  }));
  await screenshot(page, 'overview');

  await show(page, '#/queues', '#queues[data-loaded]');
  await page.waitForFunction((name) => [...document.querySelectorAll('#queues-table a.queue-link')]
    .some((a) => a.textContent === name), {}, opts.queue);
  r.queues = await page.$$eval('#queues-table tbody tr', (rows) => rows.map((tr) => Object.fromEntries(
    [...tr.children].map((td) => [td.dataset.key, td.innerText]))));
  await screenshot(page, 'queues');

  // A queue of dead letters: details, messages, one opened, the move-back buttons.
  await show(page, `#/queue/${encodeURIComponent(opts.dead_letters)}`, '#queue-details table.facts');
  await page.waitForSelector('#messages-table tbody tr[data-id]');
  await page.click('#messages-table tbody tr[data-id]');
  await page.waitForSelector('#message-detail:not([hidden]) #message-body');
  r.queue = await page.evaluate(() => ({
    depth: document.querySelector('#queue-depth').textContent,
    messages: [...document.querySelectorAll('#messages-table tbody tr[data-id]')].map((tr) => tr.innerText),
    body: document.querySelector('#message-body').textContent,
    purge: !!document.querySelector('#purge-button'),
    moveBack: [...document.querySelectorAll('button.move-back')].map((b) => b.dataset.origin),
  }));
  await screenshot(page, 'queue');

  await show(page, '#/connections', '#connections-page[data-loaded]');
  r.connections = await page.$$eval('#connections-table tbody tr', (rows) => rows.map((tr) => tr.innerText));
  r.subscriptions = await page.$$eval('#subscriptions-table tbody tr', (rows) => rows.map((tr) => tr.innerText));
  await screenshot(page, 'connections');

  await show(page, '#/xa', '#xa[data-loaded]');
  if (opts.xid) await page.waitForSelector(`code[data-xid="${opts.xid}"]`);
  r.xa = await page.$$eval('#xa-in-doubt-table tbody tr', (rows) => rows.map((tr) => tr.innerText));
  await screenshot(page, 'xa');

  await show(page, '#/config', '#config[data-loaded]');
  r.config = await page.$$eval('#config section.card h2', (hs) => hs.map((h2) => h2.textContent));
  r.configText = await text(page, '#config');
  await screenshot(page, 'config');
  r.csp = await cspViolations(page);

  // The session ends under the console (as when it expires): the next request is 401, and the
  // login form comes back; logging in again shows the page that was open.
  const cdp = await page.createCDPSession();
  await cdp.send('Network.clearBrowserCookies');
  await page.evaluate(() => { location.hash = '#/overview'; });
  await page.waitForSelector('#login-form');
  r.expiredMessage = await text(page, '#login-message');
  await typeLogin(page, opts.user, opts.password);
  await page.waitForSelector('body[data-state="open"][data-page="overview"]');

  await page.click('#logout');
  await page.waitForSelector('#login-form');
  r.logoutMessage = await text(page, '#login-message');
  r.sessionAfterLogout = await pageFetch(page, '/api/v1/session');
  r.queuesAfterLogout = await pageFetch(page, '/api/v1/admin/queues');
  return r;
};

// The queues page is open when the test sends messages to a new queue with python3-stomp; the
// depth the page shows follows, then the queue's own page shows it and lists the messages, page
// after page (50 a page).
scenarios['queue-depth'] = async () => {
  await launch();
  const page = await newPage();
  await login(page);
  await show(page, '#/queues', '#queues[data-loaded]');
  await page.type('#queues-filter', opts.queue);
  const sent = await sync('send');
  const depthCell = () => page.waitForFunction((name, n) => {
    const a = [...document.querySelectorAll('#queues-table a.queue-link')].find((x) => x.textContent === name);
    const cell = a && a.closest('tr').querySelector('td[data-key="depth"]');
    return cell && cell.textContent === String(n) && cell.textContent;
  }, {timeout: TIMEOUT}, opts.queue, sent.count);
  const r = {listedDepth: await (await depthCell()).jsonValue()};
  r.rows = await page.$eval('#queues', (e) => e.querySelector('.datatable').dataset.rows);
  await screenshot(page, 'queue-depth-list');
  const link = await inRow(page, `#queues-table a.queue-link`, 'a.queue-link');
  await link.click();
  await page.waitForSelector('body[data-page="queue"]');
  await page.waitForFunction((n) => {
    const d = document.querySelector('#queue-depth');
    return d && d.textContent === String(n);
  }, {}, sent.count);
  await page.waitForSelector('#messages-table tbody tr[data-id]');
  r.queueDepth = await text(page, '#queue-depth');
  const rows = () => page.$$eval('#messages-table tbody tr[data-id]', (trs) => trs.map((tr) => tr.innerText));
  r.messages = await rows();
  await screenshot(page, 'queue-depth-queue');
  // The next page of the browse: the messages after the first 50, in delivery order.
  r.pages = [await page.$eval('#queue-messages', (e) => e.dataset.page)];
  while (await page.$eval('#queue-messages .page-next', (b) => !b.disabled)) {
    const next = r.pages.length + 1;
    await page.click('#queue-messages .page-next');
    await page.waitForSelector(`#queue-messages[data-page="${next}"] #messages-table tbody tr[data-id]`);
    r.pages.push(String(next));
    r.messages.push(...await rows());
  }
  r.csp = await cspViolations(page);
  return r;
};

// A prepared branch (made by the test over XA frames) on the in-doubt page: committed from the
// console (click, confirm), which the test checks with escrow xa list, then forgotten.
scenarios['xa-decide'] = async () => {
  await launch();
  const page = await newPage();
  await login(page);
  await show(page, '#/xa', '#xa[data-loaded]');
  const marker = `#xa-in-doubt-table code[data-xid="${opts.xid}"]`;
  await page.waitForSelector(marker);
  const row = async () => page.$eval(marker, (c) => c.closest('tr').innerText);
  const r = {before: await row()};
  await screenshot(page, 'xa-prepared');
  await (await inRow(page, marker, 'button.xa-commit')).click();
  await page.waitForSelector('#confirm-dialog[open]');
  r.confirmText = await text(page, '#confirm-dialog');
  await screenshot(page, 'xa-confirm');
  await confirmDialog(page);
  await waitMessage(page, 'ok', 'committed heuristically');
  await page.waitForFunction((m) => {
    const c = document.querySelector(m);
    return c && /heuristically committed/.test(c.closest('tr').innerText);
  }, {}, marker);
  r.after = await row();
  r.messages = await messageBar(page);
  await screenshot(page, 'xa-committed');
  await sync('committed');
  await (await inRow(page, marker, 'button.xa-forget')).click();
  await confirmDialog(page);
  await waitMessage(page, 'ok', 'forgotten');
  await page.waitForFunction((m) => !document.querySelector(m), {}, marker);
  r.csp = await cspViolations(page);
  return r;
};

// An operator's actions on a queue: the dead letters of one origin moved back there (click,
// confirm), a move the broker refuses shown in the message bar, and a purge (click, type the
// queue's name, confirm); the test checks the broker after each.
scenarios['queue-actions'] = async () => {
  await launch();
  const page = await newPage();
  await login(page);
  const r = {};
  await show(page, `#/queue/${encodeURIComponent(opts.dead_letters)}`, '#messages-table tbody tr[data-id]');
  const back = await page.waitForSelector(`button.move-back[data-origin="/queue/${opts.queue}"]`);
  await back.click();
  r.moveTitle = await confirmDialog(page);
  await waitMessage(page, 'ok', `^moved ${opts.moved} messages? from `);
  r.moveMessage = (await messageBar(page)).filter((m) => m.kind === 'ok').map((m) => m.text);
  await sync('moved');
  // A destination the broker refuses: its answer in the message bar.
  await page.waitForSelector('#move-form');
  await page.type('#move-target', opts.bad_destination);
  await page.click('#move-form button[type="submit"]');
  await confirmDialog(page);
  await page.waitForSelector('#messages .message.error');
  r.refusal = (await messageBar(page)).filter((m) => m.kind === 'error').map((m) => m.text);
  await screenshot(page, 'queue-actions-refused');
  // The queue's own page (the dead letters' page also has #queue-details), with its messages
  // loaded: the Actions card is drawn after them, so the button exists only then.
  const queuePage = `#queue[data-name="${opts.queue}"]`;
  await show(page, `#/queue/${encodeURIComponent(opts.queue)}`, `${queuePage} #queue-details[data-depth="${opts.moved}"]`);
  await page.waitForSelector(`${queuePage} #messages-table tbody tr[data-id]`);
  await (await page.waitForSelector(`${queuePage} #purge-button`)).click();
  r.purgeTitle = await confirmDialog(page, {type: opts.queue});
  await waitMessage(page, 'ok', `^purged ${opts.moved} messages? from ${opts.queue.replace(/[.]/g, '\\.')}`);
  r.purgeMessage = (await messageBar(page)).filter((m) => m.kind === 'ok').map((m) => m.text);
  await page.waitForSelector('#queue-details[data-depth="0"]');
  await page.waitForSelector('#messages-table tr.empty');
  await screenshot(page, 'queue-actions-purged');
  r.csp = await cspViolations(page);
  return r;
};

// A user without admin (but with browse): the admin pages say so instead of breaking, the queue
// page lists the messages without Purge or Move, and a purge posted with the user's own session
// and CSRF value is refused.
scenarios['non-admin'] = async () => {
  await launch();
  const page = await newPage();
  await login(page);
  const r = {who: await text(page, '#who-name')};
  await show(page, '#/queues', '#queues[data-loaded="refused"]');
  r.queuesNote = await text(page, '#queues .needs-admin');
  // Opening a queue by name, as the note says.
  await page.type('#open-queue-name', opts.queue);
  await page.click('#open-queue button[type="submit"]');
  await page.waitForSelector('body[data-page="queue"]');
  await page.waitForSelector('#queue-details[data-refused="true"]');
  await page.waitForSelector('#messages-table tbody tr[data-id]');
  r.detailsNote = await text(page, '#queue-details');
  r.messages = await page.$$eval('#messages-table tbody tr[data-id]', (rows) => rows.map((tr) => tr.innerText));
  r.purgeButton = !!(await page.$('#purge-button'));
  r.moveButtons = (await page.$$('button.move-back, #move-form')).length;
  r.actionsHidden = await page.$eval('#queue-actions', (e) => e.hidden);
  await screenshot(page, 'non-admin-queue');
  for (const [hash, id] of [['#/connections', '#connections-page'], ['#/xa', '#xa'], ['#/config', '#config']]) {
    await show(page, hash, `${id}[data-loaded="refused"]`);
    r[hash] = {note: await text(page, `${id} .needs-admin`),
               buttons: (await page.$$('button.xa-commit, button.xa-rollback, button.xa-forget')).length};
  }
  await screenshot(page, 'non-admin-xa');
  r.messageBar = await messageBar(page);
  // The user's own session and CSRF value, straight to the API.
  const session = await pageFetch(page, '/api/v1/session');
  r.session = {status: session.status, admin: session.body.admin};
  r.purge = await pageFetch(page, '/api/v1/admin/purge', {
    method: 'POST', headers: {'Content-Type': 'application/json', 'X-Escrow-CSRF': session.body.csrf},
    body: JSON.stringify({name: opts.queue})});
  r.csp = await cspViolations(page);
  return r;
};

// Many queues (the test made them): the queues page fetches every page of them, then sorts,
// filters and pages in memory. Timed by the page (performance.now() around its processing and
// each render) and by Chromium from the click on the link until the table shows: ScriptDuration
// (V8's own count, which leaves out much of the work done in promise continuations) and
// TaskDuration (everything the renderer's main thread did: script, JSON parsing, style, layout,
// paint; an upper bound of the script time).
scenarios['many-queues'] = async () => {
  await launch();
  const page = await newPage();
  await login(page);
  const r = {who: await text(page, '#who-name'), loginForm: !!(await page.$('#login-form'))};
  await show(page, '#/overview', '#overview');
  const cdp = await page.createCDPSession();
  await cdp.send('Performance.enable');
  const metric = async () => Object.fromEntries((await cdp.send('Performance.getMetrics')).metrics.map((m) => [m.name, m.value]));
  const before = await metric();
  const started = Date.now();
  await page.click('nav a[data-nav="queues"]');
  await page.waitForFunction((n) => Number(document.querySelector('#queues')?.dataset.loaded) >= n,
                             {timeout: Math.max(TIMEOUT, 60000)}, opts.expected);
  const after = await metric();
  r.wallMs = Date.now() - started;
  r.scriptSeconds = after.ScriptDuration - before.ScriptDuration;
  r.taskSeconds = after.TaskDuration - before.TaskDuration;
  r.load = await page.evaluate(() => window.escrowConsole.queuesLoad);
  r.shownRows = await page.$$eval('#queues-table tbody tr', (rows) => rows.length);
  r.summary = await text(page, '#queues .datatable .summary');
  await screenshot(page, 'many-queues');
  const lastRender = () => page.evaluate(() => window.escrowConsole.renders.at(-1));
  const timed = async (action) => {
    const b = await metric();
    const count = await page.evaluate(() => window.escrowConsole.renders.length);
    await action();
    await page.waitForFunction((n) => window.escrowConsole.renders.length > n, {}, count);
    const a = await metric();
    return {render: await lastRender(), scriptSeconds: a.ScriptDuration - b.ScriptDuration,
            taskSeconds: a.TaskDuration - b.TaskDuration};
  };
  r.sortByDepth = await timed(() => page.click('#queues-table th[data-key="depth"] button'));
  r.sortFirst = await page.$eval('#queues-table tbody tr td[data-key="name"]', (td) => td.innerText);
  r.sortByName = await timed(() => page.click('#queues-table th[data-key="name"] button'));
  r.nextPage = await timed(() => page.click('#queues .page-next'));
  r.pageAfterNext = await page.$eval('#queues .datatable', (e) => e.dataset.page);
  r.lastPage = await timed(() => page.click('#queues .page-last'));
  // Typing the filter: every keystroke filters all the rows again; the last one is timed.
  await page.type('#queues-filter', opts.filter.slice(0, -1));
  r.filter = await timed(() => page.type('#queues-filter', opts.filter.slice(-1)));
  r.filtered = await page.$$eval('#queues-table tbody tr td[data-key="name"]', (tds) => tds.map((td) => td.innerText));
  r.renders = await page.evaluate(() => window.escrowConsole.renders.map((x) => x.ms));
  r.csp = await cspViolations(page);
  return r;
};

// A page of another site (http://evil.test:PORT, which Chromium resolves to 127.0.0.1) posts a
// form at escrowd's purge while the browser holds an operator's session; then a page of the same
// site on another port (http://127.0.0.1:PORT: another origin, the same site, so a SameSite=Strict
// cookie goes with it) does the same. The form is text/plain with a body that reads as JSON,
// the most a form can forge. Each answer's status, and whether the cookie went with it, is
// reported; the test checks that the queue kept its messages.
scenarios['cross-site'] = async () => {
  const target = `${base}/api/v1/admin/purge`;
  const attackPage = `<!doctype html><html><body>
<form id="f" method="post" enctype="text/plain" action="${target}">
<input type="hidden" name='{"name":"${opts.queue}","x":"' value='"}'>
</form>
<script>addEventListener("load", () => setTimeout(() => document.getElementById("f").submit(), 0));</script>
</body></html>`;
  const server = createServer((req, res) => {
    res.writeHead(200, {'Content-Type': 'text/html; charset=utf-8'});
    res.end(attackPage);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const port = server.address().port;
  try {
    await launch(['--host-resolver-rules=MAP evil.test 127.0.0.1']);
    const page = await newPage();
    await login(page);
    const r = {session: (await pageFetch(page, '/api/v1/session')).status};
    const cdp = await page.createCDPSession();
    await cdp.send('Network.enable');
    const sent = new Map();  // requestId -> {cookie, blocked}
    cdp.on('Network.requestWillBeSentExtraInfo', (e) => {
      const cookieHeader = Object.entries(e.headers || {}).find(([k]) => k.toLowerCase() === 'cookie');
      sent.set(e.requestId, {
        cookie: cookieHeader ? /escrow_session=/.test(cookieHeader[1]) : false,
        blocked: (e.associatedCookies || []).filter((c) => c.blockedReasons && c.blockedReasons.length)
          .map((c) => `${c.cookie.name}: ${c.blockedReasons.join(',')}`),
      });
    });
    const requests = new Map();  // url -> requestId, for the purge
    cdp.on('Network.requestWillBeSent', (e) => {
      if (e.request.url === target) requests.set(e.requestId, e.request.headers);
    });
    for (const [label, origin] of [['cross-site', `http://evil.test:${port}`], ['same-site', `http://127.0.0.1:${port}`]]) {
      const answer = page.waitForResponse((res) => res.url() === target && res.request().method() === 'POST');
      await page.goto(`${origin}/attack.html`);
      const res = await answer;
      let body = '';
      try { body = await res.text(); } catch { /* a navigation's body may be gone */ }
      const id = res.request().id;
      r[label] = {origin, status: res.status(), body: body.slice(0, 300), ...(sent.get(id) || {}),
                  originHeader: (requests.get(id) || {}).Origin ?? null};
      await screenshot(page, `cross-site-${label}`);
      await page.goto(`${base}/#/overview`);  // back to the console: its session is still open
      await page.waitForSelector('body[data-state="open"]');
    }
    return r;
  } finally {
    server.close();
  }
};

// -- main ------------------------------------------------------------------------------------------

async function main() {
  const run = scenarios[opts.scenario];
  if (!run) throw new Error(`no scenario ${opts.scenario}: use ${Object.keys(scenarios).join(', ')}`);
  if (!base) throw new Error('no base URL');
  const result = await run();
  result.pageErrors = pageErrors;
  out({result, console: consoleLines});
}

const watchdog = setTimeout(() => {
  out({error: `the scenario ${opts.scenario} took longer than ${opts.total_timeout_ms ?? 300000} ms`, console: consoleLines});
  process.exit(1);
}, opts.total_timeout_ms ?? 300000);

try {
  await main();
  clearTimeout(watchdog);
  await browser?.close();
  process.exit(0);
} catch (e) {
  clearTimeout(watchdog);
  let shot = null;
  try {
    if (current) {
      shot = path.join(artifacts, `failure-${opts.scenario}.png`);
      await current.screenshot({path: shot, fullPage: true});
    }
  } catch { shot = null; }
  let view = null;
  try { view = current ? await current.$eval('body', (b) => b.innerText.slice(0, 3000)) : null; } catch { /* gone */ }
  out({error: e && e.stack ? e.stack : String(e), console: consoleLines, pageErrors, screenshot: shot, view});
  try { await browser?.close(); } catch { /* already gone */ }
  process.exit(1);
}
