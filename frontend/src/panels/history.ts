// The History view: one chart per series of runs (median step time over time, the
// run's step-to-step spread as a band, change points marked, outliers coloured; hover
// gives the run and its top diagnosis, a click opens it) and the table of change
// points, each with a button to open the run and one to diff it against the run before
// it. The document is /history's (compare/history.py); nothing is computed here but the
// chart's shape.

import type { LineSeriesOption, ScatterSeriesOption } from "echarts/charts";

import { chart } from "../charts";
import { el, muted, table } from "../dom";
import { fmtBytes, fmtDuration, fmtPercent, fmtSignedPercent, isNum } from "../format";
import type { ChartOption } from "../options";
import type { Palette } from "../theme";
import { tipNode } from "../tooltip";
import type { HistoryChange, HistoryDocument, HistoryRun, HistorySeries } from "../types";
import { subhead } from "./shell";

export interface HistoryActions {
  openRun: (run: string) => void;
  diffRuns: (base: string, exp: string) => void;
  // a new filter (typed): the page draws the matching series again
  filter: (query: string) => void;
}

const MEDIAN = "median step time";
const OUTLIER = "outlier";
// runs per series from which the points are drawn as one path (ECharts' large mode)
const LARGE_POINTS = 200;
const FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';

// x: start time (ms since the epoch); y: ms.
export interface HistoryPoints {
  runs: HistoryRun[];
  medianMs: [number, number | null][];
  lowMs: [number, number | null][];
  bandMs: [number, number | null][];
}

export function historyPoints(series: HistorySeries): HistoryPoints {
  const runs = series.runs;
  const x = (r: HistoryRun) => r.start_ns / 1e6;
  const median = (r: HistoryRun) => (isNum(r.median_step_us) ? r.median_step_us / 1000 : null);
  const std = (r: HistoryRun) => (isNum(r.std_step_us) ? r.std_step_us / 1000 : 0);
  return {
    runs,
    medianMs: runs.map((r) => [x(r), median(r)]),
    lowMs: runs.map((r) => {
      const m = median(r);
      return [x(r), m === null ? null : Math.max(0, m - std(r))];
    }),
    bandMs: runs.map((r) => {
      const m = median(r);
      return [x(r), m === null ? null : m + std(r) - Math.max(0, m - std(r))];
    }),
  };
}

function changeColor(verdict: string, p: Palette): string {
  if (verdict === "regressed") return p.bad;
  if (verdict === "improved") return p.good;
  return p.warn;
}

// Step time of each run over time: the median (line and points; outliers in the warning
// colour), median ± std as a band, and a vertical line at each step-time change point.
export function historyOption(series: HistorySeries, p: Palette): ChartOption {
  const pts = historyPoints(series);
  const stepChanges = series.changes.filter((c) => c.metric === "step_time" && c.verdict !== "outlier");
  const byRun = new Map(series.runs.map((r) => [r.run, r]));
  const axisStyle = {
    axisLine: { lineStyle: { color: p.axis } },
    axisLabel: { color: p.muted, fontFamily: FONT },
    nameTextStyle: { color: p.muted, fontFamily: FONT },
    splitLine: { lineStyle: { color: p.split } },
  };
  const low: LineSeriesOption = {
    type: "line",
    name: "band low",
    stack: "band",
    symbol: "none",
    lineStyle: { opacity: 0 },
    data: pts.lowMs,
    silent: true,
    tooltip: { show: false },
  };
  const band: LineSeriesOption = {
    type: "line",
    name: "step-to-step spread (± std)",
    stack: "band",
    symbol: "none",
    lineStyle: { opacity: 0 },
    areaStyle: { color: p.accent, opacity: 0.18 },
    data: pts.bandMs,
    silent: true,
    tooltip: { show: false },
  };
  // The line carries no symbols: 1,000 runs as 1,000 symbol elements per chart were most
  // of the view's drawing time (benchmarks/RESULTS.md). The runs' points are a
  // large-mode scatter (one path, hover and click still give the run's index); the
  // outliers, few, are drawn over them in the warning colour.
  const median: LineSeriesOption = {
    type: "line",
    name: MEDIAN,
    symbol: "none",
    silent: true,
    tooltip: { show: false },
    lineStyle: { width: 1.5, color: p.accent },
    data: pts.medianMs,
    markLine: {
      symbol: "none",
      silent: true,
      label: { color: p.text, fontFamily: FONT, formatter: (m: { name?: string }) => m.name ?? "" },
      data: stepChanges
        .filter((c) => byRun.has(c.run))
        .map((c) => ({
          name: `${c.verdict} ${fmtSignedPercent(c.change_fraction)}`,
          xAxis: (byRun.get(c.run) as HistoryRun).start_ns / 1e6,
          lineStyle: { color: changeColor(c.verdict, p), type: c.confirmed ? "solid" : "dashed", width: 1.5 },
        })),
    } as unknown as LineSeriesOption["markLine"],
  };
  const points: ScatterSeriesOption = {
    type: "scatter",
    name: MEDIAN,
    symbolSize: 6,
    large: true,
    largeThreshold: LARGE_POINTS,
    itemStyle: { color: p.accent },
    data: pts.medianMs,
  };
  const outliers: ScatterSeriesOption = {
    type: "scatter",
    name: OUTLIER,
    symbolSize: 6,
    itemStyle: { color: p.warn },
    // one entry per run (null where not an outlier) so that dataIndex is the run's index
    data: pts.medianMs.map(([x, y], i) => [x, series.runs[i].outlier.includes("step_time") ? y : null]),
  };
  return {
    animation: false,
    backgroundColor: "transparent",
    textStyle: { color: p.text, fontFamily: FONT },
    grid: { left: 4, right: 12, top: 24, bottom: 4, outerBoundsMode: "same", outerBoundsContain: "all" },
    tooltip: {
      trigger: "item",
      confine: true,
      backgroundColor: p.tooltipBackground,
      borderColor: p.tooltipBorder,
      textStyle: { color: p.text, fontFamily: FONT, fontSize: 12 },
      formatter: ((params: { dataIndex?: number }) => {
        const r = series.runs[params.dataIndex ?? 0];
        const rows = [
          { label: "started", value: r.start_time.replace("T", " ").replace("+00:00", " UTC") },
          { label: "median step", value: `${fmtDuration(r.median_step_us)} ± ${fmtDuration(r.std_step_us)}`, strong: true },
          { label: "GPU utilization", value: fmtPercent(r.gpu_utilization_fraction) },
          { label: "memory peak", value: fmtBytes(r.memory_peak_bytes) },
          { label: "top diagnosis", value: r.top_diagnosis ?? "none" },
        ];
        const marks = [...r.change.map((m) => `${m} changed here`), ...r.outlier.map((m) => `${m}: outlier`)];
        return tipNode(r.run, rows, marks.join("; ") || undefined);
      }) as unknown as string,
    },
    xAxis: { type: "time", name: "run start (UTC)", nameLocation: "middle", nameGap: 24, ...axisStyle },
    yAxis: { type: "value", name: "step time (ms)", min: 0, ...axisStyle },
    series: [low, band, median, points, outliers],
  };
}

