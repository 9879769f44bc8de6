// #/schedules : durable schedules with their next tick; pause, resume or delete one.

import { admin, seg } from "./api.js";
import { add, h, notice, replace, table, time } from "./dom.js";

/** The schedules page (refreshed every 2 s, so next and last ticks move on as they run). */
export async function render(root, _route, context) {
  const flash = h("div", { class: "flash" });
  const list = h("div");
  const load = async () => {
    const { schedules } = await admin("schedules");
    replace(list, listing(schedules, flash, load));
  };
  add(
    root,
    h("h1", {}, "Schedules"),
    h("p", { class: "muted" }, "Each tick sends to its target once (its idempotency key is the schedule name and tick time). Create one with ",
      h("code", {}, "torpor schedules create NAME --cron '0 * * * *' --target Service/handler"), "."),
    flash,
    list,
  );
  await load();
  context.every(2000, load);
}

function cadence(s) {
  return s.cron ? `cron ${s.cron} (UTC)` : `every ${s.every}`;
}

function target(s) {
  return s.key ? `${s.service}/${s.key}/${s.handler}` : s.target;
}

function listing(schedules, flash, reload) {
  if (!schedules.length) return notice("info", "No schedules.");
  const act = async (s, verb, request) => {
    try {
      await admin(`schedules/${seg(s.name)}${request.suffix || ""}`, { method: request.method });
      replace(flash, notice("info", `${verb} ${s.name}.`));
    } catch (error) {
      replace(flash, notice("error", `Could not change ${s.name}: ${error.message}`));
    }
    await reload();
  };
  const remove = (s) => {
    if (confirm(`Delete schedule ${s.name}? Invocations it sent stay.`)) act(s, "Deleted", { method: "DELETE" });
  };
  const rows = schedules.map((s) =>
    h(
      "tr",
      { "data-schedule": s.name },
      h("td", { class: "mono" }, s.name),
      h("td", { class: "mono" }, cadence(s)),
      h("td", { class: "mono" }, target(s)),
      h("td", {}, h("span", { class: "chip" }, s.paused ? "paused" : "active")),
      h("td", { class: "next-tick" }, s.paused ? "—" : time(s.next_tick)),
      h("td", {}, s.last_tick ? time(s.last_tick) : "—"),
      h(
        "td",
        {},
        s.paused
          ? h("button", { class: "small", onclick: () => act(s, "Resumed", { method: "PATCH", suffix: "/resume" }) }, "Resume")
          : h("button", { class: "small", onclick: () => act(s, "Paused", { method: "PATCH", suffix: "/pause" }) }, "Pause"),
        " ",
        h("button", { class: "danger small", onclick: () => remove(s) }, "Delete"),
      ),
    ),
  );
  return table(["Name", "Cadence", "Target", "State", "Next tick", "Last tick", ""], rows, { class: "list" });
}
