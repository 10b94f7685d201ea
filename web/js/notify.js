// In-app questions and messages, never the browser's native prompt/confirm: `confirmDialog`
// (a modal <dialog> with the app's look, Escape or Cancel answering no) and `toast` (a short
// message at the bottom of the screen, with an optional action such as Undo).

import { h } from "./dom.js";

/** Ask a yes/no question in a modal dialog; resolves true only when `ok` is chosen. */
export function confirmDialog({ title, message, ok = "OK", cancel = "Cancel", danger = false }) {
  const okButton = h("button" + (danger ? ".primary.danger" : ".primary"), { type: "submit", value: "ok" }, ok);
  const dialog = h("dialog.dialog.confirm-dialog", { "aria-labelledby": "confirm-title" },
    h("form", { method: "dialog" },
      h("h2", { id: "confirm-title" }, title),
      message ? h("p", {}, message) : null,
      h("div.dialog-actions", {},
        h("button.ghost", { type: "submit", value: "cancel" }, cancel),
        okButton)));
  document.body.append(dialog);
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      resolve(dialog.returnValue === "ok");
      dialog.remove();
    }, { once: true });
    dialog.returnValue = "";
    dialog.showModal();
    okButton.focus();
  });
}

let region = null;

/** Show `message` for `timeout` ms; `action` {label, run}: a button that runs it and closes. */
export function toast(message, { action = null, timeout = 8000 } = {}) {
  if (!region || !document.contains(region)) {
    region = h("div.toasts", { role: "status", "aria-live": "polite" });
    document.body.append(region);
  }
  const close = () => { clearTimeout(timer); item.remove(); };
  const item = h("div.toast", {}, h("span.toast-text", {}, message),
    action ? h("button.toast-action", { type: "button", onclick: () => { close(); action.run(); } }, action.label) : null,
    h("button.toast-close", { type: "button", "aria-label": "Dismiss", onclick: close }, "×"));
  const timer = setTimeout(close, timeout);
  region.append(item);
  return { close };
}
