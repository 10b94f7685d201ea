// Tiny DOM helpers: build elements from plain values. Text always goes in as text nodes.

/** h("a.cls", {href: "/x", onclick: fn}, "text", childNode, [more]) */
export function h(spec, attrs = {}, ...children) {
  const [tag, ...classes] = spec.split(".");
  const node = document.createElement(tag || "div");
  if (classes.length) node.className = classes.join(" ");
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "class") node.className += (node.className ? " " : "") + value;
    else if (value === true) node.setAttribute(key, "");
    else node.setAttribute(key, String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export const $ = (selector, root = document) => root.querySelector(selector);

export function clear(node) {
  while (node.firstChild) node.firstChild.remove();
  return node;
}

/** Put server-sanitized article HTML (nh3 on the server) into `node`. */
export function setSanitizedHtml(node, html) {
  const template = document.createElement("template");
  template.innerHTML = html;
  clear(node).append(template.content);
}

export function formatNumber(n) { return new Intl.NumberFormat().format(n); }

export function formatDuration(ms) {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}
