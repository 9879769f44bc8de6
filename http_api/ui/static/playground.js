// #/playground?service=&handler=&key= : call or send a handler through the ingress; resolve an awakeable.

import { admin, completeAwakeable, ingress, ingressUrl, saveIngressUrl, seg } from "./api.js";
import { add, duration, h, link, notice, pretty, replace } from "./dom.js";

/** The playground page. */
export async function render(root, { query }) {
  const { services } = await admin("services");
  services.sort((a, b) => a.name.localeCompare(b.name));
  const byName = Object.fromEntries(services.map((s) => [s.name, s]));

  const base = h("input", { name: "ingress", value: await ingressUrl(), placeholder: "http://localhost:8080" });
  base.addEventListener("change", () => saveIngressUrl(base.value.trim()));

  const service = h("select", { name: "service", "aria-label": "service" }, services.map((s) => h("option", { value: s.name }, s.name)));
  const handler = h("select", { name: "handler", "aria-label": "handler" });
  const key = h("input", { name: "key", placeholder: "object or workflow key" });
  const keyLabel = h("label", {}, "Key ", key);
  const input = h("textarea", { name: "body", rows: 5, placeholder: "JSON input, e.g. \"Ann\"", spellcheck: "false" });
  const mode = h("select", { name: "mode", "aria-label": "mode" }, h("option", { value: "call" }, "call (wait for the result)"), h("option", { value: "send" }, "send (one-way)"));
  const delay = h("input", { name: "delay", placeholder: "e.g. 10s", size: 8 });
  const idempotency = h("input", { name: "idempotency", placeholder: "optional" });
  const output = h("div", { "data-testid": "playground-result" });

  const syncHandlers = () => {
    const s = byName[service.value];
    replace(handler, (s?.handlers || []).map((x) => h("option", { value: x.name }, x.name)));
    keyLabel.hidden = !s || s.ty === "Service";
    key.required = !keyLabel.hidden; // a virtual object or workflow is called on one key
  };
  const syncInput = () => {
    const x = byName[service.value]?.handlers.find((y) => y.name === handler.value);
    input.disabled = !x || x.input_description === "none";
    input.placeholder = input.disabled ? "this handler takes no input" : `input (${x.input_description})`;
  };
  service.addEventListener("change", () => (syncHandlers(), syncInput()));
  handler.addEventListener("change", syncInput);
  if (query.get("service") && byName[query.get("service")]) service.value = query.get("service");
  syncHandlers();
  if (query.get("handler")) handler.value = query.get("handler");
  if (query.get("key")) key.value = query.get("key");
  syncInput();

  const invoke = async (event) => {
    event.preventDefault();
    saveIngressUrl(base.value.trim());
    const s = byName[service.value];
    const target = [s.name, ...(s.ty === "Service" ? [] : [key.value]), handler.value].map(seg).join("/");
    let path = `/restate/${mode.value}/${target}`;
    if (mode.value === "send" && delay.value.trim()) path += `?delay=${encodeURIComponent(delay.value.trim())}`;
    const headers = {};
    if (!input.disabled && input.value.trim()) headers["content-type"] = "application/json";
    if (idempotency.value) headers["idempotency-key"] = idempotency.value;
    replace(output, h("p", { class: "muted" }, `POST ${path} …`));
    try {
      const answer = await ingress(path, { body: input.disabled ? undefined : input.value.trim() || undefined, headers });
      const id = answer.id || answer.body?.invocationId;
      replace(
        output,
        h(
          "div",
          { class: `result ${answer.status < 300 ? "ok" : "bad"}` },
          h("div", { class: "result-head" }, h("strong", { "data-testid": "result-status" }, `HTTP ${answer.status}`), h("span", { class: "muted" }, ` in ${duration(answer.ms)}`), id ? [" · ", link(`#/invocations/${seg(id)}`, id, { class: "mono" })] : null),
          h("pre", { class: "value", "data-testid": "result-body" }, pretty(answer.body)),
        ),
      );
    } catch (error) {
      replace(output, notice("error", `The ingress did not answer: ${error.message}. Check the ingress URL.`));
    }
  };

  const awakeableId = h("input", { name: "awakeable", placeholder: "sign_1…" });
  const awakeableValue = h("input", { name: "awakeable_value", value: '"done"', placeholder: "value (JSON) or reason" });
  const awakeableOut = h("div");
  const complete = async (how) => {
    saveIngressUrl(base.value.trim());
    try {
      const answer = how === "resolve" ? await completeAwakeable(awakeableId.value.trim(), { value: JSON.parse(awakeableValue.value) }) : await completeAwakeable(awakeableId.value.trim(), { reason: awakeableValue.value });
      replace(awakeableOut, notice(answer.status < 300 ? "info" : "error", `HTTP ${answer.status} ${answer.status < 300 ? (how === "resolve" ? "resolved" : "rejected") : pretty(answer.body)}`));
    } catch (error) {
      replace(awakeableOut, notice("error", error.message));
    }
  };

  add(root, 
    h("h1", {}, "Playground"),
    h("form", { class: "filters", onsubmit: (e) => e.preventDefault() }, h("label", { class: "grow" }, "Ingress URL ", base)),
    services.length ? null : notice("info", "No services yet: register a deployment first."),
    h(
      "form",
      { class: "card playground", onsubmit: invoke },
      h("div", { class: "row" }, h("label", {}, "Service ", service), h("label", {}, "Handler ", handler), keyLabel),
      h("label", { class: "block" }, "Input", input),
      h("div", { class: "row" }, h("label", {}, "Mode ", mode), h("label", {}, "Delay (send) ", delay), h("label", {}, "Idempotency key ", idempotency), h("button", { type: "submit" }, "Invoke")),
    ),
    output,
    h("h2", {}, "Complete an awakeable"),
    h(
      "form",
      { class: "card", onsubmit: (e) => (e.preventDefault(), complete("resolve")) },
      h("div", { class: "row" }, h("label", { class: "grow" }, "Awakeable id ", awakeableId), h("label", {}, "Value ", awakeableValue)),
      h("div", { class: "row" }, h("button", { type: "submit" }, "Resolve"), h("button", { type: "button", class: "secondary", onclick: () => complete("reject") }, "Reject")),
    ),
    awakeableOut,
  );
}
