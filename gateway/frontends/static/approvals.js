// The approvals page, one view of the console: lists the requests this approver may decide (filtered, paged
// through the approver API, which filters on the server) and posts decisions. Loaded after common.js (the
// console's header, the API, text-only elements) and approvals_card.js (what a card shows of one request).
// Every piece of data is put on the page as text (textContent / text nodes), never as HTML.
"use strict";
(() => {
  const REFRESH_MS = 2000;
  const SHOWN_STEP = 100; // requests added by "Show more"
  const API_PAGE = 500; // the API's largest page (MAX_APPROVALS_PAGE)
  // The API's codes for an edit it refused (the message says why: the rule, the argument, ...).
  const EDIT_ERRORS = new Set(["edit-refused", "invalid-edit", "edit-not-possible"]);

  const ui = window.gatewayUi; // common.js
  const { el, show, $, prefix, when } = ui;
  // "/prefix/approvals/ID": that request first.
  const path = location.pathname.match(/\/approvals\/([^/]+)\/?$/);
  const focusId = path ? decodeURIComponent(path[1]) : null;

  const edits = window.approvalsEdit; // approvals_edit.js: editing the arguments before approving
  const cards = new Map(); // approval id -> {root, details, form, data, fingerprint}
  let key = ui.storedKey.get();
  let mode = null; // "key" (a pasted API key) or "sso" (the gateway's session cookie, from the IdP's sign-in)
  let csrf = null; // the session's CSRF token, sent with every request in "sso" mode
  let timer = null;
  let scrolled = false;
  let wanted = SHOWN_STEP; // how many matching requests to show

  ui.header("approvals");

  // The approver API, with the pasted key or the sign-on session (common.js says why this resists CSRF).
  const api = (method, apiPath, body) => ui.api(method, apiPath, body, mode === "sso" ? { csrf } : { key });

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
    ui.storedKey.clear();
    ui.access(null, false);
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

  // The header shows the console's other views to an admin's key (a sign-on session is an approver's only).
  async function signedIn(who) {
    show($("who"), who || "");
    $("sign-in").hidden = true;
    $("board").hidden = false;
    $("sign-out").hidden = false;
    ui.access(null, true);
    refresh();
    if (mode === "key") {
      const found = await ui.whoami({ key });
      if (found && mode === "key") {
        ui.access(found, true);
        show($("who"), typeof found.principal === "string" ? found.principal : "");
      }
    }
  }

  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("key").value.trim();
    if (!value) return;
    key = value;
    mode = "key";
    ui.storedKey.set(key);
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
    card.details.replaceChildren(...window.approvalsCard.details(approval));
    card.edit.sync(approval);
    const open = approval.state === "pending";
    card.form.hidden = !open;
    card.root.classList.toggle("closed", !open);
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
    const now = ui.now();
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