function changesTable(series: HistorySeries, actions: HistoryActions): HTMLElement {
  const fmt = (c: HistoryChange, v: number) =>
    c.metric === "step_time" ? fmtDuration(v) : c.metric === "gpu_utilization" ? fmtPercent(v) : fmtBytes(v);
  return table<HistoryChange>(
    [
      {
        // the actions first: a wide row never pushes them out of the panel
        header: "",
        className: "actions",
        cell: (c) => {
          const open = el("button", { type: "button", className: "link" }, "open run");
          open.addEventListener("click", () => actions.openRun(c.run));
          const diff = el("button", { type: "button", className: "link", disabled: !c.previous_run }, "diff with previous");
          diff.addEventListener("click", () => c.previous_run && actions.diffRuns(c.previous_run, c.run));
          return el("span", null, open, diff);
        },
      },
      { header: "run", cell: (c) => c.run },
      { header: "metric", cell: (c) => c.metric },
      { header: "verdict", cell: (c) => `${c.verdict}${c.confirmed ? "" : " (unconfirmed)"}`, className: "verdict" },
      { header: "before → after", numeric: true, className: "fold", cell: (c) => `${fmt(c, c.before)} → ${fmt(c, c.after)}` },
      { header: "change", numeric: true, cell: (c) => fmtSignedPercent(c.change_fraction) },
      { header: "diagnoses", className: "wrap", cell: (c) => [...c.gained.map((g) => `+${g}`), ...c.lost.map((l) => `−${l}`)].join(", ") || "—" },
      { header: "settings changed", className: "wrap", cell: (c) => c.settings_changed.map((s) => `${s.field}: ${String(s.base)} → ${String(s.new)}`).join("; ") || "—" },
    ],
    series.changes,
    { limit: 20, className: "history-changes" },
  );
}

// Runs left out of the history because none of their traces could be read, with why
// (the reader's error, naming the file); null when there are none.
function unreadableRuns(doc: HistoryDocument): HTMLElement | null {
  const rows = Object.entries(doc.skipped).filter((e): e is [string, string] => typeof e[1] === "string" && e[1] !== "loading");
  if (!rows.length) return null;
  return el(
    "div",
    { className: "history-unreadable" },
    el("p", { className: "state error", title: "Left out of the history: none of their traces could be read." }, `${plural(rows.length, "run")} could not be read:`),
    table<[string, string]>(
      [
        { header: "Run", cell: ([run]) => run },
        { header: "Why", cell: ([, why]) => why },
      ],
      rows,
      { limit: 20, className: "history-skipped" },
    ),
  );
}

// "1 run", "49 runs" ("2 series": `many` when it is not the noun and an s).
export function plural(n: number, noun: string, many = `${noun}s`): string {
  return `${n.toLocaleString("en-US")} ${n === 1 ? noun : many}`;
}

