// The console's upstreams and tools: each upstream up or down with its last error, its tools (filtered by name)
// with their schema and annotations behind a disclosure each, and what drifted from the tools lock.
// Every piece of data (descriptions, schemas and errors come from upstreams) is put on the page as text.
"use strict";
(() => {
  const ui = window.gatewayUi;
  const kit = window.consoleKit;
  const { el } = ui;
  const state = { filters: {} };

  kit.register("upstreams", { admin: true, async render(ctx) {
    ctx.status("Loading upstreams…");
    const result = await ctx.api("GET", "/v1/admin/upstreams");
    ctx.status("");
    const { form } = kit.filters([{ name: "q", label: "Tool" }, { name: "drift", label: "Show", type: "select",
      options: [["", "every tool"], ["drifted", "drifted tools"]] }], state.filters, (values) => {
      state.filters = values;
      ctx.reload();
    });
    if (!result.ok) {
      ctx.show(kit.title("Upstreams and tools"), form);
      ctx.banner(kit.failure("Could not load the upstreams", result));
      return;
    }
    const data = result.data && typeof result.data === "object" ? result.data : {};
    const upstreams = kit.list(data.upstreams).filter((u) => u && typeof u === "object");
    ctx.show(kit.title("Upstreams and tools"), lock(data.tools_lock), form, ...upstreams.map(upstream),
      upstreams.length ? null : el("p", { class: "empty", "data-testid": "empty" }, "No upstreams are configured."));
  } });

  function lock(l) {
    if (!l || typeof l !== "object") {
      return el("p", { class: "sub", "data-testid": "tools-lock" }, "No tools lock: tool definitions are not pinned.");
    }
    const drifted = kit.list(l.drifted);
    return el("dl", { class: "meta", "data-testid": "tools-lock" },
      el("dt", {}, "Tools lock"), el("dd", { class: "mono" }, kit.text(l.file) || "—"),
      el("dt", {}, "On drift"), el("dd", {}, kit.text(l.on_drift) || "—"),
      el("dt", {}, "Pinned"), el("dd", {}, kit.text(l.pinned ?? "—")),
      el("dt", {}, "Drifted"), el("dd", { "data-testid": "lock-drifted" },
        drifted.length ? drifted.map((d) => (typeof d === "string" ? d : kit.preview(d, 80))).join(", ") : "nothing"));
  }

  function upstream(u) {
    const q = (state.filters.q || "").toLowerCase();
    const tools = kit.list(u.tools).filter((t) => t && typeof t === "object"
      && (!q || kit.text(t.name).toLowerCase().includes(q)) && (state.filters.drift !== "drifted" || t.drift));
    const error = kit.text(u.last_error);
    return el("section", { class: "upstream", "data-testid": "upstream", "data-upstream": kit.text(u.name) },
      el("div", { class: "upstream-head" },
        el("h2", { class: "section mono", "data-testid": "upstream-name" }, kit.text(u.name)),
        kit.badge(u.state, "upstream-state"),
        u.since ? el("span", { class: "sub" }, "since ", kit.time(u.since)) : null),
      error ? el("p", { class: "error", "data-testid": "upstream-error" }, "Last error: ", error) : null,
      tools.length ? el("ul", { class: "tools" }, ...tools.map(tool))
        : el("p", { class: "none" }, q || state.filters.drift ? "No tool matches." : "No tools."));
  }

  function tool(t) {
    const changed = t.drift && typeof t.drift === "object" ? kit.list(t.drift.changed) : [];
    const annotations = t.annotations && typeof t.annotations === "object" ? Object.entries(t.annotations) : [];
    return el("li", { class: "tool", "data-testid": "tool", "data-tool": kit.text(t.name) }, el("details", {},
      el("summary", { "data-testid": "tool-summary" }, el("code", {}, kit.text(t.name)),
        kit.text(t.title) ? ` — ${kit.text(t.title)}` : null,
        t.pinned ? el("span", { class: "state state-allow" }, "pinned") : null,
        t.drift ? el("span", { class: "state state-reject", "data-testid": "tool-drift" }, "drifted") : null),
      kit.text(t.description) ? el("p", { class: "description", "data-testid": "tool-description" },
        kit.text(t.description)) : null,
      changed.length ? el("p", { class: "error", "data-testid": "tool-drift-changed" }, "Changed since the lock: ",
        changed.map((c) => (typeof c === "string" ? c : kit.preview(c, 80))).join(", ")) : null,
      el("h3", {}, "Annotations"),
      annotations.length ? el("dl", { class: "meta", "data-testid": "tool-annotations" }, ...annotations.flatMap(([k, v]) => [
        el("dt", {}, k), el("dd", { class: "mono" }, kit.preview(v, 200))])) : el("p", { class: "none" }, "none"),
      el("h3", {}, "Input schema"),
      el("div", { "data-testid": "tool-schema" }, kit.json(t.input_schema ?? null))));
  }
})();
