#!/usr/bin/env node
// STOMP over WebSocket from Node: @stomp/stompjs (the client web applications use) over the `ws`
// package, and a raw `ws` connection for what stompjs cannot be made to send (a frame split across
// WebSocket messages, several frames in one message, garbage, oversized frames, silence).
// tests/integration/test_websocket.py runs it against a real escrowd.
//
//   node tests/js/stomp_node.mjs WS-URL SCENARIO [OPTIONS-JSON]
//
// OPTIONS-JSON is an object; every scenario reads `timeout_ms` (default 15000: how long any one
// wait may take), `debug` (true: stompjs's debug lines on stderr), `ca_file` (a wss:// URL: the
// CA certificate, PEM, that signed the broker's), and the keys its comment names. Output, on stdout, one JSON object a line:
//   {"event": NAME, ...}   progress the caller may act on (e.g. "subscribed", "connected")
//   {"result": {...}}      the last line when the scenario ran to its end (exit status 0)
//   {"error": TEXT, ...}   the last line when it failed (exit status 1), with what it had seen
// The caller asserts on the result: a scenario checks only what it must to go on (it waits for
// the frames it expects) and reports everything it saw.

import { readFileSync } from 'node:fs';
import { Client } from '@stomp/stompjs';
import WebSocket from 'ws';

const PROTOCOLS = ['v12.stomp', 'v11.stomp', 'v10.stomp'];

const [url, scenarioName, optionsText] = process.argv.slice(2);
const opts = optionsText ? JSON.parse(optionsText) : {};
const TIMEOUT = opts.timeout_ms ?? 15000;
// wss://: trust the test CA (and only it) for the broker's certificate.
const TLS_OPTIONS = opts.ca_file ? { ca: readFileSync(opts.ca_file) } : {};
const started = Date.now();

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

function event(name, extra = {}) {
  emit({ event: name, t_ms: Date.now() - started, ...extra });
}

class ScenarioError extends Error {
  constructor(message, details = {}) {
    super(message);
    this.details = details;
  }
}

function fail(message, details) {
  throw new ScenarioError(message, details);
}

let serial = 0;
const nextId = (prefix) => `${prefix}-${++serial}`;

function utf8OrNull(bytes) {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return null;
  }
}

// ---------------------------------------------------------------------------------------------
// Waiting: every source of events (messages, receipts, errors, closes, heart-beats) calls
// changed(); until() re-evaluates its predicate then, so nothing polls and nothing sleeps.
// ---------------------------------------------------------------------------------------------

class Waitable {
  constructor() {
    this._waiters = new Set();
  }

  changed() {
    for (const w of [...this._waiters]) w();
  }

  // Resolves with pred()'s first truthy value. Rejects after `ms`, or as soon as broken() returns
  // a reason (the connection failed: waiting on would only time out).
  until(pred, what, { ms = TIMEOUT, broken = () => null } = {}) {
    return new Promise((resolve, reject) => {
      const check = () => {
        let value;
        try {
          value = pred();
        } catch (e) {
          finish();
          reject(e);
          return;
        }
        if (value) {
          finish();
          resolve(value);
          return;
        }
        const reason = broken();
        if (reason) {
          finish();
          reject(new ScenarioError(`while waiting for ${what}: ${reason}`, this.summary()));
        }
      };
      const timer = setTimeout(() => {
        finish();
        reject(new ScenarioError(`timed out after ${ms} ms waiting for ${what}`, this.summary()));
      }, ms);
      const finish = () => {
        clearTimeout(timer);
        this._waiters.delete(check);
      };
      this._waiters.add(check);
      check();
    });
  }

  summary() {
    return {};
  }
}

// ---------------------------------------------------------------------------------------------
// A stompjs session
// ---------------------------------------------------------------------------------------------

function frameJson(frame) {
  // stompjs hands every received body over as bytes (binaryBody); text when it is UTF-8.
  const out = { command: frame.command, headers: { ...frame.headers } };
  const bytes = frame.binaryBody;
  const text = bytes ? utf8OrNull(bytes) : frame.body;
  if (text === null) out.body_hex = Buffer.from(bytes).toString('hex');
  else out.body = text;
  return out;
}

