// The console's policies: the loaded revision, each file's rules with their hits in the last hour and day
// (filtered by rule id, action or stage), the rules that never fired, and the last reloads (applied, or refused
// with the error and its file:line). Every piece of data is put on the page as text, never as HTML.
"use strict";
(() => {
  const ui = window.gatewayUi;
  const kit = window.consoleKit;
  const { el } = ui;
  const state = { filters: {} };

  kit.register("policies", { admin: true, async render(ctx) {
    ctx.status("Loading policies…");
    const result = await ctx.api("GET", "/v1/admin/policies");
    ctx.status("");
    const { form } = kit.filters([{ name: "q", label: "Rule, action or stage" }], state.filters, (values) => {
      state.filters = values;
      ctx.reload();
    });
    if (!result.ok) {
      ctx.show(kit.title("Policies"), form);
      ctx.banner(kit.failure("Could not load the policies", result));
      return;
    }
    const data = result.data && typeof result.data === "object" ? result.data : {};
    const q = (state.filters.q || "").toLowerCase();
    const wanted = (r) => !q || [r.id, r.action, r.stage].some((v) => kit.text(v).toLowerCase().includes(q));
    const files = kit.list(data.files).filter((f) => f && typeof f === "object");
    const shown = files.map((f) => ({ ...f, rules: kit.list(f.rules).filter((r) => r && typeof r === "object" && wanted(r)) }))
      .filter((f) => !q || f.rules.length);
    const never = kit.list(data.never_fired).filter((r) => typeof r === "string");
    ctx.show(kit.title("Policies"),
      el("dl", { class: "meta", "data-testid": "policy-summary" },
        el("dt", {}, "Revision"), el("dd", { class: "mono", "data-testid": "policy-revision" }, kit.text(data.revision) || "—"),
        el("dt", {}, "CEL engine"), el("dd", { "data-testid": "policy-engine" }, kit.text(data.engine) || "—"),
        el("dt", {}, "Files"), el("dd", {}, `${files.length}`)),
      form,
      ...shown.map(file),
      q && !shown.length ? el("p", { class: "empty", "data-testid": "empty" }, "No rule matches.") : null,
      el("h2", { class: "section" }, `Rules that never fired (${never.length})`),
      never.length ? el("ul", { class: "never", "data-testid": "never-fired" }, ...never.map((r) => el("li", {},
        el("code", {}, r)))) : el("p", { class: "none", "data-testid": "never-fired" }, "Every rule has fired."),
      el("h2", { class: "section" }, "Last reloads"),
      reloads(kit.list(data.reloads).filter((r) => r && typeof r === "object")));
  } });

  function file(f) {
    return el("section", { class: "policy-file", "data-testid": "policy-file" },
      el("h2", { class: "section mono", "data-testid": "policy-file-path" }, kit.text(f.path)),
      kit.table(`Rules of ${kit.text(f.path)}`, [
        ["Rule", (r) => el("code", { "data-testid": "rule-id" }, kit.text(r.id))],
        ["Line", (r) => kit.text(r.line)],
        ["Action", (r) => kit.text(r.action)],
        ["Stage", (r) => kit.text(r.stage)],
        ["Hits, last hour", (r) => el("span", { "data-testid": "rule-hits-hour" }, kit.text(r.hits_hour ?? 0))],
        ["Hits, last day", (r) => el("span", { "data-testid": "rule-hits-day" }, kit.text(r.hits_day ?? 0))],
      ], f.rules, "rules"));
  }

  function reloads(list) {
    if (!list.length) return el("p", { class: "none", "data-testid": "reloads" }, "No reloads since the gateway started.");
    return kit.table("Last reloads", [
      ["Time", (r) => kit.time(r.time)],
      ["Result", (r) => kit.badge(r.result, "reload-result")],
      ["Revision", (r) => el("code", {}, kit.text(r.revision) || "—")],
      ["Error", (r) => el("span", { "data-testid": "reload-error" }, kit.text(r.error) || "—")],
      ["Where", (r) => (kit.text(r.file) ? `${kit.text(r.file)}${Number.isInteger(r.line) ? `:${r.line}` : ""}` : "—")],
    ], list, "reloads");
  }
})();
