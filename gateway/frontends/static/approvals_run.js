// The approvals page, part two: what a held call's run has done so far (its labels and latest calls), and
// how long ago a time was. Loaded before approvals.js, which builds the cards and calls these.
// Everything the run carries (labels, tool names, rules) is put on the page as text, never as HTML.
"use strict";
window.approvalsRun = Object.freeze((() => {
  // "12s ago", "2 min ago", "3 h ago": `now` is the server's time in ms (the page corrects the local clock).
  function ago(stamp, now) {
    const t = Date.parse(stamp);
    if (Number.isNaN(t)) return "";
    const s = Math.max(0, Math.round((now - t) / 1000));
    return s < 60 ? `${s}s ago` : s < 3600 ? `${Math.floor(s / 60)} min ago` : `${Math.floor(s / 3600)} h ago`;
  }

  const text = (v) => (typeof v === "string" ? v : "");
  const strings = (v) => (Array.isArray(v) ? v.filter((x) => typeof x === "string") : []);

  // One past call: "mail_read — allow — 2 min ago", then the rule that decided it and the labels it added.
  function step(el, entry, now) {
    const rule = text(entry.rule);
    const added = strings(entry.labels);
    return el("li", { class: `step verdict-${text(entry.verdict)}`, "data-testid": "run-step", title: text(entry.time) },
      el("span", { class: "line", "data-testid": "run-step-line" },
        `${text(entry.tool)} — ${text(entry.verdict)} — ${ago(entry.time, now)}`),
      rule ? el("span", { class: "sub" }, " · rule ", el("code", {}, rule)) : null,
      added.length ? el("span", { class: "sub" }, " · added ", labels(el, added, "run-step-label")) : null);
  }

  function labels(el, list, testid) {
    return el("span", { class: "labels" }, ...list.map((label) => el("span", { class: "label", "data-testid": testid },
      label)));
  }

  // The section of a card for `run` ({labels, calls, history}, from the API), or [] when the API gave none.
  // `el` is the page's text-only element builder.
  function section(el, run, now) {
    if (!run || typeof run !== "object") return [];
    const list = strings(run.labels);
    const history = Array.isArray(run.history) ? run.history.filter((e) => e && typeof e === "object") : [];
    const calls = Number.isInteger(run.calls) ? run.calls : history.length;
    const latest = calls > history.length ? ` (its latest ${history.length} of ${calls} calls)` : "";
    return [
      el("h3", { "data-testid": "run-title" }, "This run so far", latest),
      el("p", { class: "run-labels", "data-testid": "run-labels" }, "Labels: ",
        list.length ? labels(el, list, "run-label") : "none"),
      history.length
        ? el("ol", { class: "run-history", "data-testid": "run-history" }, ...history.map((e) => step(el, e, now)))
        : el("p", { class: "none", "data-testid": "run-history" }, "No earlier calls in this run."),
    ];
  }

  return { ago, section };
})());