class Session extends Waitable {
  constructor(config = {}, { wsOptions = TLS_OPTIONS, protocols = PROTOCOLS } = {}) {
    super();
    this.debugLines = [];
    this.messages = []; // {subscription, frame, json}
    this.receipts = {}; // receipt-id -> RECEIPT frame (JSON)
    this.receiptOrder = [];
    this.unhandled = []; // frames stompjs found no handler for
    this.errors = []; // ERROR frames
    this.closes = []; // {code, reason, wasClean, t_ms}
    this.connectedFrames = [];
    this.pongTimes = []; // heart-beats from the server (ms since the start)
    this.heartbeatLost = 0;
    this.sockets = [];
    this.client = new Client({
      webSocketFactory: () => {
        const ws = new WebSocket(url, protocols, { ...wsOptions });
        this.sockets.push(ws);
        return ws;
      },
      reconnectDelay: 0,
      heartbeatIncoming: 0,
      heartbeatOutgoing: 0,
      connectionTimeout: TIMEOUT,
      debug: (line) => {
        this.debugLines.push(line);
        if (this.debugLines.length > 200) this.debugLines.shift();
        if (opts.debug) process.stderr.write(`stompjs: ${line}\n`);
      },
      onConnect: (frame) => {
        this.connectedFrames.push(frameJson(frame));
        this.changed();
      },
      onStompError: (frame) => {
        this.errors.push(frameJson(frame));
        this.changed();
      },
      onWebSocketClose: (e) => {
        this.closes.push({ code: e.code, reason: String(e.reason ?? ''), wasClean: e.wasClean, t_ms: Date.now() - started });
        this.changed();
      },
      onWebSocketError: () => this.changed(),
      onUnhandledMessage: (m) => {
        this.unhandled.push(frameJson(m));
        this.changed();
      },
      onUnhandledReceipt: (f) => {
        this.unhandled.push(frameJson(f));
        this.changed();
      },
      onUnhandledFrame: (f) => {
        this.unhandled.push(frameJson(f));
        this.changed();
      },
      onHeartbeatReceived: () => {
        this.pongTimes.push(Date.now() - started);
        this.changed();
      },
      onHeartbeatLost: () => {
        this.heartbeatLost++;
        this.changed();
      },
      ...config,
    });
  }

  get ws() {
    return this.sockets[this.sockets.length - 1];
  }

  summary() {
    return {
      connected: this.connectedFrames,
      errors: this.errors,
      closes: this.closes,
      messages: this.messages.map((m) => m.json),
      receipts: this.receiptOrder,
      unhandled: this.unhandled,
      debug_tail: this.debugLines.slice(-30),
    };
  }

  // Why waiting for a frame is pointless now, or null.
  broken() {
    if (this.errors.length > (this._errorsSeen ?? 0)) return `ERROR frame ${JSON.stringify(this.errors.at(-1))}`;
    if (this.closes.length > this._closesSeen) return `WebSocket closed ${JSON.stringify(this.closes.at(-1))}`;
    return null;
  }

  wait(pred, what, ms) {
    return this.until(pred, what, { ms, broken: () => this.broken() });
  }

  async connect() {
    this._closesSeen = this.closes.length;
    const before = this.connectedFrames.length;
    this.client.activate();
    await this.wait(() => this.connectedFrames.length > before, 'CONNECTED');
    return this.connectedFrames.at(-1);
  }

  watch(receiptId) {
    this.client.watchForReceipt(receiptId, (frame) => {
      this.receipts[receiptId] = frameJson(frame);
      this.receiptOrder.push(receiptId);
      this.changed();
    });
    return receiptId;
  }

  waitReceipt(receiptId) {
    return this.wait(() => this.receipts[receiptId], `RECEIPT ${receiptId}`);
  }

  // SUBSCRIBE with a receipt; resolves once the broker has answered it.
  async subscribe(destination, headers = {}) {
    const receipt = this.watch(nextId('subscribe'));
    const sub = this.client.subscribe(
      destination,
      (frame) => {
        this.messages.push({ subscription: frame.headers.subscription, frame, json: frameJson(frame) });
        this.changed();
      },
      { ...headers, receipt },
    );
    await this.waitReceipt(receipt);
    return sub;
  }

  // SEND with a receipt; resolves with the RECEIPT.
  async publish(destination, body, headers = {}, extra = {}) {
    const receipt = this.watch(nextId('send'));
    this.client.publish({ destination, body, headers: { ...headers, receipt }, ...extra });
    return this.waitReceipt(receipt);
  }

  // Resolves with the first message (in arrival order) matching pred that `taken` does not hold.
  async take(pred, what, taken = this._taken ?? (this._taken = new Set())) {
    const m = await this.wait(() => this.messages.find((x) => !taken.has(x) && pred(x.json)), what);
    taken.add(m);
    return m;
  }

