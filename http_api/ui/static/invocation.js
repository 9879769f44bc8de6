// #/invocations/{id} : status, actions, result, failures, awakeables, the journal as a timeline, state.
// Refreshes every second until the invocation has completed.

import { admin, completeAwakeable, seg } from "./api.js";
import { add, duration, facts, h, link, notice, pretty, relative, replace, statusBadge, table, time } from "./dom.js";

const ACTIONS = [
  // [label, admin action, when it applies, what to ask first (null: no question)]
  ["Cancel", "cancel", (s) => s !== "completed", null],
  ["Pause", "pause", (s) => s !== "completed" && s !== "paused", null],
  ["Resume", "resume", (s) => s === "paused", null],
  ["Kill", "kill", (s) => s !== "completed", "Kill this invocation? It completes with 409 at once; no compensation runs."],
  ["Purge", "purge", (s) => s === "completed", "Purge this invocation's record and journal?"],
];

/** The invocation page. */
export async function render(root, { args: [id] }, context) {
  const flash = h("div", { class: "flash" });
  const body = h("div");
  add(root, 
    h("p", { class: "crumbs" }, link("#/invocations", "Invocations"), " / ", h("span", { class: "mono" }, id)),
    flash,
    body,
  );
  let last = "";
  const refresh = async () => {
    let invocation;
    try {
      invocation = await admin(`invocations/${seg(id)}`);
    } catch (error) {
      replace(body, notice("error", error.status === 404 ? `Invocation ${id} not found (purged, or its retention ended).` : error.message));
      return false;
    }
    const keyed = invocation.target_service_key !== null;
    const state = keyed ? await admin(`services/${seg(invocation.target_service_name)}/state/${seg(invocation.target_service_key)}`).catch(() => null) : null;
    const fingerprint = JSON.stringify([invocation, state]);
    if (fingerprint !== last) {
      last = fingerprint;
      replace(body, page(invocation, state, { flash, refresh }));
    }
    return invocation.status !== "completed";
  };
  if (await refresh()) {
    context.every(1000, async () => {
      if (!(await refresh())) context.stop();
    });
  }
}

function page(inv, state, actions) {
  return [
    h("div", { class: "title-row" }, h("h1", {}, inv.target), statusBadge(inv), actionButtons(inv, actions)),
    facts([
      ["Invocation", h("span", { class: "mono", "data-testid": "invocation-id" }, inv.id)],
      ["Created", time(inv.created_at)],
      ["Modified", [time(inv.modified_at), " ", h("span", { class: "muted" }, relative(inv.modified_at))]],
      ["Completed", inv.completed_at && time(inv.completed_at)],
      ["Scheduled for", inv.execution_time && [time(inv.execution_time), " ", h("span", { class: "muted" }, relative(inv.execution_time))]],
      ["Wakes up at", inv.wake_up_at && inv.status === "suspended" && [time(inv.wake_up_at), " ", h("span", { class: "muted" }, relative(inv.wake_up_at))]],
      ["Next retry", inv.next_retry_at && inv.status === "backing-off" && [time(inv.next_retry_at), " ", h("span", { class: "muted" }, relative(inv.next_retry_at))]],
      ["Attempts", `${inv.attempts}${inv.retry_count ? ` (${inv.retry_count} retries since the journal last grew)` : ""}`],
      ["Deployment", inv.deployment_id && link("#/deployments", inv.deployment_id, { class: "mono" })],
      ["Protocol", inv.protocol_version && `V${inv.protocol_version}`],
      ["Idempotency key", inv.idempotency_key],
      ["Trace id", inv.trace_id && h("span", { class: "mono" }, inv.trace_id)],
      ["Waiting on", waitingOn(inv)],
    ]),
    problems(inv),
    result(inv),
    awakeables(inv, actions),
    costView(inv),
    h("h2", {}, `Journal `, h("span", { class: "muted" }, `${inv.journal.length} entries`)),
    timeline(inv),
    pending(inv),
    state && stateView(inv, state),
  ];
}

