// Kineto Insights: the plugin's page (plain ES module, no build step).
//
// TensorBoard (2.x) shows plugins whose frontend_metadata has an es_module_path in an
// iframe pointing at /data/plugin_entry.html?name=kineto_insights. That page holds
//   <base href="plugin/kineto_insights/">
//   <script type="module">import("./index.js").then((m) => void m.render());</script>
// so this module must export render(), and relative URLs resolve under
// /data/plugin/kineto_insights/. Everything here resolves against import.meta.url,
// which is that same folder. Data is always rendered as text nodes, never as HTML.

const BASE = new URL("./", import.meta.url);

function apiUrl(route, params) {
  const url = new URL(route, BASE);
  for (const [key, value] of Object.entries(params || {})) {
    url.searchParams.set(key, value);
  }
  return url;
}

// el("div", {className: "x"}, child, "text", ...): strings become text nodes.
function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    node[key] = value;
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function isNumber(value) {
  return typeof value === "number" && Number.isFinite(value);
}

function fmtMs(us, digits = 3) {
  return isNumber(us) ? (us / 1000).toFixed(digits) : "n/a";
}

function fmtInt(value) {
  return isNumber(value) ? value.toLocaleString("en-US") : "n/a";
}

function fmtBytes(n) {
  if (!isNumber(n)) return "n/a";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}

async function fetchJson(url) {
  let response;
  try {
    response = await fetch(url, { headers: { Accept: "application/json" } });
  } catch (err) {
    return { ok: false, status: 0, body: { error: `request failed: ${err}` } };
  }
  let body = null;
  try {
    body = await response.json();
  } catch (err) {
    body = { error: `HTTP ${response.status}: response is not JSON` };
  }
  return { ok: response.ok, status: response.status, body };
}

function addStylesheet() {
  if (document.querySelector("link[data-kineto-insights]")) return;
  const link = el("link", { rel: "stylesheet", href: new URL("style.css", BASE).href });
  link.dataset.kinetoInsights = "1";
  document.head.append(link);
}

// A two-column table of [label, value] rows; value may be a node or text.
function keyValueTable(rows, className = "kv") {
  const body = el("tbody");
  for (const [label, value] of rows) {
    body.append(el("tr", {}, el("th", { scope: "row" }, label), el("td", {}, value)));
  }
  return el("table", { className }, body);
}

// {name: count} as a table sorted by count, or "none".
function countsTable(counts) {
  const entries = Object.entries(counts || {}).sort((a, b) => b[1] - a[1]);
  if (entries.length === 0) return el("span", { className: "muted" }, "none");
  return keyValueTable(
    entries.map(([name, count]) => [name, fmtInt(count)]),
    "kv counts",
  );
}

function section(title, ...children) {
  return el("section", { className: "panel" }, el("h2", {}, title), ...children);
}

function renderSteps(steps) {
  if (!steps) return section("Steps", el("p", { className: "muted" }, "No step data."));
  if (!steps.has_markers || steps.count === 0) {
    return section(
      "Steps",
      el(
        "p",
        { className: "warning" },
        "No ProfilerStep#N markers in this trace: call prof.step() once per training " +
          "step so that per-step numbers can be computed.",
      ),
    );
  }
  const summary = keyValueTable([
    ["Steps", fmtInt(steps.count)],
    ["Mean step time", `${fmtMs(steps.mean_step_us)} ms`],
    ["Std. deviation", `${fmtMs(steps.std_step_us)} ms`],
    ["Min / max", `${fmtMs(steps.min_step_us)} / ${fmtMs(steps.max_step_us)} ms`],
  ]);
  const head = el(
    "thead",
    {},
    el(
      "tr",
      {},
      el("th", {}, "Step"),
      el("th", { className: "num" }, "Start (ms)"),
      el("th", { className: "num" }, "Duration (ms)"),
    ),
  );
  const body = el("tbody");
  for (const step of steps.steps || []) {
    body.append(
      el(
        "tr",
        {},
        el("td", {}, `ProfilerStep#${step.number}`),
        el("td", { className: "num" }, fmtMs(step.start_us)),
        el("td", { className: "num" }, fmtMs(step.duration_us)),
      ),
    );
  }
  return section(
    "Steps",
    el(
      "p",
      { className: "note" },
      "Step time: duration of the CPU ProfilerStep#N range; mean over all steps " +
        "of this span. Start is measured from the first event of the trace.",
    ),
    summary,
    el("table", { className: "grid" }, head, body),
  );
}

function renderHealth(health) {
  if (!health) return section("Trace health", el("p", { className: "muted" }, "No data."));
  const rows = [
    ["Events", fmtInt(health.event_count)],
    [
      "File",
      `${fmtBytes(health.file_bytes)}${health.compressed ? " (gzip)" : ""}, ` +
        `${fmtBytes(health.json_bytes)} JSON`,
    ],
    ["Events by kind", countsTable(health.kind_counts)],
    ["Skipped events", countsTable(health.skipped)],
    ["Quarantined events", countsTable(health.quarantined)],
    ["Repaired damage", countsTable(health.repairs)],
    ["Kineto record counts", countsTable(health.kineto_record_counts)],
  ];
  const log = health.kineto_log || [];
  if (log.length > 0) {
    rows.push(["Kineto log", el("pre", { className: "log" }, log.join("\n"))]);
  }
  return section("Trace health", keyValueTable(rows));
}

function renderError(message) {
  return section(
    "This trace could not be read",
    el("p", { className: "error" }, message || "unknown error"),
  );
}

