// Small DOM and formatting helpers. Values from the API are always set as text, never as HTML.

/** Build an element: h("a", {href: "#/x", class: "link", onclick: fn}, "text", child, [more]). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") el.addEventListener(name.slice(2), value);
    else if (name === "value") el.value = value;
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

/** Append children to an element, skipping null, undefined and false (unlike `Element.append`). */
export function add(el, ...children) {
  append(el, children);
  return el;
}

/** Replace an element's children. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

/** `#/invocations/inv_1…`-style link. */
export function link(hash, text, attrs = {}) {
  return h("a", { href: hash, ...attrs }, text);
}

/** An RFC 3339 time as the API gives it, with the local time as a tooltip; "—" if absent. */
export function time(iso) {
  if (!iso) return h("span", { class: "muted" }, "—");
  const date = new Date(iso);
  return h("time", { datetime: iso, title: isNaN(date) ? iso : date.toString() }, iso);
}

/** "in 59 s", "3 min ago" for an RFC 3339 time. */
export function relative(iso, now = Date.now()) {
  if (!iso) return "";
  const ms = new Date(iso).getTime() - now;
  if (isNaN(ms)) return "";
  const text = duration(Math.abs(ms));
  return ms >= 0 ? `in ${text}` : `${text} ago`;
}

/** 1500 → "1.5 s", 90000 → "1 min 30 s", 3600000 → "1 h". */
export function duration(ms) {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;
  const units = [["d", 86_400_000], ["h", 3_600_000], ["min", 60_000], ["s", 1000]];
  const parts = [];
  let rest = Math.round(ms / 1000) * 1000;
  for (const [unit, size] of units) {
    if (rest >= size) {
      parts.push(`${Math.floor(rest / size)} ${unit}`);
      rest %= size;
    }
    if (parts.length === 2) break;
  }
  return parts.join(" ");
}

/** A value as readable text: strings as they are, anything else as indented JSON. */
export function pretty(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

/** A status badge; a completed invocation shows how it ended unless it succeeded: "failed 500",
 * "cancelled", "killed" (its `completion_kind`). */
export function statusBadge(invocation) {
  const kind = invocation.status === "completed" ? invocation.completion_kind || (invocation.completion_result === "failure" ? "failed" : "succeeded") : "";
  const ended = kind && kind !== "succeeded";
  const label = kind === "failed" ? `failed ${invocation.completion_failure?.code ?? ""}`.trim() : ended ? kind : invocation.status;
  return h(
    "span",
    { class: `badge status-${ended ? "failed" : invocation.status}`, "data-status": invocation.status, "data-completion": kind || null },
    label,
  );
}

/** A notice box: kind is "info", "warn" or "error". */
export function notice(kind, ...children) {
  return h("div", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status" }, ...children);
}

/** A definition list from [label, value] pairs, skipping empty values. */
export function facts(pairs) {
  const dl = h("dl", { class: "facts" });
  for (const [label, value] of pairs) {
    if (value === undefined || value === null || value === "" || value === false) continue;
    dl.append(h("dt", {}, label), h("dd", {}, value));
  }
  return dl;
}

/** A table with a header row and rows of cells. */
export function table(headers, rows, attrs = {}) {
  return h(
    "table",
    attrs,
    h("thead", {}, h("tr", {}, headers.map((title) => h("th", {}, title)))),
    h("tbody", {}, rows),
  );
}

/** A failure's message with its line breaks kept: a bounded, scrollable <pre>. `failure` is
 * `{message, ...}` as the admin API shows failures (a last failure's stack trace is shown beside it). */
export function errorText(failure) {
  return h("pre", { class: "error-text", "data-testid": "error-text" }, failure?.message ?? "");
}

/** The first line of a (multi-line) message, with "…" when lines were left out. */
export function firstLine(message) {
  const text = String(message ?? "");
  const cut = text.indexOf("\n");
  return cut < 0 ? text : `${text.slice(0, cut)} …`;
}

/**
 * What a suspended invocation waits for, in words, for the list: the admin API's `waiting_for` items
 * (`{kind: "sleep" | "call" | "awakeable" | "promise" | "run" | "command" | "completion" | "signal", ...}`)
 * as inline nodes separated by commas; a call links to its callee. Times as "wakes up in 59 s" and
 * long ids cut, each whole in its tooltip. Null when there is nothing.
 */
export function waits(items) {
  const short = (id) => (id.length > 16 ? `${id.slice(0, 14)}…` : id);
  if (!items || !items.length) return null;
  const words = items.map((w) => {
    const at = w.index !== undefined ? ` #${w.index}` : "";
    switch (w.kind) {
      case "sleep":
        return h("span", { "data-wait": "sleep", title: w.until }, `Sleep${at}: wakes up ${relative(w.until)}`);
      case "call":
        return h("span", { "data-wait": "call" }, `Call${at} to ${w.target}`, w.invocation_id ? [" ", link(`#/invocations/${encodeURIComponent(w.invocation_id)}`, short(w.invocation_id), { class: "mono", title: w.invocation_id, "data-testid": "waits-callee" })] : null);
      case "awakeable":
        return h("span", { "data-wait": "awakeable", title: w.id }, "awakeable ", h("code", {}, short(w.id)));
      case "promise":
        return h("span", { "data-wait": "promise" }, `promise “${w.name}”`);
      case "run":
        return h("span", { "data-wait": "run" }, `Run${at}${w.name ? ` “${w.name}”` : ""}`);
      case "command":
        return h("span", { "data-wait": "command" }, `${w.type}${at}`);
      case "signal":
        return h("span", { "data-wait": "signal" }, w.name !== undefined ? `signal “${w.name}”` : `signal ${w.signal_id}`);
      default:
        return h("span", { "data-wait": w.kind }, `completion ${w.completion_id ?? "?"}`);
    }
  });
  return h("span", { class: "waits", "data-testid": "waiting-for" }, words.flatMap((node, i) => (i ? [", ", node] : [node])));
}
