// #/state?service=&key= : the state of one virtual object or workflow key, and an editor for it.

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
  const editor = h("div");
  let editing = false; // the 2 s refresh leaves the table alone while the editor is open
  add(root, 
    h("form", { class: "filters", onsubmit: show }, h("label", {}, "Service ", serviceSelect), h("label", {}, "Key ", keyInput), keys, h("button", { type: "submit" }, "Show")),
    keyList,
    flash,
    body,
    editor,
  );
  suggest().catch(() => {});
  if (!key) return;

  let last = "";
  const load = async () => {
    if (editing) return;
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
      h(
        "div",
        { class: "row" },
        h("button", { class: "secondary", onclick: edit }, entries.length ? "Edit state" : "Add state"),
        entries.length ? h("button", { class: "danger", onclick: clear }, "Clear state") : null,
      ),
    );
  };
  const close = async () => {
    editing = false;
    replace(editor);
    last = "";
    await load();
  };
  const edit = async () => {
    let answer;
    try {
      answer = await admin(`services/${seg(service)}/state/${seg(key)}?raw=true`);
    } catch (error) {
      replace(flash, notice("error", `Could not read the state: ${error.message}`));
      return;
    }
    editing = true;
    replace(body);
    replace(flash);
    const rows = h("tbody");
    for (const [name, encoded] of Object.entries(answer.raw)) rows.append(editRow(name, encoded));
    const save = async () => {
      const newState = {};
      for (const row of rows.querySelectorAll("tr")) {
        const name = row.querySelector("input[name=name]").value;
        if (row.querySelector("input[name=remove]").checked) continue;
        if (!name) {
          replace(flash, notice("error", "Every entry needs a name (or tick Remove)."));
          return;
        }
        const value = row.querySelector("textarea");
        if (value.disabled) {
          newState[name] = [...fromBase64(value.dataset.raw)]; // a binary value, kept as it is
          continue;
        }
        try {
          JSON.parse(value.value);
        } catch {
          replace(flash, notice("error", `The value of “${name}” is not JSON; the SDK's default serde reads JSON (a string needs its quotes).`));
          return;
        }
        newState[name] = [...new TextEncoder().encode(value.value)];
      }
      try {
        await admin(`services/${seg(service)}/state`, { method: "POST", body: { object_key: key, new_state: newState, version: answer.version } });
      } catch (error) {
        replace(flash, notice("error", `Could not save: ${error.message}`));
        return;
      }
      replace(flash, notice("info", "State saved."));
      await close();
    };
    replace(
      editor,
      h("h2", {}, `Edit ${service} / ${key}`),
      h(
        "p",
        { class: "muted" },
        "Values are JSON, stored as typed (UTF-8). Saving replaces the whole state of this key at once, unless it changed since it was read (then reload and edit again); it waits for no invocation: one holding the key makes it fail.",
      ),
      h("table", { class: "editor", "data-testid": "state-editor" }, h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", {}, "Value"), h("th", {}, "Remove"))), rows),
      h(
        "div",
        { class: "row" },
        h("button", { class: "secondary", onclick: () => rows.append(editRow("", null)) }, "Add entry"),
        h("button", { onclick: save }, "Save"),
        h("button", { class: "secondary", onclick: close }, "Cancel"),
      ),
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

/** Bytes of a base64 string. */
function fromBase64(text) {
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}

/** One editable state entry: its name (fixed for a stored entry), its value as text (a value that is
 * not UTF-8 is shown as base64 and kept unchanged), and a Remove box. `encoded`: base64, or null for a new entry. */
function editRow(name, encoded) {
  let text = "";
  let binary = false;
  if (encoded !== null) {
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(fromBase64(encoded));
    } catch {
      binary = true;
      text = `base64:${encoded}`;
    }
  }
  const value = h("textarea", { name: "value", rows: Math.min(8, Math.max(1, text.split("\n").length)), "aria-label": `value of ${name || "the new entry"}`, disabled: binary, "data-raw": binary ? encoded : null });
  value.value = text;
  return h(
    "tr",
    { "data-name": name },
    h("td", {}, h("input", { name: "name", value: name, readonly: encoded !== null, "aria-label": "name", placeholder: "name" })),
    h("td", {}, value, binary ? h("div", { class: "muted small" }, "not UTF-8: kept as it is") : null),
    h("td", {}, h("input", { type: "checkbox", name: "remove", "aria-label": `remove ${name}` })),
  );
}