function actionButtons(inv, { flash, refresh }) {
  const run = async (label, action, question) => {
    if (question && !confirm(question)) return;
    try {
      await admin(`invocations/${seg(inv.id)}/${action}`, { method: "PATCH" });
      replace(flash, notice("info", `${label}: sent.`));
      if (action === "purge") location.hash = "#/invocations";
      else await refresh();
    } catch (error) {
      replace(flash, notice("error", `${label} failed: ${error.message}`));
    }
  };
  return h(
    "div",
    { class: "actions" },
    ACTIONS.filter(([, , applies]) => applies(inv.status)).map(([label, action, , question]) =>
      h("button", { class: action === "kill" || action === "purge" ? "danger" : "secondary", onclick: () => run(label, action, question) }, label),
    ),
  );
}

function waitingOn(inv) {
  const w = inv.waiting_on;
  if (!w) return inv.waiting_for_key_holder ? ["the key's holder ", link(`#/invocations/${seg(inv.waiting_for_key_holder)}`, inv.waiting_for_key_holder, { class: "mono" })] : null;
  const command = (id) => inv.journal.find((e) => e.result_completion_id === id);
  const parts = [
    ...(w.completions || []).map((id) => {
      const c = command(id);
      return c ? `${c.type} #${c.index}${c.details ? ` ${c.details}` : c.wake_up_at ? ` until ${c.wake_up_at}` : ""}` : `completion ${id}`;
    }),
    ...(w.signals || []).map((s) => (s === 1 ? "a cancel" : s >= 17 ? `awakeable (signal ${s})` : `signal ${s}`)),
    ...(w.named_signals || []).map((n) => `signal "${n}"`),
  ];
  return parts.join(", ") || null;
}

function problems(inv) {
  const out = [];
  if (inv.deadlock) out.push(notice("error", h("strong", {}, "Deadlock: "), inv.deadlock.message));
  if (inv.last_failure && inv.status !== "completed") {
    const f = inv.last_failure;
    const known = f.related_command_index != null || f.related_command_type || f.related_command_name;
    const related = known
      ? commandWords({ index: f.related_command_index, type: f.related_command_type, name: f.related_command_name })
      : null;
    out.push(
      notice(
        "warn",
        h("strong", {}, `Last failure (attempt ${f.attempt ?? "?"}, code ${f.code}`, f.at ? `, ${f.at}` : "", "): "),
        f.message,
        related ? h("div", { class: "muted", "data-testid": "failure-command" }, `at command ${related}`) : null,
        f.recorded_command
          ? h("div", { class: "muted", "data-testid": "failure-recorded-command" }, `the journal recorded ${commandWords(f.recorded_command)}`)
          : null,
        f.stacktrace ? h("pre", { class: "stacktrace", "data-testid": "failure-stacktrace" }, f.stacktrace) : null,
      ),
    );
  }
  return out;
}

// A failure's metadata (key=value, ...), or null when it has none.
function failureMetadata(f) {
  const entries = Object.entries(f.metadata || {});
  if (!entries.length) return null;
  return h("div", { class: "muted", "data-testid": "failure-metadata" }, entries.map(([k, v]) => `${k}=${v}`).join(", "));
}

// A command in words: `Run #2 'name' to target` (a failure's related or recorded command).
function commandWords(c) {
  return [c.type || "command", c.index != null ? ` #${c.index}` : "", c.name ? ` '${c.name}'` : "", c.target ? ` to ${c.target}` : ""].join("");
}

function result(inv) {
  if (inv.status !== "completed") return null;
  if (inv.completion_result === "failure") {
    const f = inv.completion_failure || {};
    const heading = { cancelled: "Cancelled", killed: "Killed" }[inv.completion_kind] || "Failure";
    return [h("h2", {}, heading), notice("error", h("strong", {}, `${f.code}: `), f.message, failureMetadata(f))];
  }
  return [h("h2", {}, "Result"), h("pre", { class: "value", "data-testid": "invocation-output" }, pretty(inv.completion_output ?? ""))];
}