function fillSelect(select, items, label, selected) {
  select.replaceChildren();
  for (const item of items) {
    select.append(el("option", { value: item.key, selected: item.key === selected }, label(item)));
  }
  select.disabled = items.length === 0;
}

// "loading 40 %" from a load state {state, progress: {elapsed_s, estimated_fraction}}.
function loadText(entry) {
  if (entry.state === "loading") {
    const fraction = entry.progress?.estimated_fraction;
    return isNumber(fraction) ? `loading ${Math.round(fraction * 100)} %` : "loading";
  }
  return entry.state === "queued" ? "queued" : "";
}

function spanLabel(span) {
  let state = "";
  if (span.state === "error") state = " \u2014 error";
  else if (span.state === "ready") state = " \u2713";
  else if (span.state === "queued" || span.state === "loading") state = ` \u2014 ${loadText(span)}`;
  return `${span.span} (${fmtBytes(span.size_bytes)})${state}`;
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export async function render() {
  addStylesheet();
  const runSelect = el("select", { id: "ki-run", disabled: true });
  const workerSelect = el("select", { id: "ki-worker", disabled: true });
  const spanSelect = el("select", { id: "ki-span", disabled: true });
  const reload = el("button", { type: "button" }, "Reload");
  const status = el("div", { className: "status", role: "status" });
  const content = el("main", { className: "content" });
  const controls = el(
    "div",
    { className: "controls" },
    el("label", {}, "Run ", runSelect),
    el("label", {}, "Worker ", workerSelect),
    el("label", {}, "Span ", spanSelect),
    reload,
  );
  document.body.replaceChildren(
    el("header", {}, el("h1", {}, "Kineto Insights"), controls),
    status,
    content,
  );

  let runs = [];
  let request = 0; // ignore answers to superseded requests

  const currentRun = () => runs.find((r) => r.run === runSelect.value);
  const currentWorker = () =>
    (currentRun()?.workers || []).find((w) => w.worker === workerSelect.value);
  const currentSpan = () =>
    (currentWorker()?.spans || []).find((s) => s.span === spanSelect.value);

  function setStatus(text, kind = "") {
    status.className = `status ${kind}`;
    status.textContent = text;
  }

  async function showSummary() {
    const run = currentRun();
    const worker = currentWorker();
    const span = currentSpan();
    content.replaceChildren();
    if (!run || !worker || !span) return;
    const mine = ++request;
    const where = `${run.run} / ${worker.worker} / ${span.span}`;
    setStatus(`Analysing ${where}\u2026`);
    const url = apiUrl("summary", { run: run.run, worker: worker.worker, span: span.span });
    let answer = await fetchJson(url);
    // 202: the backend is still reading the trace; ask again until it is there.
    while (answer.status === 202 && mine === request) {
      span.state = answer.body?.state || "loading";
      span.progress = answer.body?.progress || null;
      setStatus(`Reading ${where}: ${loadText(span)}\u2026`);
      const option = [...spanSelect.options].find((o) => o.value === span.span);
      if (option) option.textContent = spanLabel(span);
      await sleep(1000);
      if (mine !== request) return;
      answer = await fetchJson(url);
    }
    if (mine !== request) return;
    if (answer.ok) {
      span.state = "ready";
      span.error = null;
      setStatus("");
      content.replaceChildren(renderSteps(answer.body.steps), renderHealth(answer.body.health));
    } else {
      const message = answer.body?.error || `HTTP ${answer.status}`;
      if (answer.status === 422) {
        span.state = "error";
        span.error = message;
      }
      setStatus("");
      content.replaceChildren(renderError(message));
    }
    const option = [...spanSelect.options].find((o) => o.value === span.span);
    if (option) option.textContent = spanLabel(span);
  }

  function fillSpans(selected) {
    const spans = currentWorker()?.spans || [];
    fillSelect(
      spanSelect,
      spans.map((s) => ({ key: s.span, span: s })),
      (item) => spanLabel(item.span),
      selected,
    );
  }

  function fillWorkers(selected) {
    const workers = currentRun()?.workers || [];
    fillSelect(
      workerSelect,
      workers.map((w) => ({ key: w.worker })),
      (item) => item.key,
      selected,
    );
  }

  async function loadRuns() {
    const keep = [runSelect.value, workerSelect.value, spanSelect.value];
    setStatus("Looking for traces\u2026");
    const answer = await fetchJson(apiUrl("runs"));
    if (!answer.ok) {
      setStatus(`Could not list runs: ${answer.body?.error || answer.status}`, "error");
      return;
    }
    runs = answer.body.runs || [];
    if (answer.body.error) {
      setStatus(answer.body.error, "error");
    } else if (runs.length === 0 && answer.body.scanning) {
      setStatus("Still looking for traces in the log directory; press Reload in a moment.");
    } else if (runs.length === 0) {
      setStatus("No Kineto trace files (*.pt.trace.json[.gz]) in the log directory.");
    } else {
      setStatus("");
    }
    fillSelect(
      runSelect,
      runs.map((r) => ({ key: r.run })),
      (item) => item.key,
      keep[0],
    );
    fillWorkers(keep[1]);
    fillSpans(keep[2]);
    await showSummary();
  }

  runSelect.addEventListener("change", () => {
    fillWorkers();
    fillSpans();
    showSummary();
  });
  workerSelect.addEventListener("change", () => {
    fillSpans();
    showSummary();
  });
  spanSelect.addEventListener("change", () => showSummary());
  reload.addEventListener("click", () => loadRuns());

  await loadRuns();
}
