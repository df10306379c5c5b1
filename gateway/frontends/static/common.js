// The console's shared helpers, loaded first on each of its pages (the console and the approvals page): text-only
// DOM building, the gateway's API with a key or a sign-on session, the key kept in this tab, the header with the
// console's views, the light/dark toggle, and times.
// Every piece of data is put on a page as text (text nodes, attribute values), never as HTML.
"use strict";
window.gatewayUi = Object.freeze((() => {
  const KEY_STORAGE = "gateway.key"; // sessionStorage: this tab only, gone when it closes
  const THEME_STORAGE = "gateway.theme"; // localStorage: "light" or "dark"; absent: the system's
  const SVG = "http://www.w3.org/2000/svg";
  // "/prefix/console" or "/prefix/approvals[/ID]": the API lives under "/prefix" too.
  const prefix = (location.pathname.match(/^(.*?)\/(?:console|approvals)(?:\/.*)?$/) || ["", ""])[1];
  // The console's views, in the header's order; `admin`: only admins see it (whoami, GET /v1/admin/whoami).
  const VIEWS = [
    { id: "runs", label: "Runs", href: "/console#/runs", admin: true },
    { id: "decisions", label: "Decisions", href: "/console#/decisions", admin: true },
    { id: "policies", label: "Policies", href: "/console#/policies", admin: true },
    { id: "upstreams", label: "Upstreams", href: "/console#/upstreams", admin: true },
    { id: "approvals", label: "Approvals", href: "/approvals", admin: false },
  ];
  let serverOffset = 0; // ms to add to the local clock to get the server's (from the Date header)

  // -- the DOM, text only ----------------------------------------------------------------------------

  function fill(node, attrs, children) {
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined && value !== false) node.setAttribute(name, String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const el = (tag, attrs, ...children) => fill(document.createElement(tag), attrs, children);
  const svg = (tag, attrs, ...children) => fill(document.createElementNS(SVG, tag), attrs, children);
  const $ = (id) => document.getElementById(id);

  function show(node, text) {
    node.textContent = text || "";
    node.hidden = !text;
  }

  // -- the API ---------------------------------------------------------------------------------------

  // CSRF defence, kept on purpose. With a key (`auth.key`): it travels only in the Authorization header (no cookie
  // is sent: credentials "omit"). With single sign-on (`auth.csrf`): the session cookie is SameSite=Strict, and
  // every request also carries the session's X-CSRF-Token, which only this origin can read. Bodies are JSON, which
  // the gateway requires (415 otherwise): a page on another origin can send none of this without a CORS preflight,
  // and the gateway refuses its Origin.
  async function api(method, apiPath, body, auth) {
    const headers = { Accept: "application/json" };
    if (auth.csrf) headers["X-CSRF-Token"] = auth.csrf;
    else headers.Authorization = `Bearer ${auth.key}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(`${prefix}${apiPath}`, {
        method, headers, cache: "no-store", credentials: auth.csrf ? "same-origin" : "omit",
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
    if (auth.raw && response.ok) return { ok: true, status: response.status, response };
    let data = null;
    try { data = await response.json(); } catch (err) { data = null; }
    if (response.ok) return { ok: true, status: response.status, data };
    const error = (data && data.error && typeof data.error.message === "string") ? data.error
      : { code: `http-${response.status}`, message: response.statusText || "The request failed." };
    return { ok: false, status: response.status, error };
  }

  const storedKey = Object.freeze({
    get: () => sessionStorage.getItem(KEY_STORAGE),
    set: (value) => sessionStorage.setItem(KEY_STORAGE, value),
    clear: () => sessionStorage.removeItem(KEY_STORAGE),
  });

  // Who holds this key ({principal, admin, approver}), or null when the gateway would not say.
  async function whoami(auth) {
    const result = await api("GET", "/v1/admin/whoami", undefined, auth);
    return result.ok && result.data && typeof result.data === "object" ? result.data : null;
  }

  // -- times -----------------------------------------------------------------------------------------

  const now = () => Date.now() + serverOffset;

  // "12s ago", "2 min ago", "3 h ago", "4 d ago"; `at`: the server's time in ms (the local clock corrected).
  function ago(stamp, at = now()) {
    const t = Date.parse(stamp);
    if (Number.isNaN(t)) return "";
    const s = Math.max(0, Math.round((at - t) / 1000));
    return s < 60 ? `${s}s ago` : s < 3600 ? `${Math.floor(s / 60)} min ago`
      : s < 172800 ? `${Math.floor(s / 3600)} h ago` : `${Math.floor(s / 86400)} d ago`;
  }

  function when(stamp) {
    const t = Date.parse(stamp);
    if (Number.isNaN(t)) return typeof stamp === "string" ? stamp : "";
    return `${new Date(t).toLocaleString()} (${ago(stamp)})`;
  }

  // -- the header: the console's views, who is signed in, the theme ---------------------------------

  const THEMES = ["system", "dark", "light"];

  function theme() {
    const chosen = localStorage.getItem(THEME_STORAGE);
    return THEMES.includes(chosen) ? chosen : "system";
  }

  function applyTheme(name) {
    if (name === "system") {
      delete document.documentElement.dataset.theme;
      localStorage.removeItem(THEME_STORAGE);
    } else {
      document.documentElement.dataset.theme = name;
      localStorage.setItem(THEME_STORAGE, name);
    }
    const button = $("theme");
    if (button) button.textContent = `Theme: ${name}`;
  }

  // Fills <header id="bar"> on this page; `current`: the id of the view shown. Returns the header's parts.
  function header(current) {
    const links = VIEWS.map((view) => el("li", {}, el("a", {
      href: `${prefix}${view.href}`, "data-view": view.id, "data-testid": `nav-${view.id}`, hidden: true,
      "aria-current": view.id === current ? "page" : null }, view.label)));
    const themeButton = el("button", { type: "button", id: "theme", class: "theme", "data-testid": "theme",
      title: "Light or dark: the system's, or the one you choose" });
    themeButton.addEventListener("click", () => applyTheme(THEMES[(THEMES.indexOf(theme()) + 1) % THEMES.length]));
    $("bar").replaceChildren(
      el("a", { class: "skip", href: "#main" }, "Skip to content"),
      el("a", { class: "brand", href: `${prefix}/console`, "data-testid": "brand" }, "Gateway console"),
      el("nav", { class: "nav", "aria-label": "Console views" }, el("ul", {}, ...links)),
      el("div", { class: "bar-end" },
        el("span", { class: "status", id: "status", "data-testid": "status", "aria-live": "polite" }),
        el("span", { class: "who", id: "who", "data-testid": "who", hidden: true }),
        themeButton,
        el("button", { type: "button", class: "sign-out plain", id: "sign-out", "data-testid": "sign-out",
          hidden: true }, "Sign out")));
    applyTheme(theme());
  }

  // Shows the views `who` (whoami's answer) may use; null: signed out, or a sign-on session (approvals only).
  function access(who, signedIn) {
    for (const link of document.querySelectorAll(".nav a[data-view]")) {
      const view = VIEWS.find((v) => v.id === link.dataset.view);
      // An admin is an approver who sees every request (config/auth.py); a key that is neither sees no approvals.
      const allowed = view.admin ? Boolean(who && who.admin) : !who || Boolean(who.approver || who.admin);
      link.hidden = !signedIn || !allowed;
    }
  }

  function current(id) {
    for (const link of document.querySelectorAll(".nav a[data-view]")) {
      if (link.dataset.view === id) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
  }

  return { prefix, el, svg, $, show, api, storedKey, whoami, now, ago, when, header, access, current };
})());