function awakeables(inv, { flash, refresh }) {
  const ids = inv.awaiting_awakeables || [];
  if (!ids.length) return null;
  return [
    h("h2", {}, "Awaited awakeables"),
    ids.map((id) => {
      const value = h("input", { value: '"done"', "aria-label": "value (JSON)", class: "grow" });
      const reason = h("input", { placeholder: "reason", "aria-label": "reason" });
      const send = async (how) => {
        try {
          const answer = how === "resolve" ? await completeAwakeable(id, { value: JSON.parse(value.value) }) : await completeAwakeable(id, { reason: reason.value || "rejected" });
          if (answer.status >= 300) throw new Error(`${answer.status} ${pretty(answer.body)}`);
          replace(flash, notice("info", `Awakeable ${how === "resolve" ? "resolved" : "rejected"}.`));
          await refresh();
        } catch (error) {
          replace(flash, notice("error", `Could not ${how} the awakeable: ${error.message}`));
        }
      };
      return h(
        "div",
        { class: "awakeable" },
        h("code", {}, id),
        h("div", { class: "row" }, value, h("button", { onclick: () => send("resolve") }, "Resolve"), reason, h("button", { class: "secondary", onclick: () => send("reject") }, "Reject")),
      );
    }),
  ];
}

/** Completion ids that have their notification in the journal (for "done" / "waiting" marks). */
function completed(journal) {
  return new Set(journal.filter((e) => e.kind === "notification" && e.completion_id !== undefined).map((e) => e.completion_id));
}

function timeline(inv) {
  const done = completed(inv.journal);
  const start = new Date(inv.created_at).getTime();
  return h(
    "ol",
    { class: "timeline", "data-testid": "journal" },
    inv.journal.map((entry, position) => {
      const stored = entry.stored_at ? new Date(entry.stored_at).getTime() : NaN;
      const open = entry.result_completion_id !== undefined && !done.has(entry.result_completion_id) && inv.status !== "completed";
      const took = stepDuration(inv.journal, position);
      return h(
        "li",
        { class: `entry ${entry.kind}${open ? " open" : ""}`, "data-testid": "journal-entry", "data-type": entry.type },
        h(
          "div",
          { class: "entry-head" },
          h("span", { class: "index" }, `#${entry.index}`),
          h("strong", {}, entryTitle(entry)),
          entry.name ? h("span", { class: "name" }, `“${entry.name}”`) : null,
          entry.details && entry.type !== "Sleep"
            ? h("span", { class: "name", "data-testid": "entry-details" }, entry.target ? `→ ${entry.details}` : entry.details)
            : entry.target ? h("span", { class: "name" }, `→ ${entry.target}`) : null,
          idLabel(entry),
          open ? h("span", { class: "badge status-suspended" }, "waiting") : null,
          h(
            "span",
            { class: "stored", title: entry.stored_at || "" },
            entry.stored_at ? `stored ${entry.stored_at}` : "",
            !isNaN(stored) && entry.index > 0 ? ` (+${duration(stored - start)})` : "",
          ),
          took !== null ? h("span", { class: "took", "data-testid": "step-duration", title: "from the step's command to its stored result" }, `took ≈ ${duration(took)}`) : null,
        ),
        entry.wake_up_at ? wakeUp(entry, done, inv) : null,
        entry.invocation_id || entry.invoked_id
          ? h("div", {}, "invocation ", link(`#/invocations/${seg(entry.invocation_id || entry.invoked_id)}`, entry.invocation_id || entry.invoked_id, { class: "mono" }))
          : null,
        entry.value !== undefined && entry.value !== "" ? h("pre", { class: "value" }, pretty(entry.value)) : null,
        entry.failure ? h("div", { class: "failure" }, `failure ${entry.failure.code}: ${entry.failure.message}`, failureMetadata(entry.failure)) : null,
      );
    }),
  );
}

/** Signal 1 is the cancel signal; 17 and up are awakeables (Restate service protocol, built-in signal ids). */
function signalOf(entry) {
  return entry.signal_id ?? entry.idx;
}

function entryTitle(entry) {
  if (entry.type === "Signal" && signalOf(entry) === 1) return "Cancel";
  return entry.type;
}