  async disconnect() {
    // DISCONNECT with a receipt: stompjs closes the WebSocket once the RECEIPT arrived.
    const receipt = nextId('disconnect');
    let disconnectReceipt = null;
    this.client.onDisconnect = (frame) => {
      disconnectReceipt = frameJson(frame);
    };
    this.client.configure({ disconnectHeaders: { receipt } });
    const closed = this.closes.length;
    const done = this.client.deactivate();
    await this.until(() => this.closes.length > closed, 'the WebSocket to close after DISCONNECT');
    await done;
    if (!disconnectReceipt) fail('the WebSocket closed before the DISCONNECT receipt', this.summary());
    return disconnectReceipt;
  }
}

// ---------------------------------------------------------------------------------------------
// Raw STOMP over a raw `ws` WebSocket
// ---------------------------------------------------------------------------------------------

const UNESCAPE = { '\\r': '\r', '\\n': '\n', '\\c': ':', '\\\\': '\\' };

// STOMP frames out of a byte stream (any split across WebSocket messages), heart-beat EOLs counted.
class StompParser {
  constructor() {
    this.buf = Buffer.alloc(0);
    this.eols = 0;
  }

  push(chunk) {
    this.buf = Buffer.concat([this.buf, chunk]);
    const frames = [];
    for (let f = this.one(); f; f = this.one()) frames.push(f);
    return frames;
  }

  one() {
    let i = 0;
    const b = this.buf;
    while (i < b.length && (b[i] === 0x0a || (b[i] === 0x0d && b[i + 1] === 0x0a))) {
      i += b[i] === 0x0d ? 2 : 1;
      this.eols++;
    }
    this.buf = b.subarray(i);
    const text = this.buf.toString('latin1'); // one char a byte: indices are byte offsets
    const end = /\r?\n\r?\n/.exec(text);
    if (!end) return null;
    const lines = text.slice(0, end.index).split(/\r?\n/);
    const command = lines[0];
    const headerList = [];
    for (const line of lines.slice(1)) {
      const colon = line.indexOf(':');
      let name = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      name = Buffer.from(name, 'latin1').toString('utf8');
      value = Buffer.from(value, 'latin1').toString('utf8');
      if (command !== 'CONNECTED') {
        name = name.replace(/\\./g, (e) => UNESCAPE[e] ?? e);
        value = value.replace(/\\./g, (e) => UNESCAPE[e] ?? e);
      }
      headerList.push([name, value]);
    }
    const headers = {};
    for (const [k, v] of headerList) if (!(k in headers)) headers[k] = v;
    const start = end.index + end[0].length;
    let body;
    if (headers['content-length'] !== undefined) {
      const n = parseInt(headers['content-length'], 10);
      if (this.buf.length < start + n + 1) return null;
      body = this.buf.subarray(start, start + n);
      this.buf = this.buf.subarray(start + n + 1);
    } else {
      const nul = this.buf.indexOf(0, start);
      if (nul < 0) return null;
      body = this.buf.subarray(start, nul);
      this.buf = this.buf.subarray(nul + 1);
    }
    const frame = { command, headers, header_list: headerList };
    const textBody = utf8OrNull(body);
    if (textBody === null) frame.body_hex = Buffer.from(body).toString('hex');
    else frame.body = textBody;
    return frame;
  }
}

function frameBytes(command, headers = {}, body = '') {
  const head = [command, ...Object.entries(headers).map(([k, v]) => `${k}:${v}`)].join('\n');
  const bodyBytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : Buffer.from(body);
  return Buffer.concat([Buffer.from(head + '\n\n', 'utf8'), bodyBytes, Buffer.from([0])]);
}

