// The console's runs: the list (filtered by principal and state, paged) and a run's timeline, every call in
// order with its verdict, deciding rule (file:line), latencies, arguments and approval. An admin may reset or
// end the run from its timeline. Every piece of data is put on the page as text, never as HTML.
"use strict";
(() => {
  const ui = window.gatewayUi;
  const kit = window.consoleKit;
  const { el } = ui;
  const PAGE = 50;
  const list = { filters: {}, cursors: [null] }; // kept while the tab is open, across visits to other views

  kit.register("runs", { admin: true, async render(ctx) {
    const params = new URLSearchParams({ ...list.filters, limit: String(PAGE) });
    if (kit.cursor(list)) params.set("cursor", kit.cursor(list));
    ctx.status("Loading runs…");
    const result = await ctx.api("GET", `/v1/admin/runs?${params}`);
    const form = kit.filters([
      { name: "principal", label: "Principal" },
      { name: "terminated", label: "State", type: "select", options: [["", "any"], ["false", "active"], ["true", "ended"]] },
    ], list.filters, (values) => {
      list.filters = values;
      list.cursors = [null];
      ctx.reload();
    });
    ctx.status("");
    if (!result.ok) {
      ctx.show(kit.title("Runs"), form.form);
      ctx.banner(kit.failure("Could not load the runs", result));
      return;
    }
    const runs = kit.list(result.data && result.data.runs);
    ctx.show(kit.title("Runs"), form.form,
      runs.length ? kit.table("Runs", [
        ["Principal", (r) => kit.principalId(r.principal)],
        ["Run", (r) => kit.runLink(r.principal, r.run)],
        ["Client", (r) => kit.text(r.client) || "—"],
        ["Started", (r) => kit.time(r.started)],
        ["Calls", (r) => kit.text(r.calls)],
        ["Rejected", (r) => kit.text(r.rejected)],
        ["Labels", (r) => kit.labels(r.labels, "run-label")],
        ["Tallies", (r) => kit.tallies(r.tallies)],
        ["State", (r) => kit.badge(r.terminated ? "terminated" : "active", "run-state")],
      ], runs, "runs") : el("p", { class: "empty", "data-testid": "empty" }, "No runs match these filters."),
      kit.pager(list, result.data.total, result.data.next, ctx.reload));
  } });

  // -- a run's timeline ------------------------------------------------------------------------------

  kit.register("timeline", { admin: false, async render(ctx) {
    const { principal, run, approval } = ctx.params;
    const path = `/v1/admin/runs/${encodeURIComponent(principal)}/${encodeURIComponent(run)}`;
    ctx.status("Loading the run…");
    // An approver reads the run of a request they may decide by naming the request (the approvals page's link).
    const result = await ctx.api("GET", approval ? `${path}?approval=${encodeURIComponent(approval)}` : path);
    ctx.status("");
    const heading = kit.title("Run ", el("code", {}, run));
    if (!result.ok) {
      const why = result.status === 404 ? "There is no such run, or not one this key may see (an approver sees the"
        + " run of a request it may decide, from that request's link on the approvals page)."
        : kit.failure("Could not load the run", result);
      ctx.show(heading, el("p", { class: "error", "data-testid": "run-error" }, why));
      return;
    }
    const state = result.data.run && typeof result.data.run === "object" ? result.data.run : {};
    const calls = kit.list(result.data.timeline).filter((d) => d && typeof d === "object");
    // A run the store no longer holds (an implicit run that ended long ago) still shows the calls it made.
    ctx.show(heading, state.gone ? el("p", { class: "sub", "data-testid": "run-gone" }, "The store no longer holds"
      + " this run, so it has no counters to reset or end; the decision log still has its calls.")
      : summary(principal, state), ctx.who.admin && !state.gone ? actions(ctx, path, state) : null,
      el("h2", { class: "section" }, `Calls, oldest first (${calls.length})`),
      calls.length ? el("ol", { class: "timeline", "data-testid": "timeline" }, ...calls.map(call))
        : el("p", { class: "empty", "data-testid": "empty" }, "No calls in this run yet."));
  } });

  function summary(principal, r) {
    const row = (label, value, testid) => [el("dt", {}, label), el("dd", { "data-testid": testid }, value)];
    return el("dl", { class: "meta", "data-testid": "run-summary" },
      ...row("Principal", principal, "run-principal"),
      ...row("Client", kit.text(r.client) || "—", "run-client"),
      ...row("Started", kit.time(r.started), "run-started"),
      ...(r.last ? row("Last call", kit.time(r.last), "run-last") : []),
      ...row("Calls", `${kit.text(r.calls) || 0}, ${kit.text(r.rejected) || 0} rejected`, "run-calls"),
      ...row("Labels", kit.labels(r.labels, "run-label"), "run-labels"),
      ...row("Tallies", kit.tallies(r.tallies), "run-tallies"),
      ...row("State", el("span", {}, kit.badge(r.terminated ? "terminated" : "active", "run-state"),
        kit.text(r.terminate_message) ? el("span", { class: "sub" }, ` ${kit.text(r.terminate_message)}`) : null),
      "run-terminated"));
  }

  // Reset and end, each asked once more in a dialog; the session admin API records who did it.
  function actions(ctx, path, r) {
    const reset = el("button", { type: "button", class: "plain", "data-testid": "run-reset" }, "Reset run…");
    const end = el("button", { type: "button", class: "danger", "data-testid": "run-end", disabled: Boolean(r.terminated) },
      "End run…");
    const sessions = path.replace("/v1/admin/runs/", "/v1/admin/sessions/");
    reset.addEventListener("click", async () => {
      const ok = await kit.confirm("Reset this run?", "Its counters go to zero and its labels, tallies and history"
        + " are cleared; it is no longer ended. The principal's usage windows keep their tallies.", "Reset run", false);
      if (ok) await change(ctx, `${sessions}/reset`, {}, "The run was reset.", reset);
    });
    end.addEventListener("click", async () => {
      const ok = await kit.confirm("End this run?", "Its next call is refused with your message; an implicit run"
        + " also stops being its client's current run.", "End run", true);
      if (ok) await change(ctx, `${sessions}/end`, ok.message ? { message: ok.message } : {}, "The run was ended.", end);
    });
    return el("div", { class: "buttons run-actions" }, reset, end);
  }

  async function change(ctx, path, body, done, button) {
    button.disabled = true;
    const result = await ctx.api("POST", path, body);
    button.disabled = false;
    if (!result.ok) {
      ctx.banner(kit.failure("Not changed", result));
      button.focus();
      return;
    }
    await ctx.reload(done);
  }

  // "approved by bob", "denied", "waiting for a decision".
  function decided(a) {
    const state = a.pending ? "waiting for a decision" : a.approved === true ? "approved"
      : a.approved === false ? "denied" : "decided";
    const by = Array.isArray(a.decided_by) ? a.decided_by.map(kit.text).join(", ") : kit.text(a.decided_by);
    return by && !a.pending ? `${state} by ${by}` : state;
  }

  // One call: what, the verdict and the rule that decided it, where the time went, and what it was called with.
  function call(d, index) {
    const args = d.arguments;
    const original = d.original_arguments;
    const rewritten = original !== null && original !== undefined && kit.preview(original, 1e9) !== kit.preview(args, 1e9);
    const approval = d.approval && typeof d.approval === "object" ? d.approval : null;
    const message = kit.text(d.message);
    return el("li", { class: "call", "data-testid": "timeline-call", "data-call-id": kit.text(d.call_id) },
      el("div", { class: "call-head" },
        el("span", { class: "seq" }, `${index + 1}.`), kit.time(d.time),
        el("code", { class: "tool", "data-testid": "call-tool" }, kit.text(d.tool) || "—"),
        kit.badge(d.verdict, "call-verdict"),
        d.is_error ? el("span", { class: "state state-reject", "data-testid": "call-error" }, "error") : null,
        el("span", { class: "sub" }, "rule "), kit.rule(d.rule, d.rule_source, "call-rule")),
      el("p", { class: "sub latency", "data-testid": "call-latency" }, kit.latency(d.latency)),
      message ? el("p", { class: "message", "data-testid": "call-message" }, message) : null,
      approval ? el("p", { class: "approval", "data-testid": "call-approval" }, "Approval ",
        el("code", {}, kit.text(approval.id)), ` · ${decided(approval)}`) : null,
      d.edited_by ? el("p", { class: "approval", "data-testid": "call-edited" },
        `Arguments edited by ${kit.text(d.edited_by)} before it ran`) : null,
      el("details", { class: "args" },
        el("summary", { "data-testid": "call-args" }, rewritten ? "Arguments (rewritten) " : "Arguments ",
          el("code", { class: "preview" }, kit.preview(args))),
        kit.json(args),
        rewritten ? el("p", { class: "sub" }, "As the agent sent them:") : null,
        rewritten ? kit.json(original) : null));
  }
})();