function idLabel(entry) {
  if (entry.result_completion_id !== undefined) return h("span", { class: "muted" }, `completion ${entry.result_completion_id}`);
  if (entry.completion_id !== undefined) return h("span", { class: "muted" }, `completes ${entry.completion_id}`);
  const signal = signalOf(entry);
  if (signal === 1) return h("span", { class: "muted" }, "the invocation was cancelled");
  if (signal !== undefined) return h("span", { class: "muted" }, signal >= 17 ? `awakeable ${signal}` : `signal ${signal}`);
  return null;
}

/** A sleep's wake-up: still to come, done, or not reached (the invocation ended first). */
function wakeUp(entry, done, inv) {
  const at = [time(entry.wake_up_at), " ", h("span", { class: "muted" }, relative(entry.wake_up_at))];
  if (entry.result_completion_id !== undefined && done.has(entry.result_completion_id)) {
    return h("div", { class: "wake", "data-testid": "wake-up" }, "woke up at ", time(entry.wake_up_at));
  }
  if (inv.status === "completed") return h("div", { class: "wake muted", "data-testid": "wake-up" }, "was to wake up at ", time(entry.wake_up_at), " (ended before)");
  return h("div", { class: "wake", "data-testid": "wake-up" }, "wakes up at ", ...at);
}

/** How long a `ctx.run` step took (ms): from when its Run command's predecessor was stored (the step
 * started after it) to when its RunCompletion was stored; null for other entries or unknown times. */
function stepDuration(journal, position) {
  const entry = journal[position];
  if (entry.type !== "RunCompletion" || !entry.stored_at) return null;
  const runAt = journal.findIndex((e) => e.type === "Run" && e.result_completion_id === entry.completion_id);
  if (runAt < 1 || !journal[runAt - 1].stored_at) return null;
  const ms = new Date(entry.stored_at).getTime() - new Date(journal[runAt - 1].stored_at).getTime();
  return isNaN(ms) || ms < 0 ? null : ms;
}

function pending(inv) {
  const list = inv.pending_notifications || [];
  if (!list.length) return null;
  return [
    h("h2", {}, "Delivered, not yet in the journal"),
    table(
      ["Key", "Type", "Value", "Stored"],
      list.map((n) => h("tr", {}, h("td", { class: "mono" }, n.key), h("td", {}, n.type), h("td", {}, n.failure ? [`failure ${n.failure.code}: ${n.failure.message}`, failureMetadata(n.failure)] : pretty(n.value ?? "")), h("td", {}, time(n.stored_at)))),
    ),
  ];
}

function stateView(inv, state) {
  const entries = Object.entries(state.state);
  const hash = `#/state?service=${seg(inv.target_service_name)}&key=${seg(inv.target_service_key)}`;
  return [
    h("h2", {}, `State of ${inv.target_service_name} / ${inv.target_service_key} `, link(hash, "open in state viewer", { class: "small" })),
    entries.length
      ? table(["Name", "Value"], entries.map(([name, value]) => h("tr", {}, h("td", { class: "mono" }, name), h("td", {}, h("pre", { class: "value" }, pretty(value))))))
      : h("p", { class: "muted" }, "No state."),
  ];
}

// The AWS requests this invocation caused (as metered by the control plane) and their list-price cost.
function costView(inv) {
  const requests = Object.entries(inv.aws_requests || {}).sort(([a], [b]) => a.localeCompare(b));
  if (!requests.length) return null;
  const cost = Object.entries(inv.aws_cost_usd || {}).filter(([, usd]) => usd > 0);
  const total = cost.reduce((sum, [, usd]) => sum + usd, 0);
  return h(
    "section",
    { "data-testid": "aws-cost" },
    h("h2", {}, "AWS requests and cost"),
    table(
      ["Request", "Count"],
      requests.map(([kind, n]) => h("tr", {}, h("td", { class: "mono" }, kind), h("td", {}, String(n)))),
    ),
    h(
      "p",
      { "data-testid": "aws-cost-total" },
      `$${total.toFixed(7)} (${cost.map(([service, usd]) => `${service} $${usd.toFixed(7)}`).join(", ")}), `,
      `$${(total * 1e6).toFixed(2)} per million such invocations, at us-east-1 list prices; `,
      h("span", { class: "muted" }, "the control plane's own Lambda time is not included."),
    ),
  );
}
