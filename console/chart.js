// A small line chart on a canvas: a few series over the last minutes, a y axis from 0 with round
// ticks, minute marks on the x axis. Colours come from CSS custom properties (--series-1 ...), so
// the stylesheet decides them. Redrawn when data arrives and when the canvas changes size.

function niceStep(raw) {
  if (!(raw > 0)) return 1;
  const exponent = Math.pow(10, Math.floor(Math.log10(raw)));
  const f = raw / exponent;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * exponent;
}

// For byte sizes: a power of two (256 KiB, 2 MiB), so that the ticks read as round sizes.
export function niceStepBytes(raw) {
  if (!(raw > 1)) return 1;
  return Math.pow(2, Math.ceil(Math.log2(raw)));
}

const kMinute = 60 * 1000;

export class LineChart {
  // series: [{label, color: "--series-1"}]; format: value -> tick label; max: a fixed top (1 for
  // fractions) or null (from the data); step: raw step -> round step (niceStepBytes for sizes);
  // windowMs: the most time the x axis spans (it starts at one minute and grows with the data).
  constructor(canvas, {series, format = String, max = null, minTop = 1, step = niceStep, windowMs = 5 * kMinute}) {
    this.step = step;
    this.canvas = canvas;
    this.series = series;
    this.format = format;
    this.max = max;
    this.minTop = minTop;
    this.windowMs = windowMs;
    this.times = [];
    this.values = series.map(() => []);
    this.observer = new ResizeObserver(() => this.draw());
    this.observer.observe(canvas);
  }

  // times: epoch ms of each point; values: one array per series (null: no value at that point).
  setData(times, values) {
    this.times = times;
    this.values = values;
    this.draw();
  }

  destroy() {
    this.observer.disconnect();
  }

  draw() {
    const canvas = this.canvas;
    const width = canvas.clientWidth;
    const height = canvas.clientHeight;
    if (!width || !height) return;
    const ratio = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const style = getComputedStyle(canvas);
    const css = (name, fallback) => style.getPropertyValue(name).trim() || fallback;
    const ink = css("--chart-ink", "#555");
    const grid = css("--chart-grid", "#ddd");
    const font = `11px ${css("--chart-font", "sans-serif")}`;

    const left = 58;
    const right = 8;
    const top = 8;
    const bottom = 20;
    const plotW = Math.max(10, width - left - right);
    const plotH = Math.max(10, height - top - bottom);
    const now = this.times.length ? Math.max(Date.now(), this.times[this.times.length - 1]) : Date.now();
    const span = this.times.length ? now - this.times[0] : 0;
    const windowMs = Math.min(this.windowMs, Math.max(kMinute, Math.ceil(span / kMinute) * kMinute));
    const start = now - windowMs;

    let dataMax = 0;
    for (const list of this.values) for (const v of list) if (v !== null && v > dataMax) dataMax = v;
    let topValue;
    let step;
    if (this.max !== null) {
      topValue = this.max;
      step = topValue / 4;
    } else {
      step = this.step(Math.max(dataMax, this.minTop) / 4);
      topValue = Math.max(step * 4, Math.ceil(dataMax / step) * step);
    }
    const x = (t) => left + ((t - start) / windowMs) * plotW;
    const y = (v) => top + plotH - (v / topValue) * plotH;

    ctx.font = font;
    ctx.lineWidth = 1;
    ctx.fillStyle = ink;
    ctx.strokeStyle = grid;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let v = 0; v <= topValue + step / 1000; v += step) {
      const yy = Math.round(y(v)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(left, yy);
      ctx.lineTo(left + plotW, yy);
      ctx.stroke();
      ctx.fillText(this.format(v), left - 6, yy);
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const tick = windowMs <= 2 * kMinute ? 15000 : kMinute;
    for (let back = 0; back <= windowMs; back += tick) {
      const xx = Math.round(x(now - back)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(xx, top);
      ctx.lineTo(xx, top + plotH);
      ctx.stroke();
      const label = back === 0 ? "now" : back % kMinute ? `−${back / 1000}s` : `−${back / kMinute}m`;
      ctx.fillText(label, Math.min(Math.max(xx, left + 14), left + plotW - 14), top + plotH + 4);
    }

    if (!this.times.length) {
      ctx.fillStyle = ink;
      ctx.textBaseline = "middle";
      ctx.fillText("waiting for data…", left + plotW / 2, top + plotH / 2);
      return;
    }
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, top - 1, plotW, plotH + 2);
    ctx.clip();
    this.series.forEach((s, i) => {
      const list = this.values[i] || [];
      ctx.strokeStyle = css(s.color, "#1f6feb");
      ctx.lineWidth = 2;
      ctx.lineJoin = "round";
      ctx.beginPath();
      let drawing = false;
      let lone = null;
      for (let k = 0; k < this.times.length; k++) {
        const v = list[k];
        if (v === null || v === undefined) {
          drawing = false;
          continue;
        }
        const px = x(this.times[k]);
        const py = y(Math.min(v, topValue));
        if (drawing) {
          ctx.lineTo(px, py);
          lone = null;
        } else {
          ctx.moveTo(px, py);
          lone = [px, py];
        }
        drawing = true;
      }
      ctx.stroke();
      if (lone) {  // a single point so far: a dot, or nothing would show
        ctx.fillStyle = ctx.strokeStyle;
        ctx.beginPath();
        ctx.arc(lone[0], lone[1], 2.5, 0, 2 * Math.PI);
        ctx.fill();
      }
    });
    ctx.restore();
  }
}
