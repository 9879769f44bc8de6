// #/invocations?status=&completion=&service=&key=&limit=&page_token= : filters, paging, a refreshing table.

import { admin } from "./api.js";
import { add, firstLine, h, link, notice, relative, replace, statusBadge, table, time, waits } from "./dom.js";

export const STATUSES = ["pending", "scheduled", "ready", "running", "backing-off", "suspended", "paused", "completed"];
export const COMPLETIONS = ["succeeded", "failed", "cancelled", "killed"];

/** The invocation list page. */
export async function render(root, { query }, context) {
  const filters = Object.fromEntries(["status", "completion", "service", "key", "limit", "page_token"].map((n) => [n, query.get(n) || ""]));
  const { services } = await admin("services");
  add(root, h("h1", {}, "Invocations ", h("span", { class: "muted small" }, "newest first by creation time")), filterForm(filters, services));
  const body = h("div");
  add(root, body);

  let last = "";
  const refresh = async () => {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(filters)) if (value) params.set(name, value);
    params.set("waiting_for", "true"); // what each suspended one waits for (the admin API reads its journal)
    const answer = await admin(`invocations?${params}`);
    const fingerprint = JSON.stringify(answer);
    if (fingerprint !== last) {
      last = fingerprint;
      replace(body, listing(answer, filters));
    }
  };
  try {
    await refresh();
  } catch (error) {
    replace(body, notice("error", error.message));
    return;
  }
  if (!filters.page_token) context.every(2000, refresh); // the first page follows new invocations
}

function filterForm(filters, services) {
  const select = (name, options, all) =>
    h(
      "select",
      { name, "aria-label": name },
      h("option", { value: "" }, all),
      options.map((value) => h("option", { value, selected: value === filters[name] }, value)),
    );
  const form = h(
    "form",
    { class: "filters", onsubmit: (event) => apply(event, form) },
    h("label", {}, "Status ", select("status", STATUSES, "any status")),
    h("label", {}, "Completion ", select("completion", COMPLETIONS, "any completion")),
    h("label", {}, "Service ", select("service", services.map((s) => s.name).sort(), "any service")),
    h("label", {}, "Key ", h("input", { name: "key", value: filters.key, placeholder: "object or workflow key" })),
    h("label", {}, "Per page ", select("limit", ["20", "50", "100", "500"], "100")),
    h("button", { type: "submit" }, "Apply"),
    h("a", { href: "#/invocations", class: "button secondary" }, "Clear"),
  );
  return form;
}

function apply(event, form) {
  event.preventDefault();
  const params = new URLSearchParams();
  for (const [name, value] of new FormData(form)) if (value) params.set(name, value);
  const qs = params.toString();
  location.hash = `#/invocations${qs ? "?" + qs : ""}`;
}

function listing(answer, filters) {
  const rows = answer.invocations.map((inv) =>
    h(
      "tr",
      { "data-testid": "invocation-row", "data-id": inv.id, "data-status": inv.status },
      h("td", {}, link(`#/invocations/${encodeURIComponent(inv.id)}`, inv.id, { class: "mono" })),
      h("td", {}, inv.target),
      h("td", {}, statusBadge(inv)),
      h("td", {}, time(inv.created_at)),
      h("td", { title: inv.modified_at }, relative(inv.modified_at)),
      h("td", { class: "num" }, inv.attempts),
      h("td", { class: "muted" }, hint(inv)),
    ),
  );
  const paging = h("div", { class: "paging" });
  if (filters.page_token) paging.append(link(pageHash(filters, ""), "⟵ First page", { class: "button secondary" }));
  if (answer.next_page_token) paging.append(link(pageHash(filters, answer.next_page_token), "Older ⟶", { class: "button secondary" }));
  if (!rows.length) return [notice("info", "No invocations match. Invoke a handler in the ", link("#/playground", "Playground"), "."), paging];
  return [
    table(["Id", "Target", "Status", "Created", "Modified", "Attempts", ""], rows, { class: "list", "data-testid": "invocations" }),
    paging,
  ];
}

function hint(inv) {
  if (inv.status === "suspended" && inv.waiting_for?.length) return waits(inv.waiting_for);
  if (inv.status === "suspended" && inv.wake_up_at) return `wakes up ${relative(inv.wake_up_at)}`;
  if (inv.status === "pending" && inv.waiting_for_key_holder) return ["waits for the key's holder ", link(`#/invocations/${encodeURIComponent(inv.waiting_for_key_holder)}`, inv.waiting_for_key_holder, { class: "mono" })];
  if (inv.status === "scheduled" && inv.execution_time) return `starts ${relative(inv.execution_time)}`;
  if (inv.status === "backing-off" && inv.next_retry_at) return `retries ${relative(inv.next_retry_at)}`;
  if (inv.last_failure && inv.status !== "completed") return h("span", { title: inv.last_failure.message || "" }, firstLine(inv.last_failure.message));
  if (inv.completion_failure) return h("span", { title: inv.completion_failure.message || "" }, firstLine(inv.completion_failure.message));
  return "";
}

function pageHash(filters, token) {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries({ ...filters, page_token: token })) if (value) params.set(name, value);
  return `#/invocations?${params}`;
}
