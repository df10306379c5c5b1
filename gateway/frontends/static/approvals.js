// The approvals page: lists the requests this approver may decide (filtered, paged through the
// approver API, which filters on the server) and posts decisions.
// Every piece of data is put on the page as text (textContent / text nodes), never as HTML.
"use strict";
(() => {
  const REFRESH_MS = 2000;
  const SHOWN_STEP = 100; // requests added by "Show more"
  const API_PAGE = 500; // the API's largest page (MAX_APPROVALS_PAGE)
  const KEY_STORAGE = "gateway.approverKey";
  // The API's codes for an edit it refused (the message says why: the rule, the argument, ...).
  const EDIT_ERRORS = new Set(["edit-refused", "invalid-edit", "edit-not-possible"]);

  // "/prefix/approvals" or "/prefix/approvals/ID": the API lives at "/prefix/v1/approvals".
  const path = location.pathname.match(/^(.*?)\/approvals(?:\/([^/]+))?\/?$/);
  const prefix = path ? path[1] : "";
  const focusId = path && path[2] ? decodeURIComponent(path[2]) : null;

  const $ = (id) => document.getElementById(id);
  const run = window.approvalsRun; // approvals_run.js: the held call's run, and "2 min ago"
  const edits = window.approvalsEdit; // approvals_edit.js: editing the arguments before approving
  const cards = new Map(); // approval id -> {root, details, form, data, fingerprint}
  let key = sessionStorage.getItem(KEY_STORAGE);
  let mode = null; // "key" (a pasted API key) or "sso" (the gateway's session cookie, from the IdP's sign-in)
  let csrf = null; // the session's CSRF token, sent with every request in "sso" mode
  let timer = null;
  let serverOffset = 0; // ms to add to the local clock to get the server's (from the Date header)
  let scrolled = false;
  let wanted = SHOWN_STEP; // how many matching requests to show

  // -- small DOM helpers (text only) -------------------------------------------------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined && value !== false) node.setAttribute(name, String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function show(node, text) {
    node.textContent = text || "";
    node.hidden = !text;
  }

  // -- the API -------------------------------------------------------------------------------------

  // CSRF defence, kept on purpose. With a key: it travels only in the Authorization header (no cookie is
  // sent: credentials "omit"). With single sign-on: the session cookie is SameSite=Strict, and every
  // request also carries the session's X-CSRF-Token, which only this origin can read. Bodies are JSON,
  // which the gateway requires (415 otherwise): a page on another origin can send none of this without
  // a CORS preflight, and the gateway refuses its Origin.
  async function api(method, apiPath, body) {
    const headers = { Accept: "application/json" };
    if (mode === "sso") headers["X-CSRF-Token"] = csrf;
    else headers.Authorization = `Bearer ${key}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(`${prefix}${apiPath}`, {
        method, headers, cache: "no-store", credentials: mode === "sso" ? "same-origin" : "omit",
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (err) {
      return { ok: false, status: 0, error: { code: "network", message: "Cannot reach the gateway." } };
    }
    const date = Date.parse(response.headers.get("Date") || "");
    if (!Number.isNaN(date)) {
      const offset = date - Date.now();
      serverOffset = Math.abs(offset) > 1500 ? offset : 0; // the header has 1 s resolution
    }
    let data = null;
    try { data = await response.json(); } catch (err) { data = null; }
    if (response.ok) return { ok: true, status: response.status, data };
    const error = (data && data.error && typeof data.error.message === "string") ? data.error
      : { code: `http-${response.status}`, message: response.statusText || "The request failed." };
    return { ok: false, status: response.status, error };
  }

  // -- signing in and out ------------------------------------------------------------------------

  // Signing out of a single sign-on session ends it at the gateway, then at the IdP if it says where.
  // `ended`: the gateway ended it already (it answered 401), so there is nothing to end.
  async function signOut(reason, ended) {
    if (mode === "sso" && !ended) {
      const result = await api("POST", "/approvals/sso/logout", {});
      mode = csrf = null;
      if (result.ok && result.data && typeof result.data.redirect === "string") {
        location.assign(result.data.redirect);
        return;
      }
    }
    mode = csrf = null;
    key = null;
    sessionStorage.removeItem(KEY_STORAGE);
    clearTimeout(timer);
    for (const card of cards.values()) card.root.remove();
    cards.clear();
    $("board").hidden = true;
    $("sign-out").hidden = true;
    show($("who"), "");
    show($("status"), "");
    $("sign-in").hidden = false;
    show($("sign-in-error"), reason || "");
    $("key").value = "";
    $("key").focus();
  }

  function signedIn(who) {
    show($("who"), who || "");
    $("sign-in").hidden = true;
    $("board").hidden = false;
    $("sign-out").hidden = false;
    refresh();
  }

  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("key").value.trim();
    if (!value) return;
    key = value;
    mode = "key";
    sessionStorage.setItem(KEY_STORAGE, key);
    show($("sign-in-error"), "");
    signedIn();
  });

  $("sign-out").addEventListener("click", (event) => {
    event.preventDefault();
    signOut("");
  });

  // -- refreshing ----------------------------------------------------------------------------------

  let generation = 0; // only the newest refresh renders and schedules the next one
  async function refresh() {
    clearTimeout(timer);
    if (!mode) return;
    const mine = ++generation;
    const listed = await load();
    if (!mode || mine !== generation) return; // signed out, or a newer refresh started meanwhile
    if (!listed.ok) {
      if (listed.status === 401 && mode === "sso") return signOut("Your session has ended. Sign in again.", true);
      if (listed.status === 401) return signOut("That key was not accepted. Check it and sign in again.");
      if (listed.status === 403) return signOut(`${listed.error.message} Use an approver's key.`);
      show($("banner"), `Could not refresh: ${listed.error.message}`);
    } else {
      show($("banner"), "");
      const approvals = listed.data.approvals.slice();
      if (focusId && !approvals.some((a) => a.id === focusId)) {
        const one = await api("GET", `/v1/approvals/${encodeURIComponent(focusId)}`);
        if (one.ok) approvals.push(one.data);
        else if (one.status === 404) show($("banner"), `There is no approval request ${focusId}.`);
      }
      render(approvals);
      const total = listed.data.total;
      show($("count"), total ? `Showing ${Math.min(listed.data.approvals.length, total)} of ${total}` : "");
      $("more").hidden = listed.data.approvals.length >= total;
      show($("status"), `Updated ${new Date().toLocaleTimeString()}`);
    }
    timer = setTimeout(refresh, REFRESH_MS);
  }

  // The filters as API query parameters, for one page.
  function query(offset, limit) {
    const params = new URLSearchParams();
    if ($("f-state").value) params.set("state", $("f-state").value);
    for (const [id, name] of [["f-tool", "tool"], ["f-principal", "principal"], ["f-text", "q"]]) {
      const value = $(id).value.trim();
      if (value) params.set(name, value);
    }
    params.set("limit", String(limit));
    params.set("offset", String(offset));
    return params.toString();
  }

  // The first `wanted` matching requests, in API pages; and how many match in all.
  async function load() {
    const approvals = [];
    let total = 0;
    for (let offset = 0; offset < wanted; offset += API_PAGE) {
      const page = await api("GET", `/v1/approvals?${query(offset, Math.min(API_PAGE, wanted - offset))}`);
      if (!page.ok) return page;
      approvals.push(...page.data.approvals);
      total = page.data.total;
      if (offset + page.data.approvals.length >= total) break;
    }
    return { ok: true, status: 200, data: { approvals, total } };
  }

  let filterTimer = null;
  function filtersChanged() {
    clearTimeout(filterTimer);
    filterTimer = setTimeout(() => {
      wanted = SHOWN_STEP;
      $("empty").textContent = $("f-state").value === "pending" && !$("f-tool").value && !$("f-principal").value
        && !$("f-text").value ? "No requests are waiting for approval. This page refreshes itself."
        : "No requests match these filters.";
      refresh();
    }, 250);
  }
  $("filters").addEventListener("input", filtersChanged);
  $("filters").addEventListener("submit", (event) => { event.preventDefault(); filtersChanged(); });
  $("more").addEventListener("click", () => { wanted += SHOWN_STEP; refresh(); });

  function render(approvals) {
    // The focused request first, then the ones whose time runs out first.
    approvals.sort((a, b) => (b.id === focusId) - (a.id === focusId) || Date.parse(a.expires_at) - Date.parse(b.expires_at));
    const seen = new Set();
    let previous = null;
    for (const approval of approvals) {
      seen.add(approval.id);
      let card = cards.get(approval.id);
      if (!card) {
        card = newCard(approval);
        cards.set(approval.id, card);
      }
      update(card, approval);
      // Moved only when out of place: moving a card takes the focus from its comment or arguments being typed.
      const place = previous ? previous.nextSibling : $("list").firstChild;
      if (place !== card.root) $("list").insertBefore(card.root, place);
      previous = card.root;
    }
    for (const [id, card] of cards) {
      if (!seen.has(id) && !card.busy) {
        card.root.remove();
        cards.delete(id);
      }
    }
    $("empty").hidden = cards.size > 0;
    const focused = focusId && cards.get(focusId);
    if (focused && !scrolled) {
      scrolled = true;
      focused.root.scrollIntoView({ block: "start" });
    }
    tick();
  }

  // -- one request ---------------------------------------------------------------------------------

  function newCard(approval) {
    const comment = el("textarea", { rows: 2, maxlength: 2000, "data-testid": "comment",
      placeholder: "Comment (the caller sees it; required to deny)", "aria-label": "Comment" });
    const approve = el("button", { type: "button", class: "approve", "data-testid": "approve" }, "Approve");
    const deny = el("button", { type: "button", class: "deny", "data-testid": "deny" }, "Deny");
    const error = el("p", { class: "error", role: "alert", "data-testid": "card-error", hidden: true });
    const info = el("p", { class: "info", "data-testid": "card-info", hidden: true });
    const card = { comment, approve, deny, error, info, data: null, fingerprint: "", busy: false };
    card.edit = edits.editor(el, approval.id, {
      current: () => card.data, approve: (args) => decide(card, true, args), error: (text) => show(error, text) });
    const form = el("div", { class: "decide" }, comment,
      el("div", { class: "buttons" }, approve, deny, card.edit.toggle), card.edit.panel, error, info);
    const details = el("div", { class: "details" });
    const root = el("article", { class: "card", "data-testid": "approval", "data-approval-id": approval.id },
      details, form);
    if (approval.id === focusId) root.classList.add("focused");
    Object.assign(card, { root, details, form });
    approve.addEventListener("click", () => decide(card, true));
    deny.addEventListener("click", () => decide(card, false));
    return card;
  }

  function update(card, approval) {
    const fingerprint = JSON.stringify(approval);
    card.data = approval;
    if (fingerprint === card.fingerprint) return;
    card.fingerprint = fingerprint;
    card.details.replaceChildren(...details(approval));
    card.edit.sync(approval);
    const open = approval.state === "pending";
    card.form.hidden = !open;
    card.root.classList.toggle("closed", !open);
  }

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
      ...run.section(el, a.run, Date.now() + serverOffset), el("h3", {}, "Arguments"), args(a),
      ...edits.section(el, a.edit)];
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

  function when(stamp) {
    const t = Date.parse(stamp);
    if (Number.isNaN(t)) return stamp || "";
    return `${new Date(t).toLocaleString()} (${run.ago(stamp, Date.now() + serverOffset)})`;
  }

  // -- deciding ------------------------------------------------------------------------------------

  // An approval, or a denial; `edited`: approved with these arguments in place of the call's.
  async function decide(card, approve, edited) {
    const comment = card.comment.value.trim();
    show(card.info, "");
    if (!approve && !comment) {
      show(card.error, "Say why you deny it: the caller sees your comment.");
      card.comment.focus();
      return;
    }
    show(card.error, "");
    card.busy = true;
    const buttons = [card.approve, card.deny, ...card.edit.buttons];
    for (const button of buttons) button.disabled = true;
    const id = card.data.id;
    const body = edited === undefined ? { approve, comment } : { approve, comment, arguments: edited };
    const result = await api("POST", `/v1/approvals/${encodeURIComponent(id)}/decision`, body);
    card.busy = false;
    for (const button of buttons) button.disabled = false;
    if (!result.ok) {
      if (result.status === 401 && mode === "sso") return signOut("Your session has ended. Sign in again.", true);
      if (result.status === 401) return signOut("That key is no longer accepted. Sign in again.");
      const what = EDIT_ERRORS.has(result.error.code) ? "Edit refused"
        : { 403: "Not allowed", 404: "Not found", 409: "Already decided" }[result.status] || "Failed";
      show(card.error, `${what}: ${result.error.message}`);
      if (result.status === 409 || result.status === 404) refresh();
      return;
    }
    const a = result.data;
    card.comment.value = "";
    card.edit.close();
    if (a.state === "pending") {
      show(card.info, "Your approval is recorded. Other approvers are still needed.");
    } else {
      const how = a.state === "denied" ? "Denied" : a.edit ? "Approved with edited arguments" : "Approved";
      notice(`${how}: ${a.tool} requested by ${a.principal.id}`, a.state);
    }
    update(card, a);
    refresh();
  }

  function notice(text, state) {
    const node = el("p", { class: `notice notice-${state}`, "data-testid": "notice", role: "status" }, text);
    $("notices").prepend(node);
    setTimeout(() => node.remove(), 8000);
  }

  // -- countdowns ----------------------------------------------------------------------------------

  function tick() {
    const now = Date.now() + serverOffset;
    for (const card of cards.values()) {
      const node = card.details.querySelector("[data-testid=countdown]");
      if (!node || !card.data) continue;
      if (card.data.state !== "pending") {
        node.textContent = card.data.decided_at ? `decided ${when(card.data.decided_at)}` : "";
        node.className = "countdown";
        continue;
      }
      const left = Math.round((Date.parse(card.data.expires_at) - now) / 1000);
      node.textContent = left > 0 ? `${duration(left)} left` : "time is up";
      node.className = left <= 60 ? "countdown urgent" : "countdown";
    }
  }

  function duration(s) {
    const h = Math.floor(s / 3600);
    const m = Math.floor((s % 3600) / 60);
    const sec = s % 60;
    const pad = (n) => String(n).padStart(2, "0");
    return h ? `${h}h ${pad(m)}m` : m ? `${m}m ${pad(sec)}s` : `${sec}s`;
  }

  // -- starting ------------------------------------------------------------------------------------

  // Whether the gateway signs approvers in with an IdP, and whether this browser has a session already.
  async function start() {
    let sso = null;
    try {
      const response = await fetch(`${prefix}/approvals/sso/session`, {
        headers: { Accept: "application/json" }, cache: "no-store", credentials: "same-origin" });
      if (response.ok) sso = await response.json();
    } catch (err) {
      sso = null;
    }
    if (sso && sso.sso) {
      const back = focusId ? `/approvals/${encodeURIComponent(focusId)}` : "/approvals";
      const link = $("sso-link");
      link.textContent = `Sign in with ${sso.sso.name}`;
      link.href = `${prefix}${sso.sso.login}?next=${encodeURIComponent(back)}`;
      $("sso").hidden = false;
    }
    if (sso && sso.session) {
      mode = "sso";
      csrf = sso.session.csrf;
      signedIn(sso.session.principal);
    } else if (key) {
      mode = "key";
      signedIn();
    } else {
      signOut("");
    }
  }

  setInterval(tick, 1000);
  start();
})();
