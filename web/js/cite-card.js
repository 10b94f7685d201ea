// The preview card of a citation (issue 28 item 7): the cited page's title, the heading the
// passage is under and the quoted passage, in a card positioned next to the citation. It opens
// on hover (after a short delay), on keyboard focus and on a tap (touch: the first tap opens the
// card, its "Open page" button opens the page); Escape, leaving it, blur and a tap elsewhere
// close it. The quote is page text from the server: it goes in as text, never as markup.

import { h } from "./dom.js";

const OPEN_DELAY = 120; // ms of hovering before the card opens (passing over a link opens nothing)
const CLOSE_DELAY = 200; // ms to move the pointer from the link onto the card
const MARGIN = 8; // px between the card and the edges of the window

class CitationCard {
  constructor() {
    this.anchor = null;
    this.openTimer = 0;
    this.closeTimer = 0;
    this.lastPointer = "mouse";
    this.title = h("p.cite-card-title");
    this.heading = h("p.cite-card-heading");
    this.quote = h("blockquote.cite-card-quote");
    this.openButton = h("button.tool-button.cite-card-open", { type: "button" }, "Open page");
    this.node = h("div.cite-card", { id: "cite-card", role: "dialog", "aria-label": "Cited passage", hidden: true },
      this.title, this.heading, this.quote, h("div.cite-card-actions", {}, this.openButton));
    this.node.addEventListener("pointerenter", () => clearTimeout(this.closeTimer));
    this.node.addEventListener("pointerleave", (e) => { if (e.pointerType === "mouse") this.closeSoon(); });
    this.node.addEventListener("focusout", (e) => this.blurred(e));
    this.openButton.addEventListener("click", () => {
      const { onOpen } = this.data || {};
      const anchor = this.anchor;
      this.close();
      if (onOpen) onOpen();
      else if (anchor) anchor.click();
    });
    document.addEventListener("pointerdown", (e) => {
      this.lastPointer = e.pointerType || "mouse";
      if (!this.node.hidden && !this.node.contains(e.target) && !(this.anchor && this.anchor.contains(e.target))) this.close();
    }, true);
    document.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && !this.node.hidden) {
        e.stopPropagation(); // Escape closes the card first, not the panel or the answer
        const anchor = this.anchor;
        this.close();
        if (anchor && this.node.contains(document.activeElement)) anchor.focus();
      }
    }, true);
    window.addEventListener("scroll", () => this.place(), true);
    window.addEventListener("resize", () => this.place());
    document.body.append(this.node);
  }

  /** Give `anchor` a card: `data` {title, heading, quote, onOpen} (onOpen: what "Open page" does). */
  attach(anchor, data) {
    anchor.removeAttribute("title"); // the card, not a native tooltip
    anchor.setAttribute("aria-haspopup", "dialog");
    anchor.addEventListener("pointerenter", (e) => { if (e.pointerType === "mouse") this.openSoon(anchor, data); });
    anchor.addEventListener("pointerleave", (e) => { if (e.pointerType === "mouse") this.closeSoon(); });
    anchor.addEventListener("focus", () => { if (this.lastPointer !== "touch") this.open(anchor, data); });
    anchor.addEventListener("blur", (e) => this.blurred(e));
    // Touch: the first tap shows the card; a tap on the same link with its card open follows it.
    anchor.addEventListener("click", (e) => {
      if (this.lastPointer !== "touch" || (this.anchor === anchor && !this.node.hidden)) return;
      e.preventDefault();
      e.stopImmediatePropagation();
      this.open(anchor, data);
    }, true);
  }

  openSoon(anchor, data) {
    clearTimeout(this.closeTimer);
    clearTimeout(this.openTimer);
    this.openTimer = setTimeout(() => this.open(anchor, data), this.anchor === anchor ? 0 : OPEN_DELAY);
  }

  closeSoon() {
    clearTimeout(this.openTimer);
    clearTimeout(this.closeTimer);
    this.closeTimer = setTimeout(() => this.close(), CLOSE_DELAY);
  }

  blurred(event) {
    const to = event.relatedTarget;
    if (to && (this.node.contains(to) || to === this.anchor)) return;
    this.closeSoon();
  }

  open(anchor, data) {
    clearTimeout(this.openTimer);
    clearTimeout(this.closeTimer);
    if (!document.contains(anchor)) return;
    if (this.anchor && this.anchor !== anchor) this.anchor.removeAttribute("aria-describedby");
    this.anchor = anchor;
    this.data = data;
    this.title.textContent = data.title || "";
    this.heading.textContent = data.heading || "";
    this.heading.hidden = !data.heading;
    this.quote.textContent = data.quote || "";
    this.quote.hidden = !data.quote;
    anchor.setAttribute("aria-describedby", "cite-card");
    anchor.setAttribute("aria-expanded", "true");
    this.node.hidden = false;
    this.place();
  }

  close() {
    clearTimeout(this.openTimer);
    clearTimeout(this.closeTimer);
    if (this.anchor) {
      this.anchor.removeAttribute("aria-describedby");
      this.anchor.setAttribute("aria-expanded", "false");
    }
    this.node.hidden = true;
    this.anchor = null;
    this.data = null;
  }

  /** Below the link when it fits, else above; never past the window's edges. */
  place() {
    if (this.node.hidden || !this.anchor) return;
    if (!document.contains(this.anchor)) { this.close(); return; }
    const link = this.anchor.getBoundingClientRect();
    const card = this.node.getBoundingClientRect();
    const width = window.innerWidth;
    const height = window.innerHeight;
    const left = Math.max(MARGIN, Math.min(link.left, width - card.width - MARGIN));
    const below = link.bottom + 6;
    const top = below + card.height + MARGIN <= height || link.top - card.height - 6 < MARGIN
      ? below : link.top - card.height - 6;
    this.node.style.left = `${Math.round(left)}px`;
    this.node.style.top = `${Math.round(Math.max(MARGIN, top))}px`;
  }
}

let card = null;

/** The one card of the page, made on first use. */
export function citationCard() {
  if (!card) card = new CitationCard();
  return card;
}
