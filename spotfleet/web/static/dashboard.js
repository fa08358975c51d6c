/* spotfleet dashboard: draws each chart from the JSON the server renders on its
   canvas (<canvas data-chart="KIND" data-points='{...}'>), on page load and again
   whenever htmx swaps new HTML in. Chart.js does the drawing;
   this file only maps the server's data onto Chart.js configurations. */
(function () {
  "use strict";

  const MARKET = { spot: "#1f7a6d", on_demand: "#b5502e", unknown: "#6e7781" };
  const STARTING = "#c9d1d9";
  const AVAILABLE = "#e6e6e6";
  const PALETTE = ["#0a58a8", "#1f7a6d", "#b5502e", "#7a3fc2", "#8a5a00", "#b42318", "#3b82c4", "#505a64"];
  const MARKERS = {
    notice: { pointStyle: "triangle", color: "#b42318", label: "interruption notice" },
    checkpoint: { pointStyle: "rectRot", color: "#0a58a8", label: "checkpoint" },
    resume: { pointStyle: "circle", color: "#1a6b34", label: "resume" },
    failed: { pointStyle: "crossRot", color: "#1b1f24", label: "failure" },
    reclaim: { pointStyle: "crossRot", color: "#1b1f24", label: "reclaim" },
  };

  function pad(n) { return String(n).padStart(2, "0"); }

  function timeLabel(ms, span) {
    const d = new Date(ms);
    const hms = pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes());
    if (span > 2 * 86400e3) return pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + " " + hms;
    return span > 3600e3 ? hms : hms + ":" + pad(d.getUTCSeconds());
  }

  function money(v) {
    return Math.abs(v) >= 1 || v === 0 ? "$" + v.toFixed(2) : "$" + v.toFixed(4);
  }

  /* Ticks on round UTC times: the smallest step that gives at most 8 of them. */
  const STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
    172800, 604800].map((s) => s * 1000);

  function timeAxis(min, max, title) {
    const span = Math.max(max - min, 1);
    const step = STEPS.find((s) => span / s <= 8) || STEPS[STEPS.length - 1];
    return {
      type: "linear", min: min, max: max,
      ticks: { stepSize: step, autoSkip: true, maxTicksLimit: 10, callback: (v) => timeLabel(v, span) },
      title: { display: true, text: title || "time (UTC)" },
    };
  }

  const BASE = { responsive: true, maintainAspectRatio: false, animation: false };

  /* Rows × time: floating bars (an attempt, or an instance in a zone), spot-available
     windows behind them, and point markers (notices, checkpoints, resumes, reclaims). */
  function timeline(d) {
    const bars = d.bars || [];
    const marks = d.markers || [];
    const starts = bars.map((b) => b.start).concat((d.available || []).map((a) => a.start));
    const ends = bars.map((b) => b.end).concat((d.available || []).map((a) => a.end));
    const min = d.start != null ? d.start : Math.min.apply(null, starts);
    let max = d.end != null ? d.end : Math.max.apply(null, ends.concat(d.now != null ? [d.now] : []));
    if (!(max > min)) max = min + 1000;
    const span = max - min;
    const datasets = [];
    if (d.available && d.available.length) {
      datasets.push({
        type: "bar", label: "spot available", grouped: false, order: 3, barPercentage: 0.95, categoryPercentage: 1,
        backgroundColor: AVAILABLE, data: d.available.map((a) => ({ x: [a.start, a.end], y: a.row })),
      });
    }
    const groups = {};
    for (const b of bars) {
      const key = b.phase === "starting" ? "starting" : b.market;
      (groups[key] = groups[key] || []).push(b);
    }
    for (const key of Object.keys(groups)) {
      datasets.push({
        type: "bar", label: key === "starting" ? "starting" : key.replace("_", "-"), grouped: false, order: 2,
        barPercentage: key === "starting" ? 0.35 : 0.6, categoryPercentage: 1,
        backgroundColor: key === "starting" ? STARTING : MARKET[key] || MARKET.unknown,
        data: groups[key].map((b) => ({ x: [b.start, b.end], y: b.row, text: b.text })),
      });
    }
    const byKind = {};
    for (const m of marks) (byKind[m.kind] = byKind[m.kind] || []).push(m);
    for (const kind of Object.keys(byKind)) {
      const look = MARKERS[kind] || MARKERS.failed;
      datasets.push({
        type: "scatter", label: look.label, kind: kind, order: 1, pointStyle: look.pointStyle, pointRadius: 8,
        pointHoverRadius: 10, backgroundColor: look.color, borderColor: "#ffffff", borderWidth: 1.5,
        data: byKind[kind].map((m) => ({ x: m.at, y: m.row, text: m.text })),
      });
    }
    return {
      type: "bar",
      data: { labels: d.rows, datasets: datasets },
      options: Object.assign({}, BASE, {
        indexAxis: "y",
        scales: {
          x: timeAxis(min, max),
          y: { type: "category", labels: d.rows, offset: true, ticks: { autoSkip: false } },
        },
        plugins: {
          legend: { position: "bottom", labels: { usePointStyle: true } },
          tooltip: {
            callbacks: {
              label: (ctx) => {
                const raw = ctx.raw || {};
                if (Array.isArray(raw.x)) {
                  return (raw.text || ctx.dataset.label) + ": " + timeLabel(raw.x[0], span) + " → " + timeLabel(raw.x[1], span);
                }
                return ctx.dataset.label + " " + timeLabel(raw.x, span) + (raw.text ? ": " + raw.text : "");
              },
            },
          },
        },
      }),
    };
  }

  /* Costs: daily spend stacked by tenant or market, the on-demand line over it. */
  function daily(d) {
    const datasets = d.stacks.map((s, i) => ({
      type: "bar", label: s.label, data: s.values, stack: "spend", order: 2,
      backgroundColor: d.by === "market" ? MARKET[s.label] || PALETTE[i % PALETTE.length] : PALETTE[i % PALETTE.length],
    }));
    datasets.push({
      type: "line", label: "on-demand would be", data: d.on_demand, stack: "on-demand", order: 1,
      borderColor: "#1b1f24", backgroundColor: "#1b1f24", borderDash: [6, 4], pointRadius: 4, tension: 0,
    });
    return {
      type: "bar",
      data: { labels: d.labels, datasets: datasets },
      options: Object.assign({}, BASE, {
        scales: {
          x: { stacked: true, title: { display: true, text: "day (UTC)" } },
          y: { stacked: true, beginAtZero: true, title: { display: true, text: "USD" }, ticks: { callback: (v) => money(v) } },
        },
        plugins: {
          legend: { position: "bottom" },
          tooltip: { callbacks: { label: (ctx) => ctx.dataset.label + ": " + money(ctx.parsed.y) } },
        },
      }),
    };
  }

  /* What-if: cumulative cost of the policy against the same work on on-demand. */
  function curves(d) {
    const pts = (ys) => d.at.map((x, i) => ({ x: x, y: ys[i] }));
    const min = d.at[0];
    const max = d.at[d.at.length - 1];
    return {
      type: "line",
      data: {
        datasets: [
          { label: d.policy, data: pts(d.cost), stepped: true, borderColor: MARKET.spot, backgroundColor: MARKET.spot, pointRadius: 0 },
          { label: "same work on on-demand", data: pts(d.on_demand), borderColor: MARKET.on_demand,
            backgroundColor: MARKET.on_demand, borderDash: [6, 4], pointRadius: 0 },
        ],
      },
      options: Object.assign({}, BASE, {
        parsing: true,
        scales: {
          x: timeAxis(min, max),
          y: { beginAtZero: true, title: { display: true, text: "cumulative USD" }, ticks: { callback: (v) => money(v) } },
        },
        plugins: {
          legend: { position: "bottom" },
          tooltip: { callbacks: { label: (ctx) => ctx.dataset.label + ": " + money(ctx.parsed.y) } },
        },
      }),
    };
  }

  /* Fleet: GPUs in use and idle per zone and market. */
  function gpus(d) {
    return {
      type: "bar",
      data: {
        labels: d.labels,
        datasets: [
          { label: "in use", data: d.busy, backgroundColor: MARKET.spot, stack: "gpus" },
          { label: "idle", data: d.idle, backgroundColor: "#c9d1d9", stack: "gpus" },
        ],
      },
      options: Object.assign({}, BASE, {
        indexAxis: "y",
        scales: { x: { stacked: true, beginAtZero: true, title: { display: true, text: "GPUs" } }, y: { stacked: true } },
        plugins: { legend: { position: "bottom" } },
      }),
    };
  }

  const BUILDERS = { timeline: timeline, daily: daily, curves: curves, gpus: gpus };

  function draw(root) {
    if (typeof window.Chart === "undefined") return;
    const scope = root && root.querySelectorAll ? root : document;
    const canvases = Array.from(scope.querySelectorAll("canvas[data-chart]"));
    if (scope.matches && scope.matches("canvas[data-chart]")) canvases.push(scope);
    for (const canvas of canvases) {
      const build = BUILDERS[canvas.dataset.chart];
      if (!canvas.dataset.points || !build) continue;
      const old = window.Chart.getChart(canvas);
      if (old) old.destroy();
      new window.Chart(canvas, build(JSON.parse(canvas.dataset.points)));
    }
  }

  document.addEventListener("DOMContentLoaded", () => draw(document));
  document.addEventListener("htmx:afterSettle", (evt) => draw(evt.detail && evt.detail.elt));
  window.spotfleetCharts = { draw: draw };
})();

/* Keep the live log tail pinned to its end while the reader is there. */
document.addEventListener("htmx:beforeSwap", (evt) => {
  const el = evt.detail && evt.detail.target;
  if (el && el.id === "log") el.dataset.pinned = String(el.scrollTop + el.clientHeight >= el.scrollHeight - 8);
});
document.addEventListener("htmx:afterSwap", (evt) => {
  const el = evt.detail && evt.detail.target;
  if (el && el.id === "log" && el.dataset.pinned !== "false") el.scrollTop = el.scrollHeight;
});
