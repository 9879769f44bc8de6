// #/state?service=&key= : the state of one virtual object or workflow key.

import { admin, seg } from "./api.js";
import { add, h, link, notice, pretty, replace, table } from "./dom.js";

/** The state viewer: pick a keyed service and a key (recent keys are suggested). */
export async function render(root, { query }, context) {
  const { services } = await admin("services");
  const keyed = services.filter((s) => s.ty !== "Service").map((s) => s.name).sort();
  const service = query.get("service") || keyed[0] || "";
  const key = query.get("key") || "";
  add(root, h("h1", {}, "Object and workflow state"));
  if (!keyed.length) {
    add(root, notice("info", "No virtual objects or workflows are registered."));
    return;
  }
  const keys = h("datalist", { id: "known-keys" });
  const keyList = h("div", { class: "keys", "data-testid": "known-keys" });
  const serviceSelect = h("select", { name: "service", "aria-label": "service" }, keyed.map((name) => h("option", { value: name, selected: name === service }, name)));
  const keyInput = h("input", { name: "key", value: key, list: "known-keys", placeholder: "key", required: true });
  const suggest = async () => {
    const { invocations } = await admin(`invocations?service=${seg(serviceSelect.value)}&limit=200`);
    const seen = [...new Set(invocations.map((i) => i.target_service_key).filter((k) => k !== null && k !== undefined))].sort();
    replace(keys, seen.map((k) => h("option", { value: k })));
    replace(
      keyList,
      seen.length
        ? [h("span", { class: "muted" }, `Keys of ${serviceSelect.value} in its last 200 invocations: `), ...seen.map((k) => link(`#/state?service=${seg(serviceSelect.value)}&key=${seg(k)}`, k, { class: "mono key", "data-testid": "key-link" }))]
        : h("span", { class: "muted" }, `No invocations of ${serviceSelect.value} yet.`),
    );
  };
  serviceSelect.addEventListener("change", suggest);
  const show = (event) => {
    event.preventDefault();
    location.hash = `#/state?service=${seg(serviceSelect.value)}&key=${seg(keyInput.value)}`;
  };
  const flash = h("div", { class: "flash" });
  const body = h("div");
  add(root, 
    h("form", { class: "filters", onsubmit: show }, h("label", {}, "Service ", serviceSelect), h("label", {}, "Key ", keyInput), keys, h("button", { type: "submit" }, "Show")),
    keyList,
    flash,
    body,
  );
  suggest().catch(() => {});
  if (!key) return;

  let last = "";
  const load = async () => {
    const answer = await admin(`services/${seg(service)}/state/${seg(key)}`);
    const fingerprint = JSON.stringify(answer);
    if (fingerprint === last) return;
    last = fingerprint;
    const entries = Object.entries(answer.state);
    replace(
      body,
      h("h2", {}, `${service} / ${key}`),
      entries.length
        ? table(["Name", "Value"], entries.map(([name, value]) => h("tr", {}, h("td", { class: "mono" }, name), h("td", {}, h("pre", { class: "value" }, pretty(value))))), { class: "list", "data-testid": "state" })
        : h("p", { class: "muted" }, "No state for this key."),
      entries.length ? h("button", { class: "danger", onclick: clear }, "Clear state") : null,
    );
  };
  const clear = async () => {
    if (!confirm(`Delete all state of ${service} / ${key}?`)) return;
    try {
      await admin(`services/${seg(service)}/state/${seg(key)}`, { method: "DELETE" });
      replace(flash, notice("info", "State cleared."));
      await load();
    } catch (error) {
      replace(flash, notice("error", `Could not clear: ${error.message}`));
    }
  };
  try {
    await load();
  } catch (error) {
    replace(body, notice("error", error.message));
    return;
  }
  context.every(2000, load);
}
