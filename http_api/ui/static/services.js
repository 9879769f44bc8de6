// #/services and #/services/{name} : services, their handlers, and each option's effective value and source.

import { admin, seg } from "./api.js";
import { add, duration, facts, h, link, notice, table } from "./dom.js";

const OPTIONS = {
  inactivityTimeout: ["Inactivity timeout", "ms"],
  abortTimeout: ["Abort timeout", "ms"],
  journalRetention: ["Journal retention", "ms"],
  idempotencyRetention: ["Idempotency retention", "ms"],
  workflowCompletionRetention: ["Workflow completion retention", "ms"],
  ingressPrivate: ["Private (no ingress)", ""],
  retryPolicyInitialInterval: ["Retry: initial interval", "ms"],
  retryPolicyMaxInterval: ["Retry: max interval", "ms"],
  retryPolicyMaxAttempts: ["Retry: max attempts", ""],
  retryPolicyExponentiationFactor: ["Retry: exponentiation factor", ""],
  retryPolicyOnMaxAttempts: ["Retry: on max attempts", ""],
  concurrencyLimit: ["Concurrency limit", "running"],
  handlerConcurrencyLimits: ["Concurrency limits per handler", "running"],
  rateLimit: ["Rate limit", "starts/s"],
  handlerRateLimits: ["Rate limits per handler", "starts/s"],
};

/** The service's concurrency and rate limits in one line ("none" if it has none). */
function limitsText(config) {
  const value = (option) => (config[option] || {}).value;
  const parts = [];
  if (value("concurrencyLimit")) parts.push(`at most ${value("concurrencyLimit")} running at once`);
  for (const [handler, n] of Object.entries(value("handlerConcurrencyLimits") || {})) parts.push(`${handler}: at most ${n} running`);
  if (value("rateLimit")) parts.push(`${value("rateLimit")} starts/s`);
  for (const [handler, r] of Object.entries(value("handlerRateLimits") || {})) parts.push(`${handler}: ${r} starts/s`);
  return parts.length ? parts.join("; ") : "none";
}

const TYPES = { Service: "service", VirtualObject: "virtual object", Workflow: "workflow" };

/** The service list. */
export async function render(root) {
  const { services } = await admin("services");
  add(root, h("h1", {}, "Services"));
  if (!services.length) {
    add(root, notice("info", "No services yet: register a deployment on the ", link("#/deployments", "Deployments"), " page."));
    return;
  }
  const rows = services
    .sort((a, b) => a.name.localeCompare(b.name))
    .map((s) =>
      h(
        "tr",
        { "data-testid": "service-row" },
        h("td", {}, link(`#/services/${seg(s.name)}`, s.name)),
        h("td", {}, TYPES[s.ty] || s.ty),
        h("td", {}, s.handlers.map((handler) => h("span", { class: "chip" }, handler.name))),
        h("td", { class: "mono" }, s.deployment_id),
        h("td", {}, s.public ? "public" : "private"),
        h("td", { class: "num" }, s.revision),
      ),
    );
  add(root, table(["Name", "Type", "Handlers", "Deployment", "Ingress", "Revision"], rows, { class: "list" }));
}

/** One service: its handlers (with a link to try each) and its effective configuration. */
export async function renderOne(root, { args: [name] }) {
  const s = await admin(`services/${seg(name)}`);
  const keyed = s.ty !== "Service";
  add(root, 
    h("p", { class: "crumbs" }, link("#/services", "Services"), " / ", s.name),
    h("div", { class: "title-row" }, h("h1", {}, s.name), h("span", { class: "badge" }, TYPES[s.ty] || s.ty)),
    s.documentation ? h("p", {}, s.documentation) : null,
    facts([
      ["Deployment", link("#/deployments", s.deployment_id, { class: "mono" })],
      ["Revision", String(s.revision)],
      ["Ingress", s.public ? "public" : "private: only other services may call it"],
      ["State", keyed ? link(`#/state?service=${seg(s.name)}`, "view state by key") : null],
      ["Invocations", link(`#/invocations?service=${seg(s.name)}`, "list this service's invocations")],
      ["Limits", h("span", { "data-testid": "limits" }, limitsText(s.config || {}))],
    ]),
    h("h2", {}, "Handlers"),
    table(
      ["Handler", "Type", "Input", "Output", "Documentation", ""],
      s.handlers.map((handler) =>
        h(
          "tr",
          {},
          h("td", { class: "mono" }, handler.name),
          h("td", {}, (handler.ty || "").toLowerCase()),
          h("td", {}, handler.input_description),
          h("td", {}, handler.output_description),
          h("td", { class: "muted" }, handler.documentation || ""),
          h("td", {}, link(`#/playground?service=${seg(s.name)}&handler=${seg(handler.name)}`, "Invoke…")),
        ),
      ),
      { class: "list" },
    ),
    h("h2", {}, "Configuration"),
    h("p", { class: "muted" }, "Effective values and where each comes from: handler code > service code > admin override > torpor.toml > environment > built-in."),
    table(
      ["Option", "Value", "Source", "Set by handlers"],
      Object.entries(s.config || {}).map(([option, { value, source, handlers }]) => {
        const [label, unit] = OPTIONS[option] || [option, ""];
        return h(
          "tr",
          { "data-option": option },
          h("td", {}, label, h("div", { class: "muted mono small" }, option)),
          h("td", {}, show(value, unit)),
          h("td", {}, h("span", { class: `source ${source.includes("code") ? "code" : source === "built-in" ? "builtin" : "override"}` }, source)),
          h("td", {}, handlers ? Object.entries(handlers).map(([handler, v]) => h("div", {}, h("span", { class: "mono" }, handler), ": ", show(v, unit))) : ""),
        );
      }),
      { class: "list config" },
    ),
  );
}

function show(value, unit) {
  if (unit === "ms" && typeof value === "number") return h("span", { title: `${value} ms` }, duration(value));
  if (value && typeof value === "object") return Object.entries(value).map(([k, v]) => `${k}: ${v} ${unit}`).join(", ");
  if (unit && unit !== "ms") return `${value} ${unit}`;
  return String(value);
}
