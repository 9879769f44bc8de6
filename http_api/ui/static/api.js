// The admin API (this page's origin, one level above /ui/) and the ingress (its URL from config.json).

/** The admin API's base URL: the UI lives at `{admin}/ui/`, so relative paths hold behind a prefix too. */
export const adminBase = new URL("../", location.href);

const INGRESS_KEY = "torpor.ingress_url";
let configured = null;

/** An error answer of the admin API: `status` and the API's `message`. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** Encode one path segment (service names, keys, ids). */
export const seg = encodeURIComponent;

/** Call the admin API: `admin("invocations?status=suspended")`; JSON in and out; throws `ApiError`. */
export async function admin(path, { method = "GET", body } = {}) {
  const init = { method, headers: {} };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(new URL(path, adminBase), init);
  const text = await response.text();
  let data = text;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    // not JSON: keep the text
  }
  if (!response.ok) throw new ApiError(response.status, data?.message ?? (text || response.statusText));
  return data;
}

/** The ingress URL: the one saved in this browser, else the admin's `/ui/config.json`, else "". */
export async function ingressUrl() {
  const saved = localStorage.getItem(INGRESS_KEY);
  if (saved) return saved;
  if (configured === null) {
    try {
      configured = (await admin("ui/config.json")).ingress_url || "";
    } catch {
      configured = "";
    }
  }
  return configured;
}

/** Remember an ingress URL in this browser ("" forgets it). */
export function saveIngressUrl(url) {
  if (url) localStorage.setItem(INGRESS_KEY, url.replace(/\/+$/, ""));
  else localStorage.removeItem(INGRESS_KEY);
}

/**
 * A request to the ingress: `{status, id, body, ms}` (`body` parsed as JSON when it is JSON,
 * `id` the `x-restate-id` header). Throws when there is no ingress URL or it does not answer.
 */
export async function ingress(path, { method = "POST", body, headers = {} } = {}) {
  const base = await ingressUrl();
  if (!base) throw new Error("no ingress URL: set one in the Playground");
  const started = performance.now();
  const response = await fetch(base.replace(/\/+$/, "") + path, { method, headers, body });
  const text = await response.text();
  let parsed = text;
  try {
    parsed = text ? JSON.parse(text) : "";
  } catch {
    // not JSON: keep the text
  }
  return {
    status: response.status,
    id: response.headers.get("x-restate-id"),
    body: parsed,
    ms: performance.now() - started,
  };
}

/** Resolve (`value`, any JSON) or reject (`reason`, text) an awakeable through the ingress. */
export function completeAwakeable(id, { value, reason }) {
  const path = `/restate/awakeables/${seg(id)}/${reason !== undefined ? "reject" : "resolve"}`;
  if (reason !== undefined) return ingress(path, { body: reason, headers: { "content-type": "text/plain" } });
  return ingress(path, { body: JSON.stringify(value), headers: { "content-type": "application/json" } });
}