// The series' heading: "nightly — 5 runs, 1 change point, 0 outliers".
export function seriesHeading(s: HistorySeries): string {
  const found = s.changes.filter((c) => c.verdict !== "outlier").length;
  const outliers = s.changes.length - found;
  return `${s.name} — ${plural(s.runs.length, "run")}, ${plural(found, "change point")}, ${plural(outliers, "outlier")}`;
}

// The series whose name, or one of whose runs' names, holds every word of `query`
// (case-insensitive): `[series of two runs or more, runs alone in their series]`.
export function historyGroups(doc: HistoryDocument, query: string): { series: HistorySeries[]; alone: HistoryRun[] } {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  const matches = (s: HistorySeries) => words.every((w) => s.name.toLowerCase().includes(w) || s.runs.some((r) => r.run.toLowerCase().includes(w)));
  const shown = doc.series.filter(matches);
  return { series: shown.filter((s) => s.runs.length > 1), alone: shown.filter((s) => s.runs.length === 1).map((s) => s.runs[0]) };
}

// The runs alone in their series, in one table: a chart of one point and "no change
// point" say nothing about them yet.
function aloneTable(runs: HistoryRun[], actions: HistoryActions): HTMLElement {
  return table<HistoryRun>(
    [
      {
        header: "",
        className: "actions",
        cell: (r) => {
          const open = el("button", { type: "button", className: "link", dataset: { run: r.run } }, "open run");
          open.addEventListener("click", () => actions.openRun(r.run));
          return open;
        },
      },
      { header: "run", cell: (r) => r.run },
      { header: "started (UTC)", cell: (r) => r.start_time.replace("T", " ").replace("+00:00", "") },
      { header: "median step", numeric: true, cell: (r) => (isNum(r.median_step_us) ? `${fmtDuration(r.median_step_us)} ± ${fmtDuration(r.std_step_us)}` : "–") },
      { header: "GPU utilization", numeric: true, cell: (r) => fmtPercent(r.gpu_utilization_fraction) },
      { header: "memory peak", numeric: true, cell: (r) => fmtBytes(r.memory_peak_bytes) },
      { header: "top diagnosis", cell: (r) => r.top_diagnosis ?? "none" },
    ],
    runs,
    { limit: 50, className: "history-alone" },
  );
}

export function historyPanel(doc: HistoryDocument, p: Palette, actions: HistoryActions, query = ""): Node[] | string {
  const unreadable = unreadableRuns(doc);
  if (!doc.series.length && !unreadable) return "No run with a readable trace yet.";
  const out: Node[] = [];
  const filter = el("input", {
    type: "search",
    id: "ki-history-filter",
    value: query,
    placeholder: "Filter: series or run name",
    title: "Words that must all appear in the series name or one of its runs' names (case-insensitive).",
    attrs: { "aria-label": "Filter the series" },
  });
  let timer: number | undefined;
  filter.addEventListener("input", () => {
    window.clearTimeout(timer);
    timer = window.setTimeout(() => actions.filter(filter.value.trim()), 250);
  });
  const { series, alone } = historyGroups(doc, query);
  const count = el("span", { className: "page-text", id: "ki-history-count" }, `${plural(series.length, "series", "series")} of two runs or more, ${plural(alone.length, "run")} without a series${query ? " matching" : ""}.`);
  out.push(el("div", { className: "runs-tools" }, filter, " ", count));
  const loading = Object.entries(doc.skipped).filter(([, why]) => why === "loading").length;
  if (loading) out.push(el("div", { className: "state" }, `${plural(loading, "run")} ${loading === 1 ? "is" : "are"} still being read; ${loading === 1 ? "it appears" : "they appear"} when ready.`));
  if (unreadable) out.push(unreadable);
  for (const s of series) {
    const block = el("section", { className: "history-series", dataset: { series: s.name } }, subhead(seriesHeading(s), `Grouped by ${s.grouped_by}. ${doc.rule}`));
    const open = (name: string, index: number) => {
      if ((name === MEDIAN || name === OUTLIER) && s.runs[index]) actions.openRun(s.runs[index].run);
    };
    const label = `Step time of the runs of ${s.name} over time, with change points; click a run to open it`;
    block.append(chart(historyOption(s, p), label, 240, undefined, open).node);
    block.append(s.changes.length ? changesTable(s, actions) : muted("No change point: every run is within the level's noise."));
    out.push(block);
  }
  if (alone.length) {
    out.push(
      el(
        "section",
        { className: "history-series history-without", id: "ki-history-alone" },
        subhead(`Runs without a series — ${plural(alone.length, "run")}`, "Each of these runs is alone in its series (no other run shares its label or its name without the run counter): nothing to compare it with yet. --group-by on the command line groups them otherwise."),
        aloneTable(alone, actions),
      ),
    );
  }
  if (!series.length && !alone.length && query) out.push(muted(`No series or run matches “${query}”.`));
  return out;
}