class RawWs extends Waitable {
  constructor({ protocols = PROTOCOLS, origin, headers } = {}) {
    super();
    this.parser = new StompParser();
    this.frames = [];
    this.wsMessages = []; // {binary, bytes, frames: [commands], utf8}
    this.closed = null;
    this.opened = false;
    this.response = null; // a refused upgrade: {status, headers, body}
    this.errors = [];
    const options = { perMessageDeflate: false, ...TLS_OPTIONS };
    if (origin) options.origin = origin;
    if (headers) options.headers = headers;
    this.ws = new WebSocket(url, protocols, options);
    this.ws.on('open', () => {
      this.opened = true;
      this.changed();
    });
    this.ws.on('message', (data, isBinary) => {
      const bytes = Buffer.isBuffer(data) ? data : Buffer.concat(data);
      const frames = this.parser.push(bytes);
      this.frames.push(...frames);
      this.wsMessages.push({
        binary: isBinary,
        length: bytes.length,
        utf8: utf8OrNull(bytes) !== null,
        frames: frames.map((f) => f.command),
        eols_so_far: this.parser.eols,
      });
      this.changed();
    });
    this.ws.on('close', (code, reason) => {
      this.closed = { code, reason: reason.toString(), t_ms: Date.now() - started };
      this.changed();
    });
    this.ws.on('error', (e) => {
      this.errors.push(String(e.message ?? e));
      this.changed();
    });
    this.ws.on('unexpected-response', (req, res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        this.response = { status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString() };
        this.changed();
        req.destroy();
      });
      res.on('error', () => {
        this.response ??= { status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString() };
        this.changed();
      });
    });
  }

  summary() {
    return {
      opened: this.opened,
      protocol: this.ws.protocol,
      response: this.response,
      frames: this.frames,
      ws_messages: this.wsMessages,
      closed: this.closed,
      ws_errors: this.errors,
    };
  }

  async open() {
    await this.until(
      () => this.opened || this.response || this.closed,
      'the WebSocket handshake',
    );
    if (!this.opened) fail('the WebSocket handshake failed', this.summary());
  }

  send(data, binary = false) {
    this.ws.send(data, { binary });
  }

  // The next frame after the `from`-th (in arrival order); fails if the server closes first.
  async frame(index, what) {
    return this.until(() => this.frames[index], what, {
      broken: () => (this.closed ? `the server closed ${JSON.stringify(this.closed)}` : null),
    });
  }

  waitClosed(what = 'the server to close the WebSocket') {
    return this.until(() => this.closed, what);
  }

  async connect(headers = 'accept-version:1.2\nhost:localhost\n') {
    const n = this.frames.length;
    this.send(`CONNECT\n${headers}\n\0`);
    const f = await this.frame(n, 'CONNECTED');
    if (f.command !== 'CONNECTED') fail(`expected CONNECTED, got ${f.command}`, this.summary());
    return f;
  }
}

// ---------------------------------------------------------------------------------------------
// Scenarios (stompjs)
// ---------------------------------------------------------------------------------------------

const scenarios = {};

// SUBSCRIBE, then SEND with headers that need escaping; the MESSAGE comes back with body and
// headers. options: destination, body.
scenarios['send-subscribe'] = async () => {
  const s = new Session();
  const connected = await s.connect();
  const destination = opts.destination;
  await s.subscribe(destination, { ack: 'auto' });
  const sentHeaders = {
    'content-type': 'text/plain;charset=utf-8',
    'x-plain': 'value',
    'x-colon': 'a:b',
    'x-newline': 'line1\nline2',
    'x-backslash': 'c\\d',
    'x-unicode': 'żółw ✓',
  };
  const body = opts.body ?? 'hello over WebSocket';
  const receipt = await s.publish(destination, body, sentHeaders);
  const m = await s.take(() => true, 'the MESSAGE');
  const disconnectReceipt = await s.disconnect();
  return {
    connected,
    protocol: s.sockets[0].protocol,
    send_receipt: receipt,
    message: m.json,
    sent_headers: sentHeaders,
    disconnect_receipt: disconnectReceipt,
    errors: s.errors,
    unhandled: s.unhandled,
  };
};

// SEND each of `bodies` to `destination` (with `headers`), each with a receipt.
scenarios.send = async () => {
  const s = new Session();
  await s.connect();
  const receipts = [];
  for (const body of opts.bodies) receipts.push(await s.publish(opts.destination, body, opts.headers ?? {}));
  await s.disconnect();
  return { receipts, errors: s.errors };
};

// SUBSCRIBE to `destination` (ack `ack`, default auto), print event "subscribed", wait for `count`
// messages (client-individual: ACK each with a receipt), DISCONNECT.
scenarios.receive = async () => {
  const s = new Session();
  await s.connect();
  const ack = opts.ack ?? 'auto';
  await s.subscribe(opts.destination, { ack });
  event('subscribed');
  const got = [];
  for (let i = 0; i < opts.count; i++) {
    const m = await s.take(() => true, `message ${i + 1} of ${opts.count}`);
    if (ack !== 'auto') {
      const receipt = s.watch(nextId('ack'));
      m.frame.ack({ receipt });
      await s.waitReceipt(receipt);
    }
    got.push(m.json);
  }
  await s.disconnect();
  return { messages: got, errors: s.errors, unhandled: s.unhandled };
};

