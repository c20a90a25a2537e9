#!/usr/bin/env node
// STOMP over WebSocket from a real browser: headless Chromium (Debian's /usr/bin/chromium, driven
// by puppeteer-core) opens tests/js/stomp_page/index.html, whose module script imports
// @stomp/stompjs's ES module build and talks to the broker over the browser's own WebSocket.
// tests/integration/test_websocket.py runs it against a real escrowd.
//
//   node tests/js/chromium_stomp.mjs WS-URL OPTIONS-JSON
//
// OPTIONS-JSON: destination (a queue), mode ("ack", default: see stomp_page/page.mjs; "refused":
// the page is served as http://evil.example:PORT, a foreign origin, and expects the broker to
// refuse its WebSocket), screenshot (a PNG path, optional), timeout_ms (default 15000),
// chromium (default /usr/bin/chromium or $CHROMIUM).
//
// The page and stompjs are served by a small HTTP server of this program on 127.0.0.1 (port 0);
// nothing is downloaded. Output: one JSON line {"result": window.result, "console": [...]} and
// exit status 0 when the page finished, else {"error": ...} and exit status 1.

import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';

const here = path.dirname(fileURLToPath(import.meta.url));
const pageDir = path.join(here, 'stomp_page');
const stompjsDir = path.join(here, 'node_modules', '@stomp', 'stompjs', 'esm6');

const [wsUrl, optionsText] = process.argv.slice(2);
const opts = optionsText ? JSON.parse(optionsText) : {};
const TIMEOUT = opts.timeout_ms ?? 15000;
const mode = opts.mode ?? 'ack';
const chromium = opts.chromium ?? process.env.CHROMIUM ?? '/usr/bin/chromium';
const FOREIGN_HOST = 'evil.example';

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.map': 'application/json',
};

// Only the page's files and stompjs's ES modules; anything else is 404.
function resolve(urlPath) {
  const p = decodeURIComponent(urlPath.split('?')[0]);
  if (p === '/' || p === '/index.html') return path.join(pageDir, 'index.html');
  if (p === '/page.mjs' || p === '/page.css') return path.join(pageDir, p.slice(1));
  if (p.startsWith('/stompjs/')) {
    const file = path.normalize(path.join(stompjsDir, p.slice('/stompjs/'.length)));
    if (file.startsWith(stompjsDir + path.sep)) return file;
  }
  return null;
}

const served = [];
const server = createServer(async (req, res) => {
  const file = resolve(req.url);
  served.push(req.url);
  if (!file || !existsSync(file)) {
    res.writeHead(404, { 'Content-Type': 'text/plain' });
    res.end('not found');
    return;
  }
  const body = await readFile(file);
  res.writeHead(200, {
    'Content-Type': TYPES[path.extname(file)] ?? 'application/octet-stream',
    'Cache-Control': 'no-store',
  });
  res.end(body);
});

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

async function main() {
  if (!wsUrl) {
    emit({ error: 'usage: chromium_stomp.mjs WS-URL OPTIONS-JSON' });
    process.exit(2);
  }
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  const port = server.address().port;
  const host = mode === 'refused' ? FOREIGN_HOST : '127.0.0.1';
  const query = new URLSearchParams({ ws: wsUrl, dest: opts.destination ?? '', mode, timeout_ms: String(TIMEOUT) });
  const pageUrl = `http://${host}:${port}/index.html?${query}`;

  const consoleLines = [];
  let browser;
  try {
    browser = await puppeteer.launch({
      executablePath: chromium,
      headless: true,
      timeout: 4 * TIMEOUT,
      args: [
        '--no-sandbox', // we run as root
        '--disable-dev-shm-usage',
        '--disable-gpu',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        // The foreign origin: evil.example resolves to the loopback page server (nothing leaves
        // the machine), so the page's Origin is http://evil.example:PORT.
        `--host-resolver-rules=MAP ${FOREIGN_HOST} 127.0.0.1`,
        // Keep http:// as http:// (no HTTPS upgrade or interstitial for the foreign name).
        '--disable-features=HttpsUpgrades,HttpsFirstBalancedModeAutoEnable,HttpsFirstModeV2ForEngagedSites',
      ],
    });
    const page = await browser.newPage();
    page.on('console', (m) => consoleLines.push(`${m.type()}: ${m.text()}`));
    page.on('pageerror', (e) => consoleLines.push(`pageerror: ${e.message}`));
    page.on('requestfailed', (r) => consoleLines.push(`requestfailed: ${r.url()} ${r.failure()?.errorText}`));
    await page.setViewport({ width: 1000, height: 700 });
    await page.goto(pageUrl, { waitUntil: 'load', timeout: TIMEOUT });
    await page.waitForFunction(() => window.result !== null, { timeout: TIMEOUT + 5000, polling: 50 });
    const result = await page.evaluate(() => window.result);
    if (opts.screenshot) await page.screenshot({ path: opts.screenshot, fullPage: true });
    const version = await browser.version();
    // Closing the browser drops the page's WebSocket without a DISCONNECT, as closing a tab does.
    await browser.close();
    browser = null;
    emit({ result, console: consoleLines, browser: version, page_url: pageUrl, served });
    process.exitCode = result.ok ? 0 : 1;
  } catch (e) {
    emit({ error: String(e.stack ?? e), console: consoleLines, page_url: pageUrl, served });
    process.exitCode = 1;
  } finally {
    if (browser) await browser.close().catch(() => {});
    server.close();
  }
}

main();
