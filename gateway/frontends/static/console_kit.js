// The console's kit: what its views share (loaded after common.js, before the views). A view registers itself
// with `register(id, {admin, render})`; console.js routes to it. Here: filter forms, cursor pagers, tables,
// verdict badges, rules with their file:line, latencies, JSON shown as text, and the confirmation dialog.
// Every piece of data is put on the page as text, never as HTML.
"use strict";
window.consoleKit = Object.freeze((() => {
  const ui = window.gatewayUi;
  const { el, $ } = ui;
  const views = new Map(); // view id -> {admin, render(ctx)}
  const SHORT = { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" };

  function register(id, view) {
    views.set(id, Object.freeze(view));
  }

  const text = (v) => (typeof v === "string" ? v : v === null || v === undefined ? "" : String(v));
  const principalId = (p) => (p && typeof p === "object" ? text(p.id) : text(p));
  const list = (v) => (Array.isArray(v) ? v : []);

  // The view's heading: focused when the route changes, so a keyboard user starts reading there.
  function title(...children) {
    return el("h1", { class: "page-title", id: "view-title", tabindex: "-1", "data-testid": "view-title" },
      ...children);
  }

  // A search form: `fields` [{name, label, type: "text"|"select"|"datetime-local", options: [[value, label]]}].
  // `values()` holds the non-empty ones; the form calls `submit` on Enter and on its button.
  function filters(fields, values, submit, extra) {
    const form = el("form", { class: "filters", role: "search", "data-testid": "filters" });
    const inputs = new Map();
    for (const f of fields) {
      const id = `f-${f.name}`;
      const input = f.type === "select"
        ? el("select", { id, name: f.name, "data-testid": `filter-${f.name}` },
          ...f.options.map(([value, label]) => el("option", { value, selected: values[f.name] === value }, label)))
        : el("input", { id, name: f.name, type: f.type || "text", "data-testid": `filter-${f.name}`,
          autocomplete: "off", spellcheck: "false", value: values[f.name] || "" });
      inputs.set(f.name, input);
      form.append(el("label", { for: id, hidden: f.hidden || null, "data-field": f.name }, f.label, input));
    }
    form.append(el("div", { class: "actions" },
      el("button", { type: "submit", class: "primary", "data-testid": "filter-apply" }, "Apply"), ...(extra || [])));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const now = {};
      for (const [name, input] of inputs) if (input.value.trim()) now[name] = input.value.trim();
      submit(now);
    });
    return { form, inputs };
  }

  // Cursor paging ("next" from each page): `state` {cursors: [cursor of each page shown so far]} is the view's, so
  // it survives a visit to another view; `load()` loads the page of the last cursor. `more`: there are more than
  // `total` matches (the API counts up to a bound).
  function pager(state, total, next, load, more) {
    const page = state.cursors.length;
    const newer = el("button", { type: "button", class: "plain", "data-testid": "page-newer", disabled: page <= 1 },
      "Newer");
    const older = el("button", { type: "button", class: "plain", "data-testid": "page-older", disabled: !next },
      "Older");
    newer.addEventListener("click", () => { state.cursors.pop(); load(); });
    older.addEventListener("click", () => { state.cursors.push(next); load(); });
    const of = !Number.isInteger(total) ? "" : more ? ` of more than ${total} matches`
      : ` of ${total === 1 ? "1 match" : `${total} matches`}`;
    return el("nav", { class: "pager", "aria-label": "Pages" }, newer,
      el("span", { class: "count", "data-testid": "page", "aria-live": "polite" }, `Page ${page}${of}`), older);
  }

  const cursor = (state) => state.cursors[state.cursors.length - 1];

  // A table; `columns` [[heading, cell(row) -> node or text]]. Wide tables scroll inside a focusable region.
  function table(label, columns, rows, testid) {
    return el("div", { class: "table-wrap", role: "region", "aria-label": label, tabindex: "0" },
      el("table", { "data-testid": testid },
        el("thead", {}, el("tr", {}, ...columns.map(([heading]) => el("th", { scope: "col" }, heading)))),
        el("tbody", {}, ...rows.map((row) => el("tr", { "data-testid": `${testid}-row` },
          ...columns.map(([, cell]) => el("td", {}, cell(row))))))));
  }

  function badge(value, testid) {
    const v = text(value);
    return el("span", { class: `state state-${v.replace(/[^a-z_-]/gi, "")}`, "data-testid": testid }, v || "—");
  }

  // "policy/rule (policies/main.yaml:12)", or "—" when no rule decided.
  function rule(id, source, testid) {
    if (!text(id)) return el("span", { class: "none", "data-testid": testid }, "—");
    const where = source && typeof source === "object" && text(source.file)
      ? ` (${text(source.file)}${Number.isInteger(source.line) ? `:${source.line}` : ""})` : "";
    return el("span", { "data-testid": testid }, el("code", {}, text(id)), el("span", { class: "sub" }, where));
  }

  const ms = (v) => (typeof v === "number" && Number.isFinite(v) ? `${v < 10 ? v.toFixed(1) : Math.round(v)} ms` : "—");

  // "decision 1.2 ms · approval — · upstream 3.0 ms · total 4.4 ms".
  function latency(l) {
    const v = l && typeof l === "object" ? l : {};
    return `decision ${ms(v.decision_ms)} · approval wait ${ms(v.approval_ms)} · upstream ${ms(v.upstream_ms)}`
      + ` · total ${ms(v.total_ms)}`;
  }

  const json = (value) => el("pre", { class: "json" }, JSON.stringify(value === undefined ? null : value, null, 2));

  // One line of JSON, cut at `max` characters.
  function preview(value, max = 120) {
    const line = JSON.stringify(value === undefined ? null : value);
    return line.length > max ? `${line.slice(0, max - 1)}…` : line;
  }

  function labels(values, testid) {
    const items = list(values).filter((v) => typeof v === "string");
    return items.length ? el("span", { class: "labels" }, ...items.map((l) => el("span", { class: "label",
      "data-testid": testid }, l))) : el("span", { class: "none" }, "none");
  }

  function tallies(values) {
    const entries = values && typeof values === "object" ? Object.entries(values) : [];
    return entries.length ? entries.map(([k, v]) => `${k} ${preview(v, 40)}`).join(" · ") : "—";
  }

  // The console's link to a run's timeline.
  function runLink(principal, run, label) {
    if (!text(run)) return el("span", { class: "none" }, "—");
    const href = `#/runs/${encodeURIComponent(principalId(principal))}/${encodeURIComponent(text(run))}`;
    return el("a", { href, "data-testid": "run-link" }, label || text(run));
  }

  function time(stamp) {
    const t = Date.parse(stamp);
    return el("time", { datetime: text(stamp), title: ui.when(stamp) },
      Number.isNaN(t) ? text(stamp) || "—" : new Date(t).toLocaleString([], SHORT));
  }

  // Asks before a change ("End run…"); resolves to null (cancelled) or {message} (what the optional field holds).
  function confirm(heading, body, action, withMessage) {
    const dialog = $("confirm");
    $("confirm-title").textContent = heading;
    $("confirm-text").textContent = body;
    $("confirm-ok").textContent = action;
    $("confirm-message").value = "";
    $("confirm-message").hidden = $("confirm-message-label").hidden = !withMessage;
    return new Promise((resolve) => {
      const done = (ok) => {
        $("confirm-form").onsubmit = $("confirm-cancel").onclick = dialog.onclose = null;
        if (dialog.open) dialog.close();
        resolve(ok ? { message: $("confirm-message").value.trim() } : null);
      };
      $("confirm-form").onsubmit = (event) => { event.preventDefault(); done(true); };
      $("confirm-cancel").onclick = () => done(false);
      dialog.onclose = () => done(false); // Escape
      dialog.showModal();
      (withMessage ? $("confirm-message") : $("confirm-cancel")).focus();
    });
  }

  // What a failed API call says, for the view's banner.
  function failure(what, result) {
    return `${what}: ${result.error && result.error.message ? result.error.message : "the request failed."}`;
  }

  return { views, register, text, principalId, list, title, filters, pager, cursor, table, badge, rule, ms,
    latency, json, preview, labels, tallies, runLink, time, confirm, failure };
})());
