// The tools under a finished answer: copy the answer (its Markdown), regenerate it (the last
// answer of a chat), and say whether it helped (thumbs up/down, sent to POST /api/feedback with
// the question, the pages read and the citations). And a copy button on every code block.

import { h } from "./dom.js";

export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch { // no clipboard API (an insecure origin, a denied permission): the old way
    const area = h("textarea", { readonly: true, style: "position:fixed;opacity:0" });
    area.value = text;
    document.body.append(area);
    area.select();
    let ok = false;
    try { ok = document.execCommand("copy"); } catch { ok = false; }
    area.remove();
    return ok;
  }
}

function flash(button, text) {
  const before = button.dataset.label || button.textContent;
  button.dataset.label = before;
  button.textContent = text;
  setTimeout(() => { button.textContent = before; }, 1500);
}

/** A copy button in the corner of each code block of `node` (rendered answer or article). */
export function addCodeCopyButtons(node) {
  for (const pre of node.querySelectorAll("pre")) {
    if (pre.querySelector(".copy-code")) continue;
    const code = pre.querySelector("code") || pre;
    const button = h("button.tool-button.copy-code", { type: "button", "aria-label": "Copy the code" }, "Copy");
    button.addEventListener("click", async () => flash(button, (await copyText(code.textContent)) ? "Copied" : "Copy failed"));
    pre.classList.add("has-copy");
    pre.append(button);
  }
}

/**
 * The tool row of one answer. `actions`: { regenerate() (absent: not offered), vote(kind) ->
 * Promise (rejects with the server's message) }; `vote`: the vote already given, if any.
 */
export function answerTools(answerText, actions, vote = null) {
  const copy = h("button.tool-button.copy-answer", { type: "button", title: "Copy the answer as Markdown" }, "Copy");
  copy.addEventListener("click", async () => flash(copy, (await copyText(answerText())) ? "Copied" : "Copy failed"));
  const row = h("div.answer-tools", { role: "group", "aria-label": "Answer tools" }, copy);
  if (actions.regenerate) {
    row.append(h("button.tool-button.regenerate", { type: "button", title: "Ask the same question again", onclick: actions.regenerate }, "Regenerate"));
  }
  const votes = {};
  const status = h("span.muted.small.vote-status", { role: "status" });
  // Words, not emoji: a system without an emoji font would show empty boxes.
  for (const [kind, label, title] of [["up", "Helpful", "This answer helped"], ["down", "Not helpful", "This answer was wrong or did not help"]]) {
    const button = h("button.tool-button.vote", { type: "button", title, "aria-label": title, "aria-pressed": String(vote === kind), dataset: { vote: kind } }, label);
    button.addEventListener("click", async () => {
      if (button.getAttribute("aria-pressed") === "true") return;
      for (const b of Object.values(votes)) b.disabled = true;
      try {
        await actions.vote(kind);
        for (const [k, b] of Object.entries(votes)) b.setAttribute("aria-pressed", String(k === kind));
        status.textContent = kind === "up" ? "Thanks." : "Thanks: noted for the wiki's owner (kaas feedback).";
      } catch (error) {
        status.textContent = "Not recorded: " + (error.message || error);
      } finally {
        for (const b of Object.values(votes)) b.disabled = false;
      }
    });
    votes[kind] = button;
    row.append(button);
  }
  row.append(status);
  return row;
}