// client-individual: "first" is ACKed, "second" NACKed and comes back redelivered; the redelivery
// is left unacknowledged, so DISCONNECT returns it to the queue. options: destination.
scenarios['ack-nack'] = async () => {
  const s = new Session();
  await s.connect();
  const destination = opts.destination;
  await s.subscribe(destination, { ack: 'client-individual' });
  await s.publish(destination, 'first');
  await s.publish(destination, 'second');
  const first = await s.take((m) => m.body === 'first', 'message "first"');
  const second = await s.take((m) => m.body === 'second', 'message "second"');
  const ackReceipt = s.watch(nextId('ack'));
  first.frame.ack({ receipt: ackReceipt });
  await s.waitReceipt(ackReceipt);
  const nackReceipt = s.watch(nextId('nack'));
  second.frame.nack({ receipt: nackReceipt });
  await s.waitReceipt(nackReceipt);
  const again = await s.take((m) => m.body === 'second', 'message "second" redelivered after its NACK');
  await s.disconnect();
  return {
    deliveries: [first.json, second.json, again.json],
    errors: s.errors,
    unhandled: s.unhandled,
  };
};

// Local transactions. On `destination` (auto ack): "in-tx-committed" is sent in a transaction that
// is committed, "in-tx-aborted" in one that is aborted; a sentinel sent after each (outside any
// transaction) proves what was visible by then (one consumer, FIFO). On `ack_destination`
// (client-individual): the ACK of "ack-aborted" inside a transaction that is aborted returns it to
// the queue, so it comes back (left unacknowledged: DISCONNECT returns it once more); the ACK of
// "ack-committed" inside a committed one removes it. Result: the order of arrival.
scenarios.transactions = async () => {
  const s = new Session();
  await s.connect();
  const destination = opts.destination;
  await s.subscribe(destination, { ack: 'auto' });

  const tx1 = s.client.begin();
  await s.publish(destination, 'in-tx-committed', { transaction: tx1.id });
  await s.publish(destination, 'sentinel-1');
  await s.take((m) => m.body === 'sentinel-1', 'sentinel-1');
  const beforeCommit = s.messages.map((m) => m.json.body);
  tx1.commit();
  await s.take((m) => m.body === 'in-tx-committed', 'the committed message');

  const tx2 = s.client.begin();
  await s.publish(destination, 'in-tx-aborted', { transaction: tx2.id });
  tx2.abort();
  await s.publish(destination, 'sentinel-2');
  await s.take((m) => m.body === 'sentinel-2', 'sentinel-2');

  const ackDestination = opts.ack_destination;
  await s.publish(ackDestination, 'ack-aborted');
  await s.publish(ackDestination, 'ack-committed');
  await s.subscribe(ackDestination, { ack: 'client-individual' });
  const aborted = await s.take((m) => m.body === 'ack-aborted', 'ack-aborted');
  const committed = await s.take((m) => m.body === 'ack-committed', 'ack-committed');
  const tx3 = s.client.begin();
  aborted.frame.ack({ transaction: tx3.id });
  tx3.abort();
  // The rollback returns what its ACK consumed to the queue (docs/transactions.md): it comes back.
  const back = await s.take((m) => m.body === 'ack-aborted', 'ack-aborted again after the ABORT');
  const tx4 = s.client.begin();
  committed.frame.ack({ transaction: tx4.id });
  tx4.commit();
  // DISCONNECT's receipt comes after everything before it is done.
  await s.disconnect();
  return {
    before_commit: beforeCommit,
    order: s.messages.map((m) => m.json.body),
    first_delivery_of_aborted_ack: aborted.json,
    after_abort: back.json,
    errors: s.errors,
    unhandled: s.unhandled,
  };
};

