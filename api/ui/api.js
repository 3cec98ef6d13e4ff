// The session (a bearer token in sessionStorage) and the API client every page uses.

const KEY = "loom.token";
const WHO = "loom.whoami";

export class ApiError extends Error {
  constructor(status, problem) {
    const detail = problem && typeof problem === "object" ? (problem.detail || problem.title) : String(problem || "");
    super(`${status}: ${detail || "request failed"}`);
    this.status = status;
    this.problem = problem && typeof problem === "object" ? problem : { detail: problem };
  }
}

export function token() {
  return sessionStorage.getItem(KEY);
}

export function whoami() {
  try {
    return JSON.parse(sessionStorage.getItem(WHO) || "null");
  } catch {
    return null;
  }
}

export function canOperate() {
  const me = whoami();
  return !!me && (me.role === "operator" || me.role === "admin");
}

/** Try a token: on success the session keeps it (and whose it is). */
export async function login(value) {
  sessionStorage.setItem(KEY, value);
  try {
    const me = await api("/v1/whoami");
    sessionStorage.setItem(WHO, JSON.stringify(me));
    return me;
  } catch (e) {
    sessionStorage.removeItem(KEY);
    throw e;
  }
}

/** Forget the token; the app shows the login form again (with ``note``). */
export function logout(note = "") {
  sessionStorage.removeItem(KEY);
  sessionStorage.removeItem(WHO);
  window.dispatchEvent(new CustomEvent("loom:logout", { detail: note }));
}

/** Call the API with the session's token; JSON in and out; throws ApiError on a non-2xx answer. */
export async function api(path, { method = "GET", body, headers = {} } = {}) {
  const opts = { method, headers: { Accept: "application/json", ...headers } };
  const t = token();
  if (t) opts.headers.Authorization = `Bearer ${t}`;
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  const ct = r.headers.get("content-type") || "";
  const data = ct.includes("json") ? await r.json().catch(() => null) : await r.text();
  if (r.status === 401 && t && whoami()) {
    logout("the token was refused (unknown, expired or revoked): log in again");
  }
  if (!r.ok) throw new ApiError(r.status, data);
  return data;
}

/** GET that answers null instead of throwing when the thing is absent (404, 409, 503...). */
export async function maybe(path) {
  try {
    return await api(path);
  } catch (e) {
    if (e instanceof ApiError && [404, 405, 409, 501, 503].includes(e.status)) return null;
    throw e;
  }
}

/** Follow the server-sent events (GET /v1/events) with the session's token, calling ``onEvent(kind, data)``
 * for each; EventSource cannot send a bearer token, so the stream is read with fetch. Resumes after a broken
 * stream with Last-Event-ID. Returns a function that stops it. */
export function followEvents(onEvent) {
  let stopped = false;
  let last = null;
  const ctrl = new AbortController();
  (async () => {
    while (!stopped) {
      try {
        const headers = { Accept: "text/event-stream" };
        const t = token();
        if (t) headers.Authorization = `Bearer ${t}`;
        if (last !== null) headers["Last-Event-ID"] = last;
        const r = await fetch("/v1/events", { headers, signal: ctrl.signal });
        if (!r.ok || !r.body) throw new Error(`events: ${r.status}`);
        const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let cut;
          while ((cut = buf.indexOf("\n\n")) >= 0) {
            const block = buf.slice(0, cut);
            buf = buf.slice(cut + 2);
            let kind = null; let data = ""; let id = null;
            for (const line of block.split("\n")) {
              if (line.startsWith("event: ")) kind = line.slice(7);
              else if (line.startsWith("data: ")) data += line.slice(6);
              else if (line.startsWith("id: ")) id = line.slice(4);
            }
            if (id !== null) last = id;
            if (kind) onEvent(kind, data ? JSON.parse(data) : {});
          }
        }
      } catch (e) {
        if (stopped) return;
      }
      await new Promise((res) => setTimeout(res, 1000));
    }
  })();
  return () => { stopped = true; ctrl.abort(); };
}
