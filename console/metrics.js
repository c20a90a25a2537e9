// GET /api/v1/metrics (the /status JSON) every 2 seconds while a session is open, into a ring of
// the last 150 samples (5 minutes). Rates come from the differences of the broker's counters
// between two samples, over the broker's own uptime difference (not the browser's clock).
import * as api from "./api.js";

export const kPollMs = 2000;
export const kRingSize = 150;

// The commit log's fill: records after the last checkpoint (used) of the ring (size), in bytes,
// or null when the snapshot has no commit log.
export function commitLogUse(m) {
  const store = (m && m.store) || {};
  const used = store.log_used_bytes, size = store.log_size_bytes;
  if (typeof used === "number" && typeof size === "number" && size > 0) return {used, size};
  return null;
}

function derive(prev, s) {
  const m = s.json;
  const store = m.store || {};
  const totals = m.totals || {};
  const point = {
    t: s.t,
    rateIn: null,
    rateOut: null,
    depth: totals.depth ?? null,
    inFlight: totals.in_flight ?? null,
    liveBytes: store.live_bytes ?? null,
    fileBytes: store.file_bytes ?? null,
    storeFill: store.map_size_bytes ? store.map_used_bytes / store.map_size_bytes : null,
    logFill: null,
    connections: m.connections ?? null,
  };
  const log = commitLogUse(m);
  if (log) point.logFill = log.used / log.size;
  if (prev) {
    const p = prev.json;
    let dt = (m.uptime_seconds ?? NaN) - (p.uptime_seconds ?? NaN);
    if (!(dt > 0)) dt = (s.t - prev.t) / 1000;
    const restarted = (m.uptime_seconds ?? 0) < (p.uptime_seconds ?? 0);
    const diff = (a, b) => (typeof a === "number" && typeof b === "number" && a >= b ? a - b : null);
    if (dt > 0 && !restarted) {
      const din = diff(totals.enqueued, (p.totals || {}).enqueued);
      const dout = diff(totals.acknowledged, (p.totals || {}).acknowledged);
      point.rateIn = din === null ? null : din / dt;
      point.rateOut = dout === null ? null : dout / dt;
    }
  }
  return point;
}

class MetricsPoller {
  constructor() {
    this.samples = [];  // {t, json}
    this.points = [];
    this.listeners = new Set();
    this.timer = null;
    this.running = false;
    this.generation = 0;
    this.lastError = null;
  }

  get latest() {
    return this.samples.length ? this.samples[this.samples.length - 1].json : null;
  }

  start() {
    if (this.running) return;
    this.running = true;
    this.generation++;
    this.tick(this.generation);
  }

  stop() {
    this.running = false;
    this.generation++;
    clearTimeout(this.timer);
    this.timer = null;
  }

  // Forgets the samples (a new login may be another user on another broker).
  reset() {
    this.stop();
    this.samples = [];
    this.points = [];
  }

  subscribe(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  async tick(generation) {
    try {
      const json = await api.get("metrics");
      if (generation !== this.generation) return;
      const sample = {t: Date.now(), json};
      const prev = this.samples.length ? this.samples[this.samples.length - 1] : null;
      this.samples.push(sample);
      this.points.push(derive(prev, sample));
      if (this.samples.length > kRingSize) {
        this.samples.shift();
        this.points.shift();
      }
      this.lastError = null;
      for (const l of this.listeners) l(null);
    } catch (err) {
      if (generation !== this.generation) return;
      this.lastError = err;
      for (const l of this.listeners) l(err);
      if (err.status === 401) return;  // the session is gone: the login form takes over
    }
    if (generation === this.generation && this.running) {
      this.timer = setTimeout(() => this.tick(generation), kPollMs);
    }
  }
}

export const metrics = new MetricsPoller();
