// The approvals page, part three: what a card shows of one request (who asks, why, the arguments as asked for
// and as they will run, the votes), with a link to its run's timeline in the console. Loaded after common.js and
// approvals_run.js (the held call's run so far) and approvals_edit.js (an approver's edit of the arguments), before
// approvals.js, which builds the cards and calls this.
// Every piece of data is put on the page as text, never as HTML.
"use strict";
window.approvalsCard = Object.freeze((() => {
  const ui = window.gatewayUi;
  const { el, prefix, when } = ui;
  const run = window.approvalsRun;

  function details(a) {
    const link = el("a", { href: `${prefix}/approvals/${encodeURIComponent(a.id)}`, class: "permalink",
      title: "Link to this request" }, "#", a.id);
    // Approved, then refused by its policies when it was released (a cap filled while it waited): it did not run.
    const refused = a.execution && a.execution.state === "refused_at_release";
    const head = el("header", { class: "card-head" },
      el("h2", { class: "tool", "data-testid": "tool" }, a.tool),
      el("span", { class: `state state-${refused ? "refused" : a.state}`, "data-testid": "state" },
        refused ? "refused at release" : a.state),
      el("span", { class: "countdown", "data-testid": "countdown", "data-expires": a.expires_at }));
    const groups = a.principal.groups.length ? ` (${a.principal.groups.join(", ")})` : "";
    const meta = el("dl", { class: "meta" },
      el("dt", {}, "Asked by"), el("dd", { "data-testid": "principal" }, a.principal.id, groups),
      el("dt", {}, "When"), el("dd", { title: a.created_at }, when(a.created_at)),
      el("dt", {}, "Call"), el("dd", { class: "mono" }, a.call_id, " · session ", a.session || "—"),
      a.session ? el("dt", {}, "Run") : null, a.session ? el("dd", {}, timeline(a)) : null,
      // Whose tool: an approval releases only this upstream's tool of that name ("client": the agent runs it).
      el("dt", {}, "Tool of"), el("dd", { "data-testid": "upstream" }, upstreamLabel(a.upstream)),
      el("dt", {}, "If nobody decides"), el("dd", {}, a.on_timeout === "allow" ? "it runs" : "it is refused"),
      // What became of the call itself: an approval only runs when the agent calls again (within valid_until).
      el("dt", {}, "The call"), el("dd", { class: `execution execution-${a.execution ? a.execution.state : ""}`,
        "data-testid": "execution" }, a.execution ? a.execution.label : "—",
        refused && a.execution.rule ? el("span", { class: "sub", "data-testid": "execution-rule" },
          ` (rule ${a.execution.rule})`) : null),
      el("dt", {}, "Request"), el("dd", {}, link));
    const nodes = [head, meta, el("h3", {}, "Why"), requirements(a.requirements),
      ...run.section(el, a.run, ui.now()), el("h3", {}, "Arguments"), args(a),
      ...window.approvalsEdit.section(el, a.edit)];
    if (a.votes.length) nodes.push(el("h3", {}, "Decisions"), votes(a.votes));
    return nodes;
  }

  function upstreamLabel(upstream) {
    if (upstream === "client") return "the agent itself (a tool it runs, through the model proxy)";
    return upstream ? `upstream ${upstream}` : "— (asked before upstreams were recorded)";
  }

  function approversLabel(r) {
    if (!r.approvers.length) return "any approver";
    return r.approvers.map((a) => (a === "self" ? "the requester, through their own client" : a)).join(", ");
  }

  function requirements(list) {
    return el("ul", { class: "requirements" }, ...list.map((r) => el("li", {
      class: r.satisfied_by ? "met" : "open", "data-testid": "requirement" },
    el("span", { class: "mark", "aria-hidden": "true" }, r.satisfied_by ? "✓" : "○"),
    el("div", {},
      el("div", { class: "message", "data-testid": "message" }, r.message || "(no message)"),
      el("div", { class: "sub" },
        el("code", {}, r.rule), " · approvers: ", el("span", { "data-testid": "approvers" }, approversLabel(r)),
        r.satisfied_by ? ` · approved by ${r.satisfied_by}` : " · waiting")))));
  }

  function args(a) {
    const keys = [...new Set([...Object.keys(a.original_args), ...Object.keys(a.final_args)])].sort();
    const rewritten = keys.some((k) => canon(a.original_args[k]) !== canon(a.final_args[k]));
    const table = el("div", { class: rewritten ? "args rewritten" : "args", "data-testid": "args", role: "table" });
    table.append(el("div", { class: "row head", role: "row" }, el("div", { role: "columnheader" }, "argument"),
      ...(rewritten ? [el("div", { role: "columnheader" }, "asked for"), el("div", { role: "columnheader" }, "will run with")]
        : [el("div", { role: "columnheader" }, "value")])));
    if (!keys.length) table.append(el("div", { class: "row" }, el("div", { class: "none" }, "(no arguments)")));
    for (const k of keys) {
      const changed = canon(a.original_args[k]) !== canon(a.final_args[k]);
      const row = el("div", { class: changed ? "row changed" : "row", role: "row",
        "data-testid": changed ? "arg-changed" : "arg", "data-key": k },
      el("div", { class: "key", role: "cell" }, k, changed ? el("span", { class: "tag" }, "rewritten") : null));
      if (changed) {
        row.append(value(a.original_args, k, "asked for", "original"), value(a.final_args, k, "will run with", "final"));
      } else {
        row.append(value(a.final_args, k, rewritten ? "unchanged" : "value", "final"));
      }
      table.append(row);
    }
    return table;
  }

  function value(obj, k, label, which) {
    const present = Object.prototype.hasOwnProperty.call(obj, k);
    return el("div", { class: present ? "value" : "value absent", role: "cell", "data-label": label,
      "data-testid": `arg-${which}` }, el("pre", {}, present ? JSON.stringify(obj[k], null, 2) : which === "original" ? "(not set)" : "(removed)"));
  }

  function votes(list) {
    return el("ul", { class: "votes" }, ...list.map((v) => el("li", {},
      el("strong", {}, v.approver), v.approve ? " approved" : " denied", ` · ${when(v.at)}`,
      v.comment ? el("q", {}, v.comment) : null)));
  }

  // Canonical JSON (sorted keys), to tell whether a rewrite changed a value.
  function canon(v) {
    if (v === undefined) return "undefined";
    if (v === null || typeof v !== "object") return JSON.stringify(v);
    if (Array.isArray(v)) return `[${v.map(canon).join(",")}]`;
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canon(v[k])}`).join(",")}}`;
  }

  // The console's timeline of the run the call belongs to: an approver may read it by naming this request.
  function timeline(a) {
    const where = `${encodeURIComponent(principalKey(a.principal))}/${encodeURIComponent(a.session)}`;
    return el("a", { href: `${prefix}/console#/runs/${where}?approval=${encodeURIComponent(a.id)}`,
      "data-testid": "run-link" }, "its timeline");
  }

  // What the gateway binds a caller's runs to (gateway/policy/call.py, Principal.key): an API key's id, or a
  // token's issuer and subject, each percent-encoded whole as Python's quote(safe="") does.
  function principalKey(p) {
    const quote = (s) => encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
    return p.kind === "jwt" ? `jwt:${quote(p.issuer || "")}:${quote(p.subject || "")}` : p.id;
  }

  return { details };
})());
