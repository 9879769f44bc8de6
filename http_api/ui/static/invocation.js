// #/invocations/{id} : status, actions, result, failures, awakeables, the journal as a timeline, state.
// Refreshes every second until the invocation has completed.

import { admin, completeAwakeable, seg } from "./api.js";
import { add, duration, errorText, facts, h, link, notice, pretty, relative, replace, statusBadge, table, time } from "./dom.js";

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
      ["Duration", h("span", { "data-testid": "invocation-duration" }, runningTime(inv))],
      ["Invoked by", invokedBy(inv)],
      ["Awaited by", (inv.awaited_by || []).length ? inv.awaited_by.map((id, i) => [i ? ", " : "", link(`#/invocations/${seg(id)}`, id, { class: "mono" })]) : null],
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

/** "1.2 s" from creation to completion, or "3 s so far". */
function runningTime(inv) {
  const start = new Date(inv.created_at).getTime();
  if (inv.completed_at) return duration(new Date(inv.completed_at).getTime() - start);
  return `${duration(Math.max(0, Date.now() - start))} so far`;
}

/** The caller whose Call created this invocation, linked, with its target. */
function invokedBy(inv) {
  if (!inv.invoked_by_id) return null;
  return h(
    "span",
    { "data-testid": "invoked-by" },
    link(`#/invocations/${seg(inv.invoked_by_id)}`, inv.invoked_by_id, { class: "mono" }),
    inv.invoked_by_target ? ` (${inv.invoked_by_target})` : h("span", { class: "muted" }, " (no longer stored)"),
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
        errorText(f),
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
    return [h("h2", {}, heading), notice("error", h("strong", {}, `code ${f.code}`), errorText(f), failureMetadata(f))];
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
  const spans = inv.journal.map((entry, position) => span(inv, position));
  const last = Math.max(start + 1, ...spans.filter(Boolean).map((s) => s.end), ...inv.journal.map((e) => (e.stored_at ? new Date(e.stored_at).getTime() : start)));
  const end = inv.completed_at ? Math.max(last, new Date(inv.completed_at).getTime()) : Math.max(last, Date.now());
  return h(
    "ol",
    { class: "timeline", "data-testid": "journal" },
    inv.journal.map((entry, position) => {
      const stored = entry.stored_at ? new Date(entry.stored_at).getTime() : NaN;
      const open = entry.result_completion_id !== undefined && !done.has(entry.result_completion_id) && inv.status !== "completed";
      const took = stepDuration(inv.journal, position);
      const callee = calleeOf(inv, entry);
      const s = spans[position];
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
          s && !(s.run && !s.open) ? h("span", { class: "took", "data-testid": "entry-duration", title: s.title }, s.open ? `waiting ${duration(s.end - s.start)} so far` : `completed after ${duration(s.end - s.start)}`) : null,
        ),
        bar(start, end, entry, s),
        callee ? h("div", {}, entry.type === "OneWayCall" ? "sent " : "callee ", link(`#/invocations/${seg(callee)}`, callee, { class: "mono", "data-testid": "callee-link" })) : null,
        entry.wake_up_at ? wakeUp(entry, done, inv) : null,
        !callee && (entry.invocation_id || entry.invoked_id)
          ? h("div", {}, "invocation ", link(`#/invocations/${seg(entry.invocation_id || entry.invoked_id)}`, entry.invocation_id || entry.invoked_id, { class: "mono" }))
          : null,
        entry.value !== undefined && entry.value !== "" ? h("pre", { class: "value" }, pretty(entry.value)) : null,
        entry.failure ? h("div", { class: "failure" }, `failure ${entry.failure.code}:`, errorText(entry.failure), failureMetadata(entry.failure)) : null,
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

/** A Call's or OneWayCall's callee (the entry's `invoked_id`), or null. */
function calleeOf(inv, entry) {
  if (entry.kind !== "command" || (entry.type !== "Call" && entry.type !== "OneWayCall")) return null;
  return entry.invoked_id || entry.invocation_id || null;
}

/**
 * How long a command with a completion waited for it (ms since the epoch, `{start, end, open, run, title}`):
 * from when the command was stored (for a Run, when the entry before it was: the step ran after it)
 * to when its completion was stored, in the journal or delivered beside it; `open` while it is still
 * awaited (then `end` is now). Null for other entries, unknown times, or an invocation that ended first.
 */
function span(inv, position) {
  const entry = inv.journal[position];
  if (entry.kind !== "command" || entry.result_completion_id === undefined || !entry.stored_at) return null;
  const run = entry.type === "Run";
  const from = run && position > 0 ? inv.journal[position - 1].stored_at : entry.stored_at;
  const start = new Date(from).getTime();
  const result = [...inv.journal, ...(inv.pending_notifications || [])].find((e) => e.kind === "notification" && e.completion_id === entry.result_completion_id);
  if (result && result.stored_at) {
    const end = new Date(result.stored_at).getTime();
    return isNaN(start) || isNaN(end) || end < start ? null : { start, end, open: false, run, title: `from ${from} to ${result.stored_at}` };
  }
  if (inv.status === "completed") return null;
  return isNaN(start) ? null : { start, end: Math.max(start, Date.now()), open: true, run, title: `stored ${from}, not completed yet` };
}

/** The entry's place on the invocation's time axis (created → completed, or now): a bar for a span, else a tick. */
function bar(start, end, entry, s) {
  const at = s ? s.start : entry.stored_at ? new Date(entry.stored_at).getTime() : NaN;
  if (isNaN(at)) return null;
  const total = Math.max(1, end - start);
  const left = Math.min(100, Math.max(0, ((at - start) / total) * 100));
  const width = s ? Math.max(0.4, Math.min(100 - left, ((s.end - s.start) / total) * 100)) : 0;
  const mark = h("div", { class: `bar${s ? "" : " tick"}${s?.open ? " open" : ""}`, "data-testid": "timeline-bar" });
  mark.style.left = `${left.toFixed(2)}%`; // through the CSSOM: the UI's CSP allows no inline style attributes
  if (s) mark.style.width = `${width.toFixed(2)}%`;
  return h("div", { class: "track", "aria-hidden": "true" }, mark);
}

function pending(inv) {
  const list = inv.pending_notifications || [];
  if (!list.length) return null;
  return [
    h("h2", {}, "Delivered, not yet in the journal"),
    table(
      ["Key", "Type", "Value", "Stored"],
      list.map((n) => h("tr", {}, h("td", { class: "mono" }, n.key), h("td", {}, n.type), h("td", {}, n.failure ? [`failure ${n.failure.code}:`, errorText(n.failure), failureMetadata(n.failure)] : pretty(n.value ?? "")), h("td", {}, time(n.stored_at)))),
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
