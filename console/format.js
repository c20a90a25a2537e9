// Number, size, age and rate formatting, as `escrow` prints them where it has a form for it.

const integer = new Intl.NumberFormat("en-US", {maximumFractionDigits: 0});
const decimal = new Intl.NumberFormat("en-US", {maximumFractionDigits: 1, minimumFractionDigits: 0});

export function count(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  return integer.format(n);
}

// 1536 -> "1.5 KiB"
export function bytes(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${integer.format(v)} B` : `${decimal.format(v)} ${units[i]}`;
}

// Messages per second: "12.5/s", "0/s", "–" when not known yet.
export function rate(r) {
  if (r === null || r === undefined || Number.isNaN(r)) return "–";
  if (r === 0) return "0/s";
  if (Math.abs(r) < 10) return `${r.toFixed(Math.abs(r) < 1 ? 2 : 1)}/s`;
  return `${integer.format(r)}/s`;
}

export function percent(fraction) {
  if (fraction === null || fraction === undefined || Number.isNaN(fraction)) return "–";
  const p = fraction * 100;
  return `${p < 10 && p > 0 ? p.toFixed(1) : integer.format(p)} %`;
}

// Milliseconds as `escrow` prints ages: 950 -> "0.9s", 75000 -> "1m15s", 7500000 -> "2h05m".
export function age(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "–";
  const s = ms / 1000;
  if (s < 10) return `${s.toFixed(1)}s`;
  if (s < 60) return `${Math.floor(s)}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(Math.floor(s % 60)).padStart(2, "0")}s`;
  const hours = Math.floor(m / 60);
  if (hours < 48) return `${hours}h${String(m % 60).padStart(2, "0")}m`;
  return `${Math.floor(hours / 24)}d${String(hours % 24).padStart(2, "0")}h`;
}

export function seconds(s) {
  return s === null || s === undefined ? "–" : age(s * 1000);
}

// An epoch-milliseconds time as local date and time, for message timestamps.
export function time(ms) {
  if (!ms) return "–";
  return new Date(ms).toLocaleString("sv-SE");  // 2026-11-30 14:05:09
}

// The first `max` characters of a body, one line.
export function preview(text, max = 80) {
  if (text === null || text === undefined) return "";
  const line = String(text).replace(/\s+/g, " ");
  return line.length > max ? line.slice(0, max - 1) + "…" : line;
}