// Receipts through watchForReceipt: SUBSCRIBE, SEND, ACK, UNSUBSCRIBE, DISCONNECT (stompjs's own
// disconnectHeaders receipt and onDisconnect). options: destination.
scenarios.receipts = async () => {
  const s = new Session();
  await s.connect();
  const destination = opts.destination;
  const asked = [];
  const subReceipt = s.watch('r-subscribe');
  asked.push(subReceipt);
  const sub = s.client.subscribe(
    destination,
    (frame) => {
      s.messages.push({ subscription: frame.headers.subscription, frame, json: frameJson(frame) });
      s.changed();
    },
    { ack: 'client-individual', receipt: subReceipt },
  );
  await s.waitReceipt(subReceipt);
  asked.push(s.watch('r-send'));
  s.client.publish({ destination, body: 'with receipts', headers: { receipt: 'r-send' } });
  await s.waitReceipt('r-send');
  const m = await s.take(() => true, 'the MESSAGE');
  asked.push(s.watch('r-ack'));
  m.frame.ack({ receipt: 'r-ack' });
  await s.waitReceipt('r-ack');
  asked.push(s.watch('r-unsubscribe'));
  sub.unsubscribe({ receipt: 'r-unsubscribe' });
  await s.waitReceipt('r-unsubscribe');
  const disconnectReceipt = await s.disconnect();
  return {
    asked,
    receipts: s.receiptOrder.map((id) => s.receipts[id]),
    disconnect_receipt: disconnectReceipt,
    errors: s.errors,
    unhandled: s.unhandled,
  };
};

// Heart-beats 1000,1000 negotiated; then no traffic at all for `idle_ms` (default 3500) and until
// `pongs` (default 3) server heart-beats arrived; the connection must stay up (the broker reads
// stompjs's PINGs), then a message still goes round. options: destination, idle_ms, pongs.
scenarios.heartbeat = async () => {
  const s = new Session({ heartbeatIncoming: 1000, heartbeatOutgoing: 1000 });
  const connected = await s.connect();
  const idleFrom = Date.now();
  const idleMs = opts.idle_ms ?? 3500;
  const pongs = opts.pongs ?? 3;
  const pongsBefore = s.pongTimes.length;
  let idleOver = false;
  const timer = setTimeout(() => {
    idleOver = true;
    s.changed();
  }, idleMs);
  await s.wait(() => idleOver && s.pongTimes.length - pongsBefore >= pongs && !s.heartbeatLost,
    `${idleMs} ms of silence and ${pongs} heart-beats from the server`, TIMEOUT + idleMs);
  clearTimeout(timer);
  const idle = Date.now() - idleFrom;
  const pongTimes = s.pongTimes.slice(pongsBefore);
  const closesWhileIdle = s.closes.length;
  await s.subscribe(opts.destination);
  await s.publish(opts.destination, 'after the silence');
  const m = await s.take(() => true, 'the message sent after the silence');
  await s.disconnect();
  return {
    connected,
    idle_ms: idle,
    pong_times_ms: pongTimes,
    pong_gaps_ms: pongTimes.slice(1).map((t, i) => t - pongTimes[i]),
    heartbeat_lost: s.heartbeatLost,
    closes_while_idle: closesWhileIdle,
    message: m.json,
    errors: s.errors,
  };
};

// CONNECT with login/passcode (options: login, passcode). Either CONNECTED (then a message goes
// round on options.destination) or an ERROR and a close: both are results, the caller decides.
scenarios.login = async () => {
  const headers = {};
  if (opts.login !== undefined) headers.login = opts.login;
  if (opts.passcode !== undefined) headers.passcode = opts.passcode;
  const s = new Session({ connectHeaders: headers });
  s._closesSeen = 0;
  s.client.activate();
  await s.until(() => s.connectedFrames.length || (s.errors.length && s.closes.length) || s.closes.length,
    'CONNECTED, or an ERROR and a close');
  if (s.errors.length && !s.closes.length) await s.until(() => s.closes.length, 'the close after the ERROR');
  const result = { connected: s.connectedFrames[0] ?? null, errors: s.errors, closes: s.closes };
  if (result.connected) {
    await s.subscribe(opts.destination);
    await s.publish(opts.destination, 'logged in');
    result.message = (await s.take(() => true, 'the message')).json;
    await s.disconnect();
  } else {
    await s.client.deactivate();
  }
  return result;
};

