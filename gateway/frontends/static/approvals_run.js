// The approvals page, part two: what a held call's run has done so far (its labels and latest calls). Loaded
// after common.js ("2 min ago") and before approvals.js, which builds the cards and calls this.
// Everything the run carries (labels, tool names, rules) is put on the page as text, never as HTML.
"use strict";
window.approvalsRun = Object.freeze((() => {
  const { ago } = window.gatewayUi;
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

  return { section };
})());
