// The approvals page, part three: editing the arguments of a pending request before approving it, and what an
// edited approval shows. Loaded before approvals.js, which builds the cards and calls these.
// Arguments go into the textarea as its value and an edit is shown as text: nothing here is ever parsed as HTML.
"use strict";
window.approvalsEdit = Object.freeze((() => {
  // Whether this approver could edit the request: the API refuses the rest anyway, saying why.
  function editable(a) {
    return a.state === "pending" && !a.args_redacted && a.upstream !== "client"
      && !a.requirements.some((r) => r.satisfied_by);
  }

  // The edited arguments, or a message saying why the text is not a JSON object.
  function parsed(text) {
    let value;
    try {
      value = JSON.parse(text);
    } catch (err) {
      return { message: `The arguments are not valid JSON: ${err.message}` };
    }
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      return { message: "The arguments must be a JSON object, such as {\"amount\": 50}." };
    }
    return { args: value };
  }

  // The editor of one card: "Edit arguments" opens a labelled textarea holding the arguments as JSON, and
  // "Approve edited" calls `on.approve(args)`; `on.current()` is the card's request, `on.error(text)` shows a
  // problem. `el` is the page's text-only element builder.
  function editor(el, id, on) {
    const panelId = `edit-${id}`;
    const textId = `${panelId}-args`;
    const hintId = `${panelId}-hint`;
    const toggle = el("button", { type: "button", class: "edit", "data-testid": "edit", "aria-expanded": "false",
      "aria-controls": panelId }, "Edit arguments");
    const text = el("textarea", { id: textId, rows: 8, spellcheck: "false", autocomplete: "off", class: "mono",
      "data-testid": "edit-args", "aria-describedby": hintId });
    const send = el("button", { type: "button", class: "approve", "data-testid": "approve-edited" }, "Approve edited");
    const cancel = el("button", { type: "button", "data-testid": "edit-cancel" }, "Cancel");
    const panel = el("div", { id: panelId, class: "editor", "data-testid": "editor", hidden: true },
      el("label", { for: textId }, "Arguments to approve the call with (JSON)"), text,
      el("p", { class: "hint", id: hintId }, "The policies decide the edited call again before it is approved: ",
        "if they refuse it, nothing changes. The agent is told that its arguments were edited."),
      el("div", { class: "buttons" }, send, cancel));

    function opened(open) {
      panel.hidden = !open;
      toggle.setAttribute("aria-expanded", String(open));
      if (open) {
        // The arguments as the agent asked them: the policies apply their rewrites to the edited call again.
        text.value = JSON.stringify(on.current().original_args, null, 2);
        text.focus();
      } else {
        toggle.focus();
      }
    }

    toggle.addEventListener("click", () => opened(panel.hidden));
    cancel.addEventListener("click", () => opened(false));
    send.addEventListener("click", () => {
      const edit = parsed(text.value);
      if (edit.message) {
        on.error(edit.message);
        text.focus();
        return;
      }
      on.approve(edit.args);
    });

    return {
      toggle, panel, buttons: [send, cancel],
      // Called on each refresh: the control only while the request can be edited; an open editor keeps its text.
      sync(a) {
        toggle.hidden = !editable(a);
        if (toggle.hidden && !panel.hidden) {
          panel.hidden = true;
          toggle.setAttribute("aria-expanded", "false");
        }
      },
      close() { if (!panel.hidden) opened(false); },
    };
  }

  // The section of a card for an edit ({by, arguments, final_args}, from the API), or [] when there is none.
  function section(el, edit) {
    if (!edit || typeof edit !== "object") return [];
    const json = (v) => JSON.stringify(v, null, 2);
    const nodes = [
      el("h3", { "data-testid": "edit-title" }, "Edited by ", el("span", { "data-testid": "edit-by" }, String(edit.by))),
      el("p", { class: "sub" }, "The call runs with the approver's arguments, as the policies decided them:"),
      el("pre", { class: "edited", "data-testid": "edit-arguments" }, json(edit.arguments)),
    ];
    if (json(edit.final_args) !== json(edit.arguments)) {
      nodes.push(el("p", { class: "sub" }, "after the policies' rewrites:"),
        el("pre", { class: "edited", "data-testid": "edit-final" }, json(edit.final_args)));
    }
    return nodes;
  }

  return { editor, section };
})());