// Reconnects after a broker restart. First connection: SEND "before-restart" to
// options.before_destination (receipt), then event "connected" {n: 1}: the caller restarts
// escrowd on the same port. stompjs reconnects (reconnectDelay 200 ms, event "closed" for each
// close, "connected" {n} for each CONNECTED); on the first connection after the restart it
// SUBSCRIBEs to options.destination (event "subscribed"), takes the message the caller sent there,
// and SENDs "reply-from-node" to options.reply_destination.
scenarios.reconnect = async () => {
  let n = 0;
  const s = new Session({ reconnectDelay: 200 });
  s.client.onConnect = (frame) => {
    s.connectedFrames.push(frameJson(frame));
    n++;
    s.changed();
  };
  s.client.onWebSocketClose = (e) => {
    s.closes.push({ code: e.code, reason: String(e.reason ?? ''), t_ms: Date.now() - started });
    event('closed', { code: e.code, closes: s.closes.length });
    s.changed();
  };
  s.client.activate();
  await s.until(() => n >= 1, 'the first CONNECTED');
  s._closesSeen = s.closes.length;
  await s.publish(opts.before_destination, 'before-restart');
  event('connected', { n: 1 });
  // The restart: wait for the close, then for the next CONNECTED (reconnect attempts that fail
  // while escrowd is down close too; that is the point of the loop).
  await s.until(() => s.closes.length > 0, 'the close when escrowd stops', { ms: 4 * TIMEOUT });
  await s.until(() => n >= 2, 'CONNECTED again after the restart', { ms: 4 * TIMEOUT });
  const reconnectedAfterCloses = s.closes.length;
  const errorsDuringRestart = [...s.errors];
  event('connected', { n: 2 });
  s._closesSeen = s.closes.length;
  s._errorsSeen = s.errors.length;
  await s.subscribe(opts.destination);
  event('subscribed');
  const m = await s.take(() => true, 'the message sent after the restart');
  await s.publish(opts.reply_destination, 'reply-from-node');
  await s.disconnect();
  return {
    connects: n,
    closes_before_reconnect: reconnectedAfterCloses,
    closes: s.closes,
    connected: s.connectedFrames,
    message: m.json,
    errors_during_restart: errorsDuringRestart,
    errors: s.errors.slice(errorsDuringRestart.length),
  };
};

// ---------------------------------------------------------------------------------------------
// Scenarios (raw ws)
// ---------------------------------------------------------------------------------------------

// Opens a WebSocket (options: origin, protocols: the subprotocols offered, [] for none) and, if the
// upgrade succeeds, CONNECTs. Result: opened, the chosen subprotocol, the HTTP answer of a refused
// upgrade, the CONNECTED frame.
scenarios['raw-open'] = async () => {
  const r = new RawWs({ protocols: opts.protocols ?? PROTOCOLS, origin: opts.origin });
  await r.until(() => r.opened || r.response || r.closed, 'the WebSocket handshake');
  if (!r.opened) {
    if (!r.response) await r.until(() => r.response || r.closed, 'the refused upgrade').catch(() => {});
    return { opened: false, response: r.response, closed: r.closed, ws_errors: r.errors };
  }
  const connected = await r.connect();
  r.send('DISCONNECT\nreceipt:bye\n\n\0');
  const receipt = await r.frame(1, 'the DISCONNECT receipt');
  await r.waitClosed();
  return { opened: true, protocol: r.ws.protocol, connected, receipt, closed: r.closed };
};

// CONNECT in two WebSocket messages; then one message holding SUBSCRIBE (receipt) + SEND + SEND
// (content-length) + the first half of a third SEND, and one holding its second half + DISCONNECT
// (receipt). Every frame must come back: RECEIPT, three MESSAGEs, RECEIPT, then the close.
// options: destination.
scenarios['raw-split'] = async () => {
  const r = new RawWs();
  await r.open();
  const connect = 'CONNECT\naccept-version:1.2\nhost:localhost\n\n\0';
  const cut = connect.indexOf('version') + 3;
  r.send(connect.slice(0, cut));
  r.send(connect.slice(cut));
  const connected = await r.frame(0, 'CONNECTED after a CONNECT split across two messages');
  const d = opts.destination;
  const third = frameBytes('SEND', { destination: d, 'content-length': 11 }, 'third\0body!');
  const half = 7 + d.length; // inside the destination header
  r.send(Buffer.concat([
    frameBytes('SUBSCRIBE', { destination: d, id: 's1', receipt: 'subscribed' }),
    frameBytes('SEND', { destination: d }, 'first'),
    frameBytes('SEND', { destination: d, 'content-length': 6 }, 'second'),
    third.subarray(0, half),
  ]));
  r.send(Buffer.concat([third.subarray(half), frameBytes('DISCONNECT', { receipt: 'bye' })]));
  await r.until(() => r.frames.some((f) => f.command === 'RECEIPT' && f.headers['receipt-id'] === 'bye'),
    'the DISCONNECT receipt', { broken: () => (r.closed ? 'closed before the DISCONNECT receipt' : null) });
  await r.waitClosed();
  return {
    protocol: r.ws.protocol,
    connected,
    frames: r.frames.slice(1),
    ws_messages: r.wsMessages,
    closed: r.closed,
  };
};

