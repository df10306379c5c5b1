// The operator console: signing in with a key (kept in this tab), asking the gateway which views the key may use
// (GET /v1/admin/whoami), and the hash routes (#/runs, #/runs/PRINCIPAL/RUN, #/decisions, #/policies,
// #/upstreams). Loaded last: every view has registered with console_kit.js by then.
// Every piece of data is put on the page as text, never as HTML.
"use strict";
(() => {
  const ui = window.gatewayUi;
  const kit = window.consoleKit;
  const { el, show, $ } = ui;
  let key = ui.storedKey.get();
  let who = null; // whoami's answer: {principal, admin, approver}
  let generation = 0; // only the newest route renders

  ui.header(null);

  // The admin API with the key; a key the gateway stopped accepting signs the tab out.
  async function api(method, path, body, raw) {
    const result = await ui.api(method, path, body, { key, raw });
    if (result.status === 401 && key) signOut("That key is no longer accepted. Sign in again.");
    return result;
  }

  function signOut(reason) {
    key = who = null;
    generation += 1;
    ui.storedKey.clear();
    ui.access(null, false);
    ui.current(null);
    $("view").replaceChildren();
    $("view").hidden = true;
    $("sign-out").hidden = true;
    show($("who"), "");
    show($("status"), "");
    show($("banner"), "");
    show($("notice"), "");
    $("sign-in").hidden = false;
    show($("sign-in-error"), reason || "");
    $("key").value = "";
    $("key").focus();
  }

  async function signIn() {
    const result = await ui.api("GET", "/v1/admin/whoami", undefined, { key });
    if (!result.ok || !result.data || typeof result.data !== "object") {
      signOut(result.status === 401 ? "That key was not accepted. Check it and sign in again."
        : kit.failure("Could not sign in", result));
      return;
    }
    who = result.data;
    ui.access(who, true);
    show($("who"), kit.text(who.principal));
    $("sign-out").hidden = false;
    $("sign-in").hidden = true;
    $("view").hidden = false;
    route(false);
  }

  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("key").value.trim();
    if (!value) return;
    key = value;
    ui.storedKey.set(key);
    show($("sign-in-error"), "");
    signIn();
  });
  $("sign-out").addEventListener("click", () => signOut(""));

  // "#/runs/alice/run-1?approval=ID" -> {view: "timeline", params: {principal: "alice", run: "run-1", approval}}.
  function parse(hash) {
    const [where, query] = hash.replace(/^#\/?/, "").split("?");
    const parts = where.split("/").filter(Boolean).map((p) => {
      try { return decodeURIComponent(p); } catch (err) { return p; }
    });
    if (parts[0] === "runs" && parts.length === 3) {
      const approval = new URLSearchParams(query || "").get("approval");
      return { view: "timeline", params: { principal: parts[1], run: parts[2], approval } };
    }
    return { view: parts.length === 1 ? parts[0] : parts.length ? "missing" : "", params: {} };
  }

  // Puts a view's nodes in place. The element that had the focus (a filter, a pager's button) gets it back in the
  // new nodes when it is there (found by its data-testid), so a keyboard user goes on where they were.
  function place(root, nodes) {
    const had = root.contains(document.activeElement) ? document.activeElement.getAttribute("data-testid") : null;
    root.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined && n !== false));
    const again = had && root.querySelector(`[data-testid="${had}"]:not([disabled])`);
    if (again) again.focus();
    else if (had && $("view-title")) $("view-title").focus();
  }

  // Renders the view the hash names; `focus`: move the focus to its heading (the route changed under the user);
  // `notice`: what to say once it shows (a change was made).
  async function route(focus, notice) {
    if (!who) return;
    const mine = ++generation;
    const { view, params } = parse(location.hash);
    if (!view && who.admin) {
      location.replace("#/runs"); // the hashchange renders it
      return;
    }
    const id = view || "home";
    ui.current(id === "timeline" ? "runs" : id);
    show($("banner"), "");
    show($("notice"), "");
    const target = kit.views.get(id);
    const root = $("view");
    const stale = () => mine !== generation;
    const ctx = {
      api, who, params, stale,
      show: (...nodes) => { if (!stale()) place(root, nodes); },
      banner: (text) => { if (!stale()) show($("banner"), text); },
      notice: (text) => { if (!stale()) show($("notice"), text); },
      status: (text) => { if (!stale()) show($("status"), text); },
      reload: (said) => route(false, said),
    };
    if (!target) {
      ctx.show(kit.title("Not found"), el("p", {}, "There is no such view. ", el("a", { href: "#/" }, "Start over")));
    } else if (target.admin && !who.admin) {
      ctx.show(kit.title("Admins only"), el("p", { "data-testid": "admins-only" },
        "Only keys with admin: true may see this view. ", el("a", { href: `${ui.prefix}/approvals` }, "Approvals")));
    } else {
      await target.render(ctx);
    }
    if (stale()) return;
    if (notice) show($("notice"), notice);
    if (focus && $("view-title")) $("view-title").focus();
  }
  window.addEventListener("hashchange", () => route(true));

  // What an approver's key sees first: the approvals, and the timelines of runs it may decide reached from there.
  kit.register("home", { admin: false, render(ctx) {
    ctx.show(kit.title("Gateway console"), ctx.who.approver ? el("p", { "data-testid": "approver-home" },
      "Your key decides approval requests: ", el("a", { href: `${ui.prefix}/approvals` }, "open the approvals"),
      ". Each request links to the timeline of its run.")
      : el("p", { "data-testid": "nobody-home" }, "This key may neither read the console nor decide approvals."));
  } });

  if (key) signIn();
  else signOut("");
})();
