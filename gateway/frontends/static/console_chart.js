// The console's chart of calls per minute by verdict: stacked bars in an inline SVG built with DOM calls (no
// library, no markup), and a legend with each verdict's total. Used by console_decisions.js.
"use strict";
window.consoleChart = Object.freeze((() => {
  const { el, svg } = window.gatewayUi;
  // Bottom to top; any other verdict after them.
  const ORDER = ["allow", "approve", "skip", "pending", "reject", "terminate", "terminated"];
  const W = 1200;
  const H = 160;
  const PAD = { left: 44, right: 12, top: 12, bottom: 26 };
  const MINUTE = 60000;

  const safe = (v) => String(v).replace(/[^a-z_-]/gi, "");
  const clock = (t) => new Date(t).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });

  // `minutes`: [{minute: RFC 3339, counts: {verdict: n}}]; `since`, `until`: the range asked for (ms), or null.
  function chart(minutes, since, until) {
    const points = minutes.map((m) => ({ t: Date.parse(m.minute), counts: m && typeof m.counts === "object" ? m.counts : {} }))
      .filter((p) => !Number.isNaN(p.t) && p.counts);
    const totals = {};
    for (const p of points) {
      for (const [v, n] of Object.entries(p.counts)) totals[v] = (totals[v] || 0) + (Number(n) || 0);
    }
    const verdicts = Object.keys(totals).sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
    const all = verdicts.reduce((sum, v) => sum + totals[v], 0);
    const times = points.map((p) => p.t);
    const start = since ?? (times.length ? Math.min(...times) : Date.now() - 3600000);
    const end = Math.max(until ?? (times.length ? Math.max(...times) + MINUTE : Date.now()), start + MINUTE);
    const peak = Math.max(1, ...points.map((p) => verdicts.reduce((sum, v) => sum + (Number(p.counts[v]) || 0), 0)));
    const plotW = W - PAD.left - PAD.right;
    const plotH = H - PAD.top - PAD.bottom;
    const x = (t) => PAD.left + ((t - start) / (end - start)) * plotW;
    const barW = Math.max(1, (plotW * MINUTE) / (end - start) - 1);

    const said = all ? `${all} calls: ${verdicts.map((v) => `${totals[v]} ${v}`).join(", ")}` : "no calls";
    const picture = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart-svg", role: "img", "data-testid": "chart-svg",
      "aria-label": `Calls per minute by verdict from ${clock(start)} to ${clock(end)}: ${said}` });
    picture.append(
      svg("line", { x1: PAD.left, y1: PAD.top + plotH, x2: W - PAD.right, y2: PAD.top + plotH, class: "axis" }),
      svg("text", { x: PAD.left - 6, y: PAD.top + 10, class: "tick", "text-anchor": "end" }, String(peak)),
      svg("text", { x: PAD.left - 6, y: PAD.top + plotH, class: "tick", "text-anchor": "end" }, "0"),
      svg("text", { x: PAD.left, y: H - 6, class: "tick", "text-anchor": "start" }, clock(start)),
      svg("text", { x: W - PAD.right, y: H - 6, class: "tick", "text-anchor": "end" }, clock(end)));
    for (const p of points) {
      let y = PAD.top + plotH;
      for (const v of verdicts) {
        const n = Number(p.counts[v]) || 0;
        if (!n) continue;
        const h = (n / peak) * plotH;
        y -= h;
        const left = Math.max(PAD.left, x(p.t));
        const width = Math.max(1, Math.min(barW, W - PAD.right - left)); // the minute under way ends at `until`
        picture.append(svg("rect", { x: left.toFixed(1), y: y.toFixed(1), width: width.toFixed(1), height: h.toFixed(1),
          class: `bar series-${safe(v)}`, "data-testid": "chart-bar", "data-verdict": v, "data-count": n },
        svg("title", {}, `${clock(p.t)}: ${n} ${v}`)));
      }
    }
    const legend = el("ul", { class: "legend", "data-testid": "chart-legend" }, ...verdicts.map((v) => el("li", {},
      el("span", { class: `swatch series-${safe(v)}`, "aria-hidden": "true" }), `${v} ${totals[v]}`)));
    return el("figure", { class: "chart", "data-testid": "chart" }, picture,
      el("figcaption", {}, "Calls per minute by verdict", verdicts.length ? legend : el("span", { class: "none" }, ": none")));
  }

  function rank(v) {
    const i = ORDER.indexOf(v);
    return i < 0 ? ORDER.length : i;
  }

  return { chart };
})());
