// The browser side of tests/js/chromium_stomp.mjs: stompjs's ES module build over the browser's
// own WebSocket. Query parameters: ws (the broker's URL), dest (a queue), mode ("ack": connect,
// SUBSCRIBE client-individual, SEND two messages, ACK one with a receipt and leave the other
// unacknowledged; "refused": expect the broker to refuse the WebSocket). The outcome goes into
// window.result (null until then) and onto the page.
import { Client } from '/stompjs/index.js';

const params = new URLSearchParams(location.search);
const wsUrl = params.get('ws');
const destination = params.get('dest');
const mode = params.get('mode') ?? 'ack';
const timeoutMs = Number(params.get('timeout_ms') ?? 15000);

window.result = null;
const logLines = [];
const $ = (id) => document.getElementById(id);
$('broker').textContent = wsUrl;
$('origin').textContent = location.origin;

function log(line) {
  logLines.push(line);
  $('log').textContent = logLines.join('\n');
}

function finish(result) {
  if (window.result !== null) return;
  window.result = { origin: location.origin, mode, ...result, log: logLines };
  $('status').textContent = result.ok ? 'done' : `failed: ${result.error}`;
  $('status').className = result.ok ? 'ok' : 'failed';
}

const connected = [];
const errors = [];
const closes = [];
const messages = [];
let stage = 'connecting';

const client = new Client({
  brokerURL: wsUrl,
  reconnectDelay: 0,
  connectionTimeout: timeoutMs,
  debug: () => {},
  onStompError: (frame) => {
    errors.push({ headers: frame.headers, body: frame.body });
    log(`ERROR ${frame.headers.message}`);
    finish({ ok: false, error: `ERROR frame: ${frame.headers.message}`, errors, closes, messages });
  },
  onWebSocketClose: (e) => {
    closes.push({ code: e.code, reason: e.reason, wasClean: e.wasClean, stage });
    log(`WebSocket closed: code ${e.code}, stage ${stage}`);
    if (mode === 'refused') {
      finish({ ok: connected.length === 0, connected: connected.length > 0, closes, errors,
        error: connected.length ? 'connected although the broker should refuse' : undefined });
    } else {
      finish({ ok: false, error: `WebSocket closed during ${stage}`, errors, closes, messages });
    }
  },
});

client.onConnect = (frame) => {
  connected.push(frame.headers);
  const protocol = client.webSocket?.protocol;
  log(`CONNECTED version ${frame.headers.version}, subprotocol ${protocol}`);
  if (mode === 'refused') {
    finish({ ok: false, connected: true, error: 'connected although the broker should refuse' });
    client.deactivate();
    return;
  }
  stage = 'subscribing';
  client.watchForReceipt('subscribed', () => {
    log('RECEIPT subscribed');
    stage = 'sending';
    client.watchForReceipt('sent-1', () => log('RECEIPT sent-1'));
    client.watchForReceipt('sent-2', () => log('RECEIPT sent-2'));
    client.publish({ destination, body: 'acked-in-browser', headers: { receipt: 'sent-1' } });
    client.publish({ destination, body: 'left-unacked', headers: { receipt: 'sent-2' } });
  });
  client.subscribe(destination, (m) => {
    messages.push({ body: m.body, headers: m.headers });
    log(`MESSAGE ${m.body} (ack ${m.headers.ack})`);
    if (m.body === 'acked-in-browser') {
      client.watchForReceipt('acked', () => {
        log('RECEIPT acked');
        ackDone = true;
        maybeDone();
      });
      m.ack({ receipt: 'acked' });
    }
    maybeDone();
  }, { ack: 'client-individual', receipt: 'subscribed' });
};

let ackDone = false;
function maybeDone() {
  if (ackDone && messages.some((m) => m.body === 'left-unacked')) {
    stage = 'done';
    finish({ ok: true, connected, protocol: client.webSocket?.protocol, messages, errors, closes });
  }
}

setTimeout(() => finish({ ok: false, error: `nothing finished within ${timeoutMs} ms (stage ${stage})`,
  connected, errors, closes, messages }), timeoutMs);

log(`connecting to ${wsUrl} (${mode})`);
client.activate();
