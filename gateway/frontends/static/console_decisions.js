// The console's decisions: the decision log searched by time range, tool, principal, verdict, rule, run and
// upstream; a chart of calls per minute by verdict (console_chart.js); pages of 50, newest first; and the
// selection exported as JSON lines. Every piece of data is put on the page as text, never as HTML.
"use strict";
(() => {
  const ui = window.gatewayUi;
  const kit = window.consoleKit;
  const { el } = ui;
  const PAGE = 50;
  const RANGES = [["15m", "last 15 minutes", 15], ["1h", "last hour", 60], ["24h", "last 24 hours", 1440],
    ["7d", "last 7 days", 10080], ["custom", "from … to …", 0]];
  // The verdicts a call.outcome event records most often (gateway/pipeline/results.py has them all).
  const VERDICTS = ["allow", "reject", "pending", "approve", "skip", "terminate", "tool_failed", "tool_unavailable",
    "unknown_tool", "invalid_arguments", "rate_limited"];
  const FILTERS = ["tool", "principal", "verdict", "rule", "run", "upstream"]; // the API's names
  // Kept while the tab is open; `window`: the range as instants, fixed when the filters are applied.
  const state = { filters: { range: "1h" }, window: null, cursors: [null] };

  // The range as instants (ms); a custom range reads the two datetime-local fields (local time).
  function resolve(filters) {
    const range = RANGES.find(([id]) => id === filters.range) || RANGES[1];
    if (range[0] !== "custom") {
      const until = ui.now();
      return { since: until - range[2] * 60000, until };
    }
    const since = Date.parse(filters.since || "");
    const until = Date.parse(filters.until || "");
    return { since: Number.isNaN(since) ? null : since, until: Number.isNaN(until) ? null : until };
  }

  function query(extra) {
    const params = new URLSearchParams();
    if (state.window.since !== null) params.set("since", new Date(state.window.since).toISOString());
    if (state.window.until !== null) params.set("until", new Date(state.window.until).toISOString());
    for (const name of FILTERS) if (state.filters[name]) params.set(name, state.filters[name]);
    for (const [name, value] of Object.entries(extra || {})) if (value) params.set(name, value);
    return params;
  }

  // "2026-12-03T07:01" in local time, for a datetime-local field.
  function local(ms) {
    if (ms === null) return "";
    const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60000);
    return d.toISOString().slice(0, 16);
  }

  kit.register("decisions", { admin: true, async render(ctx) {
    if (!state.window) state.window = resolve(state.filters);
    ctx.status("Loading decisions…");
    const [page, minutes] = await Promise.all([
      ctx.api("GET", `/v1/admin/decisions?${query({ limit: String(PAGE), cursor: kit.cursor(state) })}`),
      ctx.api("GET", `/v1/admin/decisions/chart?${query()}`),
    ]);
    ctx.status("");
    const form = filterForm(ctx);
    if (!page.ok) {
      ctx.show(kit.title("Decisions"), form);
      ctx.banner(kit.failure("Could not search the decisions", page));
      return;
    }
    const found = kit.list(page.data && page.data.decisions).filter((d) => d && typeof d === "object");
    ctx.show(kit.title("Decisions"), form,
      minutes.ok ? window.consoleChart.chart(kit.list(minutes.data && minutes.data.minutes), state.window.since,
        state.window.until) : el("p", { class: "error" }, kit.failure("No chart", minutes)),
      found.length ? kit.table("Decisions", [
        ["Time", (d) => kit.time(d.time)],
        ["Principal", (d) => kit.principalId(d.principal)],
        ["Run", (d) => kit.runLink(d.principal, d.run)],
        ["Tool", (d) => el("code", { "data-testid": "decision-tool" }, kit.text(d.tool) || "—")],
        ["Upstream", (d) => kit.text(d.upstream) || "—"],
        ["Verdict", (d) => kit.badge(d.verdict, "decision-verdict")],
        ["Rule", (d) => kit.rule(d.rule, d.rule_source, "decision-rule")],
        ["Total", (d) => el("span", { class: "nowrap" }, kit.ms(d.latency && d.latency.total_ms))],
        ["Arguments and message", (d) => el("span", { class: "preview" }, el("code", {}, kit.preview(d.arguments, 80)),
          kit.text(d.message) ? el("span", { class: "sub message", "data-testid": "decision-message" },
            ` ${kit.text(d.message)}`) : null)],
      ], found, "decisions") : el("p", { class: "empty", "data-testid": "empty" }, "No decisions match these filters."),
      kit.pager(state, page.data.total, page.data.next, ctx.reload, page.data.total_more === true));
  } });

  function filterForm(ctx) {
    const exporter = el("button", { type: "button", class: "plain", "data-testid": "export" }, "Export JSON lines");
    const values = { ...state.filters, since: local(state.window.since), until: local(state.window.until) };
    const { form, inputs } = kit.filters([
      { name: "range", label: "Time", type: "select", options: RANGES.map(([id, label]) => [id, label]) },
      { name: "since", label: "From", type: "datetime-local", hidden: state.filters.range !== "custom" },
      { name: "until", label: "To", type: "datetime-local", hidden: state.filters.range !== "custom" },
      { name: "tool", label: "Tool" },
      { name: "principal", label: "Principal" },
      { name: "verdict", label: "Verdict", type: "select", options: [["", "any"], ...VERDICTS.map((v) => [v, v])] },
      { name: "rule", label: "Rule" },
      { name: "run", label: "Run" },
      { name: "upstream", label: "Upstream" },
    ], values, (chosen) => {
      state.filters = chosen;
      state.window = resolve(chosen);
      state.cursors = [null];
      ctx.reload();
    }, [exporter]);
    inputs.get("range").addEventListener("change", () => {
      const custom = inputs.get("range").value === "custom";
      for (const name of ["since", "until"]) form.querySelector(`[data-field="${name}"]`).hidden = !custom;
    });
    exporter.addEventListener("click", () => exportLines(ctx, exporter));
    return form;
  }

  // The selection as JSON lines, fetched with the key (a plain link could not send it) and saved as a file.
  async function exportLines(ctx, button) {
    button.disabled = true;
    const result = await ctx.api("GET", `/v1/admin/decisions/export?${query()}`, undefined, true);
    button.disabled = false;
    if (!result.ok) {
      ctx.banner(kit.failure("Could not export", result));
      return;
    }
    const blob = await result.response.blob();
    const url = URL.createObjectURL(new Blob([blob], { type: "application/x-ndjson" }));
    const stamp = new Date(state.window.since ?? ui.now()).toISOString().slice(0, 16).replace(/:/g, "");
    const link = el("a", { href: url, download: `decisions-${stamp}.jsonl`, hidden: true });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
    ctx.notice("Exported the selection as JSON lines.");
  }
})();
