// The view across runs (the tab's landing view): every run of the log directory ranked
// worst first (/across_runs: the CLI's order of diagnoses applied to each run's worst),
// one page at a time, with a filter; a click on a run opens it.

import { badge, el, table } from "../dom";
import { fmtCount, fmtDuration, fmtPercent, isNum } from "../format";
import type { AcrossRunsPage, AcrossRunsRow } from "../types";

export interface AcrossActions {
  openRun: (run: string) => void;
  // a new filter (typed) or page (offset of its first row in the matched list)
  query: (q: string, offset: number) => void;
}

// Text of the "n–m of N" line: the rows shown, of the matched runs, of all runs.
export function pageText(page: AcrossRunsPage): string {
  if (!page.matched) return page.query ? `No run matches “${page.query}” (of ${fmtCount(page.total)} runs).` : "No runs.";
  const first = page.offset + 1;
  const last = page.offset + page.rows.length;
  const of = page.matched === page.total ? `${fmtCount(page.total)} runs` : `${fmtCount(page.matched)} matching runs (of ${fmtCount(page.total)})`;
  return `Runs ${fmtCount(first)}–${fmtCount(last)} of ${of}, worst first.`;
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
        d.where ? quiet(` (${d.where})`) : null,
      ),
    ),
    more > 0 ? quiet(` +${more} more`) : null,
  );
}

export function acrossPanel(page: AcrossRunsPage, actions: AcrossActions): Node[] {
  const filter = el("input", {
    type: "search",
    id: "ki-runs-filter",
    value: page.query,
    placeholder: "Filter: run name or diagnosis id",
    title: "Words that must all appear in the run name or one of its diagnosis ids (case-insensitive).",
    attrs: { "aria-label": "Filter the runs" },
  });
  let timer: number | undefined;
  filter.addEventListener("input", () => {
    window.clearTimeout(timer);
    timer = window.setTimeout(() => actions.query(filter.value.trim(), 0), 250);
  });
  const prev = el("button", { type: "button", className: "link", id: "ki-runs-prev", disabled: page.offset <= 0 }, "‹ previous");
  prev.addEventListener("click", () => actions.query(page.query, Math.max(0, page.offset - page.limit)));
  const next = el("button", { type: "button", className: "link", id: "ki-runs-next", disabled: page.offset + page.rows.length >= page.matched }, "next ›");
  next.addEventListener("click", () => actions.query(page.query, page.offset + page.limit));
  const status = el("span", { className: "page-text", id: "ki-runs-count" }, pageText(page));
  const out: Node[] = [el("div", { className: "runs-tools" }, filter, " ", status, " ", prev, " ", next)];
  if (page.loading) out.push(el("div", { className: "state" }, `${fmtCount(page.loading)} runs are still being read; they are ranked when ready.`));
  if (!page.rows.length) return out;
  out.push(
    table<AcrossRunsRow>(
      [
        { header: "#", numeric: true, title: "Place in the ranking, 1 = worst.", cell: (r) => String(r.position) },
        { header: "Run", cell: (r) => runCell(r, actions) },
        {
          header: "Step time",
          numeric: true,
          title: "Median step time of the slowest rank (the largest mean step time).",
          cell: (r) => slowestRank(r, isNum(r.median_step_us) ? fmtDuration(r.median_step_us) : "–"),
          cellTitle: (r) => (r.steps ? `median over ${r.steps} steps` : undefined),
        },
        {
          header: "GPU utilization",
          numeric: true,
          title: "Busy kernel time of the busiest GPU / step time, of the slowest rank.",
          cell: (r) => slowestRank(r, isNum(r.gpu_utilization_fraction) ? fmtPercent(r.gpu_utilization_fraction) : "–"),
        },
        {
          header: "World size",
          numeric: true,
          title: "Ranks of the job as recorded (distributedInfo); the workers read when not recorded.",
          cell: (r) => (r.state !== "ready" ? "–" : String(isNum(r.world_size) ? r.world_size : r.ranks)),
          cellTitle: (r) => (r.state === "ready" ? `${r.ranks} worker trace(s) read` : undefined),
        },
        { header: "Top diagnoses", title: "Most severe first, then the largest share of step time.", cell: diagnosesCell },
      ],
      page.rows,
      { className: "across-runs" },
    ),
  );
  return out;
}
