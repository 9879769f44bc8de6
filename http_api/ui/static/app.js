// The UI's entry point: hash routes (#/invocations, #/invocations/{id}, ...) to page modules.
//
// Each page gets a fresh root element and a context; when the route changes, the context stops its
// polls and the old root leaves the document, so late answers of the old page change nothing.

import { h, notice } from "./dom.js";
import * as deployments from "./deployments.js";
import * as invocation from "./invocation.js";
import * as invocations from "./invocations.js";
import * as playground from "./playground.js";
import * as schedules from "./schedules.js";
import * as services from "./services.js";
import * as sql from "./sql.js";
import * as state from "./state.js";

const routes = [
  [/^\/invocations\/([^/]+)$/, "invocations", invocation.render],
  [/^\/invocations$/, "invocations", invocations.render],
  [/^\/services\/([^/]+)$/, "services", services.renderOne],
  [/^\/services$/, "services", services.render],
  [/^\/deployments$/, "deployments", deployments.render],
  [/^\/schedules$/, "schedules", schedules.render],
  [/^\/state$/, "state", state.render],
  [/^\/playground$/, "playground", playground.render],
  [/^\/sql$/, "sql", sql.render],
];

/** What a page may use: `every(ms, fn)` repeats `fn` until the page is left; `active` tells if it still shows. */
class PageContext {
  constructor() {
    this.active = true;
    this.timers = new Set();
  }

  every(ms, fn) {
    const tick = async () => {
      if (!this.active) return;
      try {
        await fn();
      } catch (error) {
        console.warn("refresh failed", error);
      }
      if (this.active) this.timers.add(setTimeout(tick, ms));
    };
    this.timers.add(setTimeout(tick, ms));
  }

  stop() {
    this.active = false;
    for (const timer of this.timers) clearTimeout(timer);
  }
}

let current = null;

async function route() {
  current?.stop();
  const context = (current = new PageContext());
  const raw = location.hash.replace(/^#/, "") || "/invocations";
  const [path, query = ""] = raw.split("?");
  const view = document.getElementById("view");
  const root = h("div", { class: "page" });
  view.replaceChildren(root);
  for (const [pattern, section, render] of routes) {
    const match = path.match(pattern);
    if (!match) continue;
    for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.page === section);
    try {
      await render(root, { args: match.slice(1).map(decodeURIComponent), query: new URLSearchParams(query) }, context);
    } catch (error) {
      root.append(notice("error", `Could not load this page: ${error.message}`));
    }
    return;
  }
  root.append(notice("error", `No page at ${path}. `, h("a", { href: "#/invocations" }, "Go to invocations")));
}

// The top bar's search: an invocation id opens its page (the input's pattern refuses anything else).
document.getElementById("search").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = event.target.elements.id;
  location.hash = `#/invocations/${encodeURIComponent(input.value.trim())}`;
  input.value = "";
});

window.addEventListener("hashchange", route);
route();
