// #/deployments : registered deployments, register one by URI, remove one.

import { admin, seg } from "./api.js";
import { add, h, link, notice, replace, table, time } from "./dom.js";

/** The deployments page. */
export async function render(root) {
  const flash = h("div", { class: "flash" });
  const list = h("div");
  const uri = h("input", { name: "uri", placeholder: "http://localhost:9080 or arn:aws:lambda:…:function:NAME:3", required: true });
  const force = h("input", { type: "checkbox", name: "force" });
  const load = async () => {
    const { deployments } = await admin("deployments");
    replace(list, listing(deployments, flash, load));
  };
  const register = async (event) => {
    event.preventDefault();
    const value = uri.value.trim();
    const body = value.startsWith("arn:") ? { arn: value } : { uri: value };
    if (force.checked) body.force = true;
    try {
      const answer = await admin("deployments", { method: "POST", body });
      replace(flash, notice("info", `Registered ${answer.id}: ${answer.services.map((s) => s.name).join(", ")}.`));
      uri.value = "";
      await load();
    } catch (error) {
      replace(flash, notice("error", `Registration failed: ${error.message}`));
    }
  };
  add(root, 
    h("h1", {}, "Deployments"),
    h("form", { class: "filters", onsubmit: register }, h("label", { class: "grow" }, "Register ", uri), h("label", {}, force, " force"), h("button", { type: "submit" }, "Register")),
    flash,
    list,
  );
  await load();
}

function listing(deployments, flash, reload) {
  if (!deployments.length) return notice("info", "No deployments. Register the URI of a Restate SDK endpoint above.");
  const remove = async (d) => {
    if (!confirm(`Remove deployment ${d.id} and the services pointing at it?`)) return;
    try {
      await admin(`deployments/${seg(d.id)}`, { method: "DELETE" });
      replace(flash, notice("info", `Removed ${d.id}.`));
    } catch (error) {
      replace(flash, notice("error", `Could not remove ${d.id}: ${error.message}`));
    }
    await reload();
  };
  const rows = deployments.map((d) =>
    h(
      "tr",
      {},
      h("td", { class: "mono" }, d.id),
      h("td", { class: "mono" }, d.uri || d.arn),
      h("td", {}, time(d.created_at)),
      h("td", {}, `V${d.min_protocol_version}–V${d.max_protocol_version}`),
      h("td", {}, d.sdk_version || ""),
      h("td", {}, d.services.map(({ name }) => h("span", { class: "chip" }, link(`#/services/${seg(name)}`, name)))),
      h("td", {}, h("button", { class: "danger small", onclick: () => remove(d) }, "Remove")),
    ),
  );
  return table(["Id", "Endpoint", "Created", "Protocol", "SDK", "Services", ""], rows, { class: "list" });
}
