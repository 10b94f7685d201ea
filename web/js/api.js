// The server's API: JSON routes and the chat event stream. The bearer token (when the server
// requires one) is kept in localStorage, which belongs to this origin (scheme, host and port),
// and leaves the page only as the Authorization header of these requests. Never in a cookie:
// cookies ignore ports, so every other server on 127.0.0.1 would receive it, and a page it
// serves could read it.

const TOKEN_KEY = "kaas-token";
const LEGACY_COOKIE = "kaas_token";

// Earlier versions mirrored the token in a cookie: delete it wherever it may still be.
if (document.cookie.split(";").some((c) => c.trim().startsWith(LEGACY_COOKIE + "="))) {
  for (const attrs of ["path=/", "path=/; SameSite=Strict", "path=/wiki"]) {
    document.cookie = `${LEGACY_COOKIE}=; max-age=0; expires=Thu, 01 Jan 1970 00:00:00 GMT; ${attrs}`;
  }
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let askForToken = async () => null; // set by the app: shows the token dialog
const MAX_TOKEN_PROMPTS = 5; // per request: a person who keeps typing wrong tokens gets an error in the end
export const NO_PROMPT = MAX_TOKEN_PROMPTS; // as `prompts`: a background request never opens the dialog

/** After a 401: ask for a token (saying the one sent was refused, when one was sent). The new
 *  token, or null when the person cancelled. */
function tokenAfter401(response) {
  const refused = Boolean(getToken());
  return askForToken({ refused });
}

export function onTokenNeeded(handler) { askForToken = handler; }

export function getToken() { return localStorage.getItem(TOKEN_KEY) || ""; }

export function setToken(token) {
  if (token) localStorage.setItem(TOKEN_KEY, token);
  else localStorage.removeItem(TOKEN_KEY);
}

function headers(extra = {}) {
  const h = { ...extra };
  const token = getToken();
  if (token) h.Authorization = `Bearer ${token}`;
  return h;
}

async function errorFrom(response) {
  let code = "http_" + response.status;
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body && body.error) ({ code, message } = body.error);
  } catch { /* not JSON */ }
  return new ApiError(response.status, code, message);
}

async function request(method, url, body, prompts = 0) {
  const init = { method, headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(url, init);
  if (response.status === 401 && prompts < MAX_TOKEN_PROMPTS) {
    const token = await tokenAfter401(response);
    if (token) return request(method, url, body, prompts + 1);
  }
  if (!response.ok) throw await errorFrom(response);
  return response.json();
}

export const pagePath = (path) => path.split("/").map(encodeURIComponent).join("/");

export const api = {
  index: () => request("GET", "/api/index"),
  page: (path) => request("GET", "/api/pages/" + pagePath(path)),
  save: (path, markdown, version) => request("PUT", "/api/pages/" + pagePath(path), { markdown, version }),
  // the editor's preview: the HTML this text would show as `path` (nothing is written)
  render: (path, markdown) => request("POST", "/api/render", { path, markdown }),
  // `pages`: every page the answer was made from (read for it or for the history it used), so the
  // saved copy can be read only by those who may read all of them.
  saveAnswer: (question, answer, citations, pages, mode) =>
    request("POST", "/api/answers", { question, answer, citations, pages, mode }),
  feedback: (record) => request("POST", "/api/feedback", record),
  sourcesInfo: () => request("GET", "/api/sources"),
  addUrls: (urls) => request("POST", "/api/sources/urls", { urls }),
  upload: (file, folder = "") => upload(file, folder),
};

/** One file as the request body (not a form: a cross-site form cannot send this content type). */
async function upload(file, folder, prompts = 0) {
  const params = new URLSearchParams({ name: file.name });
  if (folder) params.set("folder", folder);
  const response = await fetch("/api/sources/upload?" + params, {
    method: "POST", headers: headers({ "Content-Type": "application/octet-stream" }), body: file,
  });
  if (response.status === 401 && prompts < MAX_TOKEN_PROMPTS) {
    const token = await tokenAfter401(response);
    if (token) return upload(file, folder, prompts + 1);
  }
  if (!response.ok) throw await errorFrom(response);
  return response.json();
}

/**
 * POST /api/chat and call onEvent(name, data) for every Server-Sent Event, in order.
 * Aborting `signal` closes the connection, which stops the answer on the server.
 */
export function streamChat(body, onEvent, signal) {
  return streamEvents("POST", "/api/chat", body, onEvent, signal);
}

/**
 * Any of the server's event streams (chat, compile, wiki changes) with the token as a header
 * (EventSource cannot send one): `body` is sent as JSON unless undefined. A response that is not
 * an event stream and not OK throws an ApiError (a 409 "compile running", a 403, ...).
 */
export async function streamEvents(method, url, body, onEvent, signal, prompts = 0) {
  const init = { method, headers: headers({ Accept: "text/event-stream" }), signal };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(url, init);
  if (response.status === 401 && prompts < MAX_TOKEN_PROMPTS) {
    const token = await tokenAfter401(response);
    if (token) return streamEvents(method, url, body, onEvent, signal, prompts + 1);
  }
  // A request the server cannot read is answered 400 with an event stream holding the error
  // event: read it like any stream, so the message reaches the chat.
  const eventStream = (response.headers.get("Content-Type") || "").startsWith("text/event-stream");
  if (!response.body || (!response.ok && !eventStream)) throw await errorFrom(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      dispatch(block, onEvent);
    }
  }
  if (buffer.trim()) dispatch(buffer, onEvent);
}

function dispatch(block, onEvent) {
  let name = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue; // comments are keep-alive pings
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") name = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return;
  let parsed;
  try { parsed = JSON.parse(data.join("\n")); } catch { parsed = { text: data.join("\n") }; }
  onEvent(name, parsed);
}
