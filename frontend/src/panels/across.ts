// The view across runs (the tab's landing view): every run of the log directory ranked
// worst first (/across_runs: the CLI's order of diagnoses applied to each run's worst),
// or ordered by a column (time lost per step, step time, GPU utilization), one page at a
// time, with a filter on names and ids and one on severity; a click on a run opens it.

import { badge, el, table } from "../dom";
import type { Column } from "../dom";
import { fmtCount, fmtDuration, fmtPercent, isNum } from "../format";
import type { AcrossRunsPage, AcrossRunsRow } from "../types";

// What the page asks /across_runs for besides its page: filter, order, severity.
export interface AcrossQuery {
  q: string;
  sort: string; // worst | lost | step | util
  reverse: boolean;
  severity: string; // "" | high | medium | low | info | none
}

export interface AcrossActions {
  openRun: (run: string) => void;
  // a new filter or order (`offset` 0), or another page (offset of its first row in the
  // matched list)
  query: (query: AcrossQuery, offset: number) => void;
}

const SORT_WORDS: Record<string, string> = {
  worst: "worst first",
  lost: "most time lost per step first",
  step: "longest step first",
  util: "lowest GPU utilization first",
};
const SORT_WORDS_REVERSED: Record<string, string> = {
  worst: "least severe first",
  lost: "least time lost per step first",
  step: "shortest step first",
  util: "highest GPU utilization first",
};

// The order in words ("worst first", "longest step first").
export function orderText(sort: string, reverse: boolean): string {
  return (reverse ? SORT_WORDS_REVERSED : SORT_WORDS)[sort] ?? SORT_WORDS.worst;
}

// Text of the "n–m of N" line: the rows shown, of the matched runs, of all runs, and the
// order.
export function pageText(page: AcrossRunsPage): string {
  const filtered = page.query || page.severity;
  if (!page.matched) return filtered ? `No run matches (of ${fmtCount(page.total)} ${page.total === 1 ? "run" : "runs"}).` : "No runs.";
  const first = page.offset + 1;
  const last = page.offset + page.rows.length;
  const runs = (n: number) => `${fmtCount(n)} ${n === 1 ? "run" : "runs"}`;
  const of = page.matched === page.total ? runs(page.total) : `${fmtCount(page.matched)} matching (of ${runs(page.total)})`;
  return `Runs ${fmtCount(first)}–${fmtCount(last)} of ${of}, ${orderText(page.sort, page.reverse)}.`;
}

// Whether the page is one of several (the pager is shown only then).
export function hasPages(page: AcrossRunsPage): boolean {
  return page.matched > page.limit || page.offset > 0;
}

function quiet(text: string): HTMLElement {
  return el("span", { className: "muted" }, text);
}

function runCell(row: AcrossRunsRow, actions: AcrossActions): Node {
  const open = el("button", { type: "button", className: "link run-link", title: `Open run ${row.run}`, dataset: { run: row.run } }, row.run);
  open.addEventListener("click", () => actions.openRun(row.run));
  return open;
}

/** A per-rank value of a run of several workers, with the rank it comes from. */
function slowestRank(row: AcrossRunsRow, text: string): Node {
  if (!row.slowest_worker || text === "–") return document.createTextNode(text);
  return el("span", {}, text, el("br"), quiet(`slowest rank: ${row.slowest_worker}`));
}

// The run's time lost per step and the share of the step it is ("73.08 ms (64 %)").
export function lostText(row: AcrossRunsRow): string {
  if (row.state !== "ready") return "–";
  if (!isNum(row.time_lost_us_per_step)) return isNum(row.time_lost_fraction) ? fmtPercent(row.time_lost_fraction) : "none";
  return `${fmtDuration(row.time_lost_us_per_step)} (${fmtPercent(row.time_lost_fraction, 0)})`;
}

function diagnosesCell(row: AcrossRunsRow): Node {
  if (row.state === "loading") return quiet("reading its traces…");
  if (row.state === "error") return el("span", { className: "state-error" }, row.error ?? "unreadable");
  if (!row.diagnoses.length) return quiet("none");
  const more = row.diagnosis_ids.length - row.diagnoses.length;
  return el(
    "span",
    { className: "top-diagnoses" },
    ...row.diagnoses.map((d) =>
      el(
        "span",
        {
          className: "top-diagnosis",
          title: `${d.where ? `${d.where}: ` : ""}${d.title} (explains ${fmtPercent(d.impact_fraction)} of step time)`,
          dataset: { diagnosisId: d.id },
        },
        badge(d.severity, d.severity, `Severity: ${d.severity}`),
        " ",
        d.id,
        // the impact on the line, not only on hover
        quiet(` ${fmtPercent(d.impact_fraction, 0)}`),
        d.where ? quiet(` (${d.where})`) : null,
      ),
    ),
    more > 0 ? quiet(` +${more} more`) : null,
  );
}

function severityCell(row: AcrossRunsRow): Node {
  if (row.state !== "ready") return quiet("–");
  const worst = row.diagnoses[0];
  return worst ? badge(worst.severity, worst.severity, `The run's most severe diagnosis: ${worst.id}`) : quiet("none");
}