// A SEND bigger than options.max_frame_size (by options.excess, default 1000 bytes), in one
// WebSocket message or (options.chunk: bytes per message) in many small ones. Result: what came
// back (an ERROR) and the close.
scenarios['raw-oversize'] = async () => {
  const r = new RawWs();
  await r.open();
  await r.connect();
  const size = opts.max_frame_size + (opts.excess ?? 1000);
  const frame = frameBytes('SEND', { destination: opts.destination, receipt: 'big' }, 'x'.repeat(size));
  if (opts.chunk) {
    for (let i = 0; i < frame.length && !r.closed; i += opts.chunk) {
      r.send(frame.subarray(i, i + opts.chunk));
    }
  } else {
    r.send(frame);
  }
  await r.waitClosed('the server to close after the oversized frame');
  return { frames: r.frames.slice(1), closed: r.closed, frame_bytes: frame.length };
};

// Binary garbage as a WebSocket message, before CONNECT or (options.after_connect) after it.
scenarios['raw-garbage'] = async () => {
  const r = new RawWs();
  await r.open();
  let connected = null;
  if (opts.after_connect) connected = await r.connect();
  r.send(Buffer.from([0xde, 0xad, 0xbe, 0xef, 0x00, 0xff, 0xfe, 0x0a, 0x80, 0x0a, 0x0a, 0x01, 0x00]), true);
  await r.waitClosed('the server to close after the garbage');
  return { connected, frames: r.frames.slice(connected ? 1 : 0), closed: r.closed };
};

// Opens the WebSocket and sends nothing at all; the broker must close it (connect-timeout-ms).
scenarios['raw-no-connect'] = async () => {
  const r = new RawWs();
  await r.open();
  const openedAt = Date.now();
  await r.waitClosed();
  return { frames: r.frames, closed: r.closed, open_ms: Date.now() - openedAt };
};

// CONNECT promising heart-beats (heart-beat:1000,0), then silence: the broker must give up on it.
scenarios['raw-heartbeat-silent'] = async () => {
  const r = new RawWs();
  await r.open();
  const connected = await r.connect('accept-version:1.2\nhost:localhost\nheart-beat:1000,0\n');
  const from = Date.now();
  await r.waitClosed('the server to close the silent client');
  return { connected, frames: r.frames.slice(1), closed: r.closed, silent_ms: Date.now() - from };
};

// Binary bodies. SUBSCRIBE to options.destination and take options.count MESSAGEs (the caller put
// them there); then SEND options.send_hex (bytes, content-length) to options.send_destination as a
// binary WebSocket message, with a receipt. Result: each frame and the WebSocket messages (text or
// binary, valid UTF-8 or not, the frames each held).
scenarios['raw-binary'] = async () => {
  const r = new RawWs();
  await r.open();
  await r.connect();
  r.send(frameBytes('SUBSCRIBE', { destination: opts.destination, id: 'b', receipt: 'subscribed' }));
  await r.until(() => r.frames.filter((f) => f.command === 'MESSAGE').length >= opts.count,
    `${opts.count} MESSAGEs`, { broken: () => (r.closed ? 'closed' : null) });
  const body = Buffer.from(opts.send_hex, 'hex');
  r.send(frameBytes('SEND', { destination: opts.send_destination, 'content-length': body.length, receipt: 'sent' }, body), true);
  await r.until(() => r.frames.some((f) => f.headers['receipt-id'] === 'sent'), 'the SEND receipt',
    { broken: () => (r.closed ? 'closed' : null) });
  r.send('DISCONNECT\nreceipt:bye\n\n\0');
  await r.waitClosed();
  return { frames: r.frames.slice(1), ws_messages: r.wsMessages, closed: r.closed };
};

// ---------------------------------------------------------------------------------------------

async function main() {
  const run = scenarios[scenarioName];
  if (!url || !run) {
    emit({ error: `usage: stomp_node.mjs WS-URL SCENARIO [OPTIONS-JSON]; scenarios: ${Object.keys(scenarios).join(', ')}` });
    process.exit(2);
  }
  try {
    const result = await run();
    emit({ result });
    process.exit(0);
  } catch (e) {
    emit({ error: e.message, details: e.details ?? null, stack: e.details ? undefined : e.stack });
    process.exit(1);
  }
}

main();
