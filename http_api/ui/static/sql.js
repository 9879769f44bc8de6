// #/sql?q= : run SQL over the introspection tables (POST /query, JSON rows) and show the rows.

import { adminBase } from "./api.js";
import { add, h, link, notice, replace, table } from "./dom.js";

const EXAMPLES = [
  ["Latest invocations", "SELECT id, target, status, created_at FROM sys_invocation ORDER BY created_at DESC LIMIT 20"],
  ["Suspended", "SELECT id, target, modified_at FROM sys_invocation WHERE status = 'suspended'"],
  ["Failing", "SELECT id, target, retry_count, last_failure FROM sys_invocation WHERE retry_count > 0"],
  ["State", "SELECT service_name, service_key, key, value_utf8 FROM state LIMIT 50"],
  ["Services", "SELECT name, ty, revision, deployment_id FROM sys_service"],
];
const SHOWN_ROWS = 500;

/** The SQL page: a query (kept in the URL, so a query can be bookmarked), its rows as a table. */
export async function render(root, { query }) {
  const sql = query.get("q") || EXAMPLES[0][1];
  const box = h("textarea", { name: "query", rows: 4, "aria-label": "SQL query", spellcheck: "false" });
  box.value = sql;
  const out = h("div", { "data-testid": "sql-output" });
  const submit = (event) => {
    event.preventDefault();
    const next = `#/sql?q=${encodeURIComponent(box.value)}`;
    if (location.hash === next) run(box.value, out);
    else location.hash = next;
  };
  box.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) submit(event);
  });
  add(
    root,
    h("h1", {}, "SQL ", h("span", { class: "muted small" }, "over sys_invocation, sys_journal, state, sys_service, … (torpor sql, POST /query)")),
    h("div", { class: "examples" }, EXAMPLES.map(([label, text]) => link(`#/sql?q=${encodeURIComponent(text)}`, label, { class: "button secondary small" }))),
    h("form", { onsubmit: submit }, box, h("div", { class: "row" }, h("button", { type: "submit" }, "Run"), h("span", { class: "muted small" }, "Ctrl+Enter runs it too"))),
    out,
  );
  if (query.get("q")) await run(sql, out);
}

async function run(sql, out) {
  replace(out, h("p", { class: "muted" }, "Running…"));
  const started = performance.now();
  let response;
  let text;
  try {
    response = await fetch(new URL("query", adminBase), {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json" },
      body: JSON.stringify({ query: sql }),
    });
    text = await response.text();
  } catch (error) {
    replace(out, notice("error", `The admin API did not answer: ${error.message}`));
    return;
  }
  let data = null;
  try {
    data = JSON.parse(text);
  } catch {
    // not JSON: shown as text below
  }
  if (!response.ok) {
    replace(out, notice("error", h("strong", {}, `HTTP ${response.status}: `), h("pre", { class: "error-text", "data-testid": "sql-error" }, data?.message ?? text)));
    return;
  }
  const rows = data?.rows ?? [];
  const columns = [];
  for (const row of rows) for (const name of Object.keys(row)) if (!columns.includes(name)) columns.push(name);
  const ms = Math.round(performance.now() - started);
  replace(
    out,
    h("p", { class: "muted", "data-testid": "sql-count" }, `${rows.length} row${rows.length === 1 ? "" : "s"} in ${ms} ms`, rows.length > SHOWN_ROWS ? `; the first ${SHOWN_ROWS} shown` : ""),
    rows.length
      ? table(
          columns,
          rows.slice(0, SHOWN_ROWS).map((row) => h("tr", { "data-testid": "sql-row" }, columns.map((name) => h("td", {}, cell(row[name]))))),
          { class: "list sql", "data-testid": "sql-result" },
        )
      : null,
  );
}

/** A value as a cell: null as a muted "null", objects as JSON, the rest as text. */
function cell(value) {
  if (value === undefined || value === null) return h("span", { class: "muted" }, "null");
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}