const SEVERITY_OPTIONS: [string, string][] = [
  ["", "any severity"],
  ["high", "high"],
  ["medium", "medium or worse"],
  ["low", "low or worse"],
  ["info", "any diagnosis"],
  ["none", "no diagnosis"],
];

export function acrossPanel(page: AcrossRunsPage, actions: AcrossActions): Node[] {
  const current: AcrossQuery = { q: page.query, sort: page.sort, reverse: page.reverse, severity: page.severity };
  const ask = (change: Partial<AcrossQuery>, offset = 0) => actions.query({ ...current, ...change }, offset);
  const filter = el("input", {
    type: "search",
    id: "ki-runs-filter",
    value: page.query,
    placeholder: "Filter: run name, diagnosis id or severity",
    title: "Words that must all appear in the run name, one of its diagnosis ids or its diagnoses' severities (case-insensitive).",
    attrs: { "aria-label": "Filter the runs" },
  });
  let timer: number | undefined;
  filter.addEventListener("input", () => {
    window.clearTimeout(timer);
    timer = window.setTimeout(() => ask({ q: filter.value.trim() }), 250);
  });
  const severity = el("select", { id: "ki-runs-severity", title: "Only the runs with a diagnosis at least this severe (or without any)." });
  for (const [value, text] of SEVERITY_OPTIONS) severity.append(el("option", { value, selected: value === page.severity }, text));
  severity.addEventListener("change", () => ask({ severity: severity.value }));
  const status = el("span", { className: "page-text", id: "ki-runs-count" }, pageText(page));
  const tools: (Node | string)[] = [filter, " ", el("label", { className: "field" }, el("span", { className: "field-label" }, "Severity"), severity), " ", status];
  if (hasPages(page)) {
    // only when there is another page: on a single page the pager is not there at all
    const prev = el("button", { type: "button", className: "link", id: "ki-runs-prev", disabled: page.offset <= 0 }, "‹ previous");
    prev.addEventListener("click", () => ask({}, Math.max(0, page.offset - page.limit)));
    const next = el("button", { type: "button", className: "link", id: "ki-runs-next", disabled: page.offset + page.rows.length >= page.matched }, "next ›");
    next.addEventListener("click", () => ask({}, page.offset + page.limit));
    tools.push(" ", prev, " ", next);
  }
  const out: Node[] = [el("div", { className: "runs-tools" }, ...tools)];
  if (page.loading) out.push(el("div", { className: "state" }, `${fmtCount(page.loading)} ${page.loading === 1 ? "run is" : "runs are"} still being read; they are ranked when ready.`));
  if (!page.rows.length) return out;
  // a header orders by its column (worst first); a second click reverses
  const sortBy = (key: string): Column<AcrossRunsRow>["sort"] => ({
    key,
    state: page.sort === key ? (page.reverse ? "ascending" : "descending") : "none",
    toggle: () => ask({ sort: key, reverse: page.sort === key ? !page.reverse : false }),
  });
  out.push(
    table<AcrossRunsRow>(
      [
        { header: "#", numeric: true, title: `Place in this order (${orderText(page.sort, page.reverse)}).`, cell: (r) => String(r.position) },
        { header: "Run", cell: (r) => runCell(r, actions) },
        {
          header: "Severity",
          title: "The run's most severe diagnosis; ordered as report lists diagnoses: most severe, then the largest share of step time.",
          cell: severityCell,
          sort: sortBy("worst"),
        },
        {
          header: "Time lost /step",
          numeric: true,
          title: "What the run's costliest diagnosis explains: its share of the step (impact) × the median step time. The largest of its diagnoses, not their sum (two can explain the same time).",
          cell: (r) => lostText(r),
          sort: sortBy("lost"),
        },
        {
          header: "Step time",
          numeric: true,
          title: "Median step time of the slowest rank (the largest mean step time).",
          cell: (r) => slowestRank(r, isNum(r.median_step_us) ? fmtDuration(r.median_step_us) : "–"),
          cellTitle: (r) => (r.steps ? `median over ${r.steps} steps` : undefined),
          sort: sortBy("step"),
        },
        {
          header: "GPU utilization",
          numeric: true,
          title: "Busy kernel time of the busiest GPU / step time, of the slowest rank.",
          cell: (r) => slowestRank(r, isNum(r.gpu_utilization_fraction) ? fmtPercent(r.gpu_utilization_fraction) : "–"),
          sort: sortBy("util"),
        },
        {
          header: "World size",
          numeric: true,
          title: "Ranks of the job as recorded (distributedInfo); the workers read when not recorded.",
          cell: (r) => (r.state !== "ready" ? "–" : String(isNum(r.world_size) ? r.world_size : r.ranks)),
          cellTitle: (r) => (r.state === "ready" ? `${r.ranks} worker trace(s) read` : undefined),
        },
        { header: "Top diagnoses", title: "Most severe first, then the largest share of step time (the share after each).", cell: diagnosesCell },
      ],
      page.rows,
      { className: "across-runs" },
    ),
  );
  return out;
}
