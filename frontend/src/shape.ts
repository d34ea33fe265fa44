// Data shaping: summary JSON → what a table or chart needs. Pure functions (no DOM, no
// ECharts), unit-tested with node --test.

import {
  NA,
  binLabel,
  byteAxisUnit,
  fmtBytes,
  fmtCount,
  fmtDuration,
  fmtPercent,
  humanize,
  isNum,
} from "./format";
import {
  BREAKDOWN_LABELS,
  BREAKDOWN_ORDER,
  DEFINITIONS,
  IDLE_LABELS,
  IDLE_ORDER,
  SEVERITY_ORDER,
} from "./labels";
import type { Num, SpanEntry } from "./answers";
import { formatEvidence, saysNothing } from "./evidence";
import type { CommunicationPanel, Diagnosis, DiffDocument, DiffRow, HistogramBin, IdleDevice, MemoryDevice, RankRow, StepsPanel, Straggler } from "./types";

// ------------------------------------------------------------------ diagnoses

export function severityRank(severity: string): number {
  const i = SEVERITY_ORDER.indexOf(severity);
  return i < 0 ? SEVERITY_ORDER.length : i;
}

// Most severe first; within a severity, the larger estimated impact first; else the
// backend's order (stable sort).
export function sortDiagnoses(list: Diagnosis[] | null | undefined): Diagnosis[] {
  return [...(list ?? [])].sort((a, b) => {
    const bySeverity = severityRank(a.severity) - severityRank(b.severity);
    if (bySeverity !== 0) return bySeverity;
    const ia = isNum(a.impact_fraction) ? a.impact_fraction : -1;
    const ib = isNum(b.impact_fraction) ? b.impact_fraction : -1;
    return ib - ia;
  });
}

export const PANEL_IDS = ["overview", "kernels", "idle", "communication", "memory", "efficiency", "health"] as const;
export type PanelId = (typeof PANEL_IDS)[number] | "ranks";

// A diagnosis's `panel` (summary key) → the page's panel.
export function panelForDiagnosis(panel: string | undefined, allRanks = false): PanelId {
  switch (panel) {
    case "steps":
    case "overview":
      return "overview";
    case "kernels":
      return "kernels";
    case "idle":
      return "idle";
    case "communication":
      return "communication";
    case "memory":
      return "memory";
    case "efficiency":
      return "efficiency";
    case "health":
      return "health";
    case "run":
      return allRanks ? "ranks" : "communication";
    default:
      return "overview";
  }
}

export interface EvidenceTable {
  columns: { key: string; label: string; definition: string; numeric: boolean }[];
  rows: string[][];
}

// One evidence value: `text` always (a table's text is a one-line summary: "3 rows"), and
// `table` for a list of records (each record a row, its keys the columns, each cell
// formatted by the unit its column key names). `detail`: how the verdict was reached
// (a test's statistic, a threshold), shown folded under the card's main numbers.
export interface EvidenceItem {
  key: string;
  label: string;
  text: string;
  definition: string;
  table?: EvidenceTable;
  detail?: boolean;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

// A list of records as a table: the union of their keys (first-seen order) as columns,
// a cell per key formatted by that key's unit (a missing key shows "n/a").
export function evidenceTable(records: Record<string, unknown>[]): EvidenceTable {
  const keys: string[] = [];
  for (const r of records) for (const k of Object.keys(r)) if (!keys.includes(k)) keys.push(k);
  return {
    columns: keys.map((k) => ({
      key: k,
      label: evidenceLabel(k),
      definition: DEFINITIONS[k] ?? `${evidenceLabel(k)} (${k})`,
      numeric: records.some((r) => isNum(r[k])),
    })),
    rows: records.map((r) => keys.map((k) => formatEvidence(k, r[k]))),
  };
}

// A mapping's key as the tab shows it: our lower-case words humanized ("all_reduce" →
// "All reduce"), names from the trace (cudaMalloc, a kernel) as they are.
function keyText(key: string): string {
  return /^[a-z][a-z0-9_]*$/.test(key) ? humanize(key) : key;
}

// One value by the unit its key names: evidence.ts, the formatter `report` and
// `--format markdown` share (tb_kineto_insights/analysis/evidence_units.py); a mapping's
// snake_case keys humanized.
export function formatByKey(key: string, value: unknown): string {
  return formatEvidence(key, value, keyText);
}

// Evidence that says how the verdict was reached rather than what the job does: a test's
// statistic, the sample it ran on, a threshold. Shown folded ("How it was decided").
export const DETAIL_EVIDENCE_KEYS: ReadonlySet<string> = new Set([
  "p_value",
  "lateness_noise_us",
  "lateness_min_excess_us",
  "tested_steps",
  "steps_used",
  "matched_count",
  "last_count",
  "last_steps",
  "last_fraction",
  "threshold_fraction",
  "high_steps_to_capacity",
  "short_threshold_us",
  "min_steps",
  "rule",
  "r2",
  "peak_source",
  "wait_basis",
  "top_kind_busbw_basis",
  "cause_classes",
  "cause_reference_ranks",
]);

const EVIDENCE_LABELS: Record<string, string> = {
  last_fraction: "Arrives last in",
  delay_us_per_step: "Delay it causes the others (its cost)",
  others_wait_us_per_step: "Others wait for it in collectives",
  others_hidden_wait_us_per_step: "… of it hidden behind their compute",
  others_exposed_wait_us_per_step: "… of it exposed (lengthens their step)",
  lateness_excess_us_per_step: "Later than the others",
  lateness_noise_us: "Noise of lateness (run pooled with reference)",
  lateness_min_excess_us: "Late in every step by at least",
  p_value: "Chance of lateness this consistent",
  share_of_step: "Of step time",
  last_count: "Last at",
  matched_count: "Matched collectives",
  short_count_fraction: "Short kernels",
  short_time_fraction: "Time in short kernels",
  launch_bound_fraction: "Launch-bound kernels",
  gpu_utilization_fraction: "GPU utilization",
  gpu_busy_fraction: "GPU busy",
  idle_fraction_of_step_time: "Idle / step time",
  fraction_of_idle: "Share of idle",
  fraction_of_step_time: "Of step time",
  exposed_fraction: "Exposed / step time",
  comm_fraction: "Communication / step time",
  overlap_fraction: "Overlapped",
  threshold_fraction: "Threshold",
  // thresholds that ride in the evidence say so: they are the rule, not a measurement
  high_steps_to_capacity: "Threshold: high severity when full within",
  short_threshold_us: "Threshold: short kernel under",
  min_steps: "Threshold: steps needed",
  rule: "Threshold",
  r2: "r²",
  steps_used: "Steps",
  step_cv: "Coefficient of variation",
};

function evidenceLabel(key: string): string {
  if (EVIDENCE_LABELS[key]) return EVIDENCE_LABELS[key];
  const stripped = key
    .replace(/_us_per_step$/, "_per_step")
    .replace(/_(us|bytes|gbps)$/, "")
    .replace(/_fraction$/, "_share");
  return humanize(stripped);
}

// Evidence keys that sum over the whole profile (every step), beside per-step values:
// their label says "total" (and over how many steps when known).
export const TOTAL_EVIDENCE_KEYS: ReadonlySet<string> = new Set([
  "idle_us",
  "launch_bound_idle_us",
  "launch_bound_kernel_us",
  "launch_bound_gaps",
  "short_kernel_busy_us",
  "top_kind_time_us",
  "top_kind_count",
  "matched_count",
  "last_count",
  "op_live_count",
  "wait_us",
  "time_us",
]);

// A signed excess over the median rank, "+18.56 ms/step" as the title writes it.
function signed(key: string, value: number): string {
  const text = formatEvidence(key, Math.abs(value));
  return `${value >= 0 ? "+" : "\u2212"}${text}`;
}

// Classes of a straggler's cause worth naming: those whose excess is at least this share
// of the cause's own (the rest are summed up in one phrase).
const CLASS_MIN_SHARE = 0.05;

// A straggler's cause (`evidence.cause`) as its own evidence items, each in its unit,
// with the same numbers as the diagnosis title ("host time outside traced ops,
// +18.56 ms/step against the median rank before the collectives it is late to"). Kept
// readable: more kernel launches than the median rank only when there are more, and the
// classes that matter (the others in one phrase).
function causeItems(cause: Record<string, unknown>): EvidenceItem[] {
  const item = (key: string, label: string, text: string): EvidenceItem => ({
    key,
    label,
    text,
    definition: DEFINITIONS[key] ?? label,
    ...(DETAIL_EVIDENCE_KEYS.has(key) ? { detail: true } : {}),
  });
  const named = typeof cause.label === "string" && cause.label;
  const out = [item("cause", "Why it is late", named ? (cause.label as string) : "not in its traced time")];
  const late = isNum(cause.late_collectives) ? cause.late_collectives : 0;
  out.push(
    item(
      "cause_basis",
      "Measured on",
      cause.basis === "before_late_collectives"
        ? `the time before the ${formatEvidence("late_collectives", late)} collectives it is late to`
        : "whole steps",
    ),
  );
  if (isNum(cause.us_per_step)) out.push(item("cause_us_per_step", "More than the median rank", signed("us_per_step", cause.us_per_step)));
  if (isNum(cause.straggler_us_per_step)) out.push(item("cause_straggler_us_per_step", "On this rank", formatEvidence("straggler_us_per_step", cause.straggler_us_per_step)));
  if (isNum(cause.median_rank_us_per_step))
    out.push(item("cause_median_rank_us_per_step", "On the median rank", formatEvidence("median_rank_us_per_step", cause.median_rank_us_per_step)));
  if (isNum(cause.share_of_delay)) out.push(item("cause_share_of_delay", "Of its delay", formatEvidence("share_of_delay", cause.share_of_delay)));
  if (isNum(cause.launches_per_step_excess) && cause.launches_per_step_excess > 0) {
    out.push(item("cause_launches_per_step_excess", "Kernels launched beyond the median rank", signed("launches_per_step_excess", cause.launches_per_step_excess)));
  }
  for (const [field, label] of [
    ["top", "Behind it"],
    ["frames", "In Python frames"],
  ] as const) {
    const rows = cause[field];
    if (Array.isArray(rows) && rows.length && rows.every(isRecord)) {
      // `us_per_step` is the excess over the median rank: named so that it reads in µs
      const records: Record<string, unknown>[] = (rows as Record<string, unknown>[]).map(({ us_per_step, ...rest }) => ({
        ...rest,
        excess_us_per_step: us_per_step,
      }));
      out.push({
        ...item(`cause_${field}`, label, `${fmtCount(records.length)} ${records.length === 1 ? "row" : "rows"}`),
        table: evidenceTable(records),
      });
    }
  }
  if (isRecord(cause.classes)) {
    const total = isNum(cause.us_per_step) ? Math.abs(cause.us_per_step) : 0;
    const classes = Object.entries(cause.classes).filter((e): e is [string, number] => isNum(e[1]));
    const big = classes.filter(([, v]) => Math.abs(v) >= CLASS_MIN_SHARE * total).sort((a, b) => Math.abs(b[1]) - Math.abs(a[1]));
    const rest = classes.length - big.length;
    const parts = big.map(([k, v]) => `${humanize(k)}: ${signed("classes", v)}`);
    if (rest) parts.push(`${rest} other ${rest === 1 ? "class" : "classes"} within ±${formatEvidence("classes", CLASS_MIN_SHARE * total)}`);
    out.push(item("cause_classes", "Every class against the median rank", parts.join(", ") || NA));
  }
  return out;
}

// stepCount: the profiled steps the totals cover (else the evidence's own `steps`).
export function evidenceItems(evidence: Record<string, unknown> | null | undefined, stepCount?: Num): EvidenceItem[] {
  const out: EvidenceItem[] = [];
  const own = evidence?.steps;
  const steps = isNum(own) ? own : isNum(stepCount) ? stepCount : null;
  for (const [key, value] of Object.entries(evidence ?? {})) {
    // an empty list or object says nothing (no errors logged, no damage listed), nor an
    // object of nulls (a bus bandwidth per collective kind, none sized)
    if (saysNothing(value)) continue;
    if (key === "cause" && isRecord(value)) {
      out.push(...causeItems(value));
      continue;
    }
    const total = TOTAL_EVIDENCE_KEYS.has(key) ? (steps !== null ? `, total over ${steps} steps` : ", total") : "";
    const records = Array.isArray(value) && value.every(isRecord) ? (value as Record<string, unknown>[]) : null;
    out.push({
      key,
      label: evidenceLabel(key) + total,
      text: records ? `${fmtCount(records.length)} ${records.length === 1 ? "row" : "rows"}` : formatByKey(key, value),
      definition: DEFINITIONS[key] ?? `${evidenceLabel(key)} (${key})`,
      ...(records ? { table: evidenceTable(records) } : {}),
      ...(DETAIL_EVIDENCE_KEYS.has(key) ? { detail: true } : {}),
    });
  }
  return out;
}

// ------------------------------------------------------------------ steps

export interface BreakdownChart {
  steps: string[]; // "#2", "#3", …
  series: { key: string; label: string; valuesMs: number[] }[];
  utilizationPct: (number | null)[];
  stepMs: (number | null)[];
}

export function breakdownChart(steps: StepsPanel | null | undefined): BreakdownChart {
  const rows = steps?.steps ?? [];
  const order = steps?.breakdown_order?.length ? steps.breakdown_order : BREAKDOWN_ORDER;
  const series = order
    .map((key) => ({
      key,
      label: BREAKDOWN_LABELS[key] ?? humanize(key),
      valuesMs: rows.map((r) => {
        const v = r.breakdown_us?.[key];
        return isNum(v) ? v / 1000 : 0;
      }),
    }))
    .filter((s) => s.valuesMs.some((v) => v > 0));
  return {
    steps: rows.map((r) => `#${r.number}`),
    series,
    utilizationPct: rows.map((r) =>
      isNum(r.gpu_utilization_fraction) ? r.gpu_utilization_fraction * 100 : null,
    ),
    stepMs: rows.map((r) => (isNum(r.duration_us) ? r.duration_us / 1000 : null)),
  };
}

// Mean breakdown as shares of the mean step, largest first, for the legend line.
export function breakdownShares(steps: StepsPanel | null | undefined): { key: string; label: string; us: number; fraction: number }[] {
  const mean = steps?.mean_breakdown_us ?? {};
  const total = Object.values(mean).reduce<number>((a, v) => a + (isNum(v) ? v : 0), 0);
  return Object.entries(mean)
    .filter(([, v]) => isNum(v) && v > 0)
    .map(([key, v]) => ({
      key,
      label: BREAKDOWN_LABELS[key] ?? humanize(key),
      us: v as number,
      fraction: total > 0 ? (v as number) / total : 0,
    }))
    .sort((a, b) => b.us - a.us);
}

// Step boundaries for markLines on a time axis in ms: each step's start, and the end of
// the last one.
export function stepBoundariesMs(steps: StepsPanel | null | undefined): { xMs: number; label: string }[] {
  const rows = (steps?.steps ?? []).filter((r) => isNum(r.start_us));
  const out = rows.map((r) => ({ xMs: (r.start_us as number) / 1000, label: `#${r.number}` }));
  const last = rows[rows.length - 1];
  if (last && isNum(last.duration_us)) {
    out.push({ xMs: ((last.start_us as number) + last.duration_us) / 1000, label: "end" });
  }
  return out;
}

// ------------------------------------------------------------------ histograms

export interface HistogramChart {
  labels: string[];
  counts: number[];
  timesUs: number[];
  short: boolean[];
  ranges: string[];
}

export function histogramChart(bins: HistogramBin[] | null | undefined, shortUs?: Num): HistogramChart {
  const rows = bins ?? [];
  // Drop empty bins at both ends so the chart starts and ends where the data does.
  let lo = 0;
  let hi = rows.length;
  while (lo < hi && !rows[lo].count) lo += 1;
  while (hi > lo && !rows[hi - 1].count) hi -= 1;
  const kept = rows.slice(lo, hi);
  return {
    labels: kept.map((b) => binLabel(b.lo_us, b.hi_us)),
    counts: kept.map((b) => b.count ?? 0),
    timesUs: kept.map((b) => (isNum(b.time_us) ? b.time_us : 0)),
    short: kept.map((b) => isNum(shortUs) && isNum(b.hi_us) && b.hi_us <= shortUs),
    ranges: kept.map((b) =>
      isNum(b.hi_us) ? `${fmtDuration(b.lo_us)} ≤ duration < ${fmtDuration(b.hi_us)}` : `duration ≥ ${fmtDuration(b.lo_us)}`,
    ),
  };
}

// ------------------------------------------------------------------ idle

export function mainDevice<T extends { device: number | string }>(
  devices: T[] | null | undefined,
  main: number | string | null | undefined,
): T | undefined {
  const list = devices ?? [];
  return list.find((d) => String(d.device) === String(main)) ?? list[0];
}

export interface CauseRow {
  key: string;
  label: string;
  us: number;
  fractionOfIdle: number | null;
  fractionOfStep: number | null;
}

export function idleCauses(device: IdleDevice | null | undefined, order?: string[]): CauseRow[] {
  const causes = device?.causes ?? {};
  const keys = order?.length ? order : Object.keys(causes).length ? Object.keys(causes) : IDLE_ORDER;
  return keys
    .flatMap((k) => {
      const cause = causes[k];
      if (!cause) return [];
      return [
        {
          key: k,
          label: IDLE_LABELS[k] ?? humanize(k),
          us: isNum(cause.us) ? cause.us : 0,
          fractionOfIdle: isNum(cause.fraction_of_idle) ? cause.fraction_of_idle : null,
          fractionOfStep: isNum(cause.fraction_of_step_time) ? cause.fraction_of_step_time : null,
        },
      ];
    });
}

export interface PythonFrameRow {
  frame: string; // as Kineto names it: path/file.py(42): function
  short: string; // the file's folder dropped: file.py(42): function
  perStepUs: number;
  fractionOfIdle: number | null;
  mainCause: string | null; // the idle cause holding most of the frame's idle
  afterSyncUs: number;
  perStepUsList: number[];
  callers: { path: string[]; us: number }[]; // nearest caller first
}

// "path/to/train.py(42): step" -> "train.py(42): step" (other names unchanged).
export function shortFrame(name: string): string {
  const m = /^(.*)\((\d+)\): (.+)$/.exec(name);
  if (!m) return name;
  const file = m[1].split(/[/\\]/).pop() ?? m[1];
  return `${file}(${m[2]}): ${m[3]}`;
}

// Rows of "Python the host was in while the GPU idled", in the backend's order
// (largest idle first).
export function pythonFrameRows(device: IdleDevice | null | undefined): PythonFrameRow[] {
  return (device?.python_frames ?? []).map((f) => {
    const causes = Object.entries(f.causes_us ?? {}).filter(([, v]) => isNum(v) && v > 0) as [string, number][];
    causes.sort((a, b) => b[1] - a[1]);
    return {
      frame: f.frame,
      short: shortFrame(f.frame),
      perStepUs: isNum(f.idle_us_per_step) ? f.idle_us_per_step : 0,
      fractionOfIdle: isNum(f.fraction_of_idle) ? f.fraction_of_idle : null,
      mainCause: causes.length ? causes[0][0] : null,
      afterSyncUs: isNum(f.after_sync_us) ? f.after_sync_us : 0,
      perStepUsList: (f.per_step_us ?? []).filter(isNum),
      callers: (f.callers ?? []).map((c) => ({ path: c.callers ?? [], us: isNum(c.idle_us) ? c.idle_us : 0 })),
    };
  });
}

export interface IdlePerStepChart {
  steps: string[];
  series: { key: string; label: string; valuesMs: number[] }[];
}

export function idlePerStep(device: IdleDevice | null | undefined, order?: string[]): IdlePerStepChart {
  const rows = device?.per_step ?? [];
  const keys = order?.length ? order : IDLE_ORDER;
  return {
    steps: rows.map((r) => `#${r.number}`),
    series: keys
      .map((key) => ({
        key,
        label: IDLE_LABELS[key] ?? humanize(key),
        valuesMs: rows.map((r) => {
          const v = r.causes_us?.[key];
          return isNum(v) ? v / 1000 : 0;
        }),
      }))
      .filter((s) => s.valuesMs.some((v) => v > 0)),
  };
}

// ------------------------------------------------------------------ communication

export interface CommChart {
  steps: string[];
  exposedMs: number[];
  overlappedMs: number[];
  exposedPct: (number | null)[];
}

export function commPerStep(panel: CommunicationPanel | null | undefined): CommChart {
  const rows = panel?.steps ?? [];
  return {
    steps: rows.map((r) => `#${r.number}`),
    exposedMs: rows.map((r) => (isNum(r.exposed_us) ? r.exposed_us / 1000 : 0)),
    overlappedMs: rows.map((r) => (isNum(r.overlapped_us) ? r.overlapped_us / 1000 : 0)),
    exposedPct: rows.map((r) => (isNum(r.exposed_fraction) ? r.exposed_fraction * 100 : null)),
  };
}

// ------------------------------------------------------------------ memory

export interface MemoryChart {
  unit: string;
  divisor: number;
  allocated: [number, number][]; // [t ms, value in unit]
  reserved: [number, number][];
  maxBytes: number;
}

function zipSeries(s: { t_us?: number[]; bytes?: number[] } | null | undefined, divisor: number): [number, number][] {
  const t = s?.t_us ?? [];
  const b = s?.bytes ?? [];
  const n = Math.min(t.length, b.length);
  const out: [number, number][] = [];
  for (let i = 0; i < n; i += 1) {
    if (isNum(t[i]) && isNum(b[i])) out.push([t[i] / 1000, b[i] / divisor]);
  }
  return out;
}

export function memoryChart(device: MemoryDevice | null | undefined): MemoryChart {
  const alloc = device?.series?.allocated;
  const res = device?.series?.reserved;
  let max = 0;
  for (const s of [alloc, res]) for (const v of s?.bytes ?? []) if (isNum(v) && v > max) max = v;
  const { unit, divisor } = byteAxisUnit(max);
  return { unit, divisor, allocated: zipSeries(alloc, divisor), reserved: zipSeries(res, divisor), maxBytes: max };
}

// The device the memory panel opens on: the summary's main device, else the first
// device with a CUDA-like type, else the first.
export function defaultMemoryDevice(devices: MemoryDevice[] | null | undefined, main: string | null | undefined): MemoryDevice | undefined {
  const list = devices ?? [];
  return (
    list.find((d) => d.device === main) ??
    list.find((d) => d.device_type !== 0 && d.device_type !== null && d.device_type !== undefined) ??
    list[0]
  );
}

// A device whose allocations never reach this many bytes is not offered in the memory
// panel's device list (the CPU of a GPU run, "CPU — peak 8 B"), unless it is all there is
// or is asked for; it is named in a line instead.
export const MEMORY_DEVICE_MIN_BYTES = 1 << 20;

// The devices the memory panel offers, and those left out as too small to look at.
export function memoryDeviceChoice(
  devices: MemoryDevice[],
  current: MemoryDevice,
): { offered: MemoryDevice[]; tooSmall: MemoryDevice[] } {
  const big = (d: MemoryDevice) => isNum(d.peak_allocated_bytes) && d.peak_allocated_bytes >= MEMORY_DEVICE_MIN_BYTES;
  const offered = devices.filter((d) => d === current || big(d));
  return { offered, tooSmall: devices.filter((d) => !offered.includes(d)) };
}

// ------------------------------------------------------------------ runs / spans

export function loadText(entry: Pick<SpanEntry, "state" | "progress"> | null | undefined): string {
  if (!entry) return "";
  if (entry.state === "loading") {
    const f = entry.progress?.estimated_fraction;
    return isNum(f) ? `reading ${Math.round(f * 100)} %` : "reading";
  }
  if (entry.state === "queued") return "queued";
  if (entry.state === "error") return "error";
  if (entry.state === "not_loaded") return "not read yet";
  return "";
}

export function spanLabel(span: SpanEntry): string {
  const state = span.state === "ready" ? "" : loadText(span);
  const size = isNum(span.size_bytes) ? ` (${fmtBytes(span.size_bytes)})` : "";
  return `${span.span}${size}${state ? ` — ${state}` : ""}`;
}

// ------------------------------------------------------------------ diff

export interface ChangeBar {
  name: string;
  deltaUs: number;
  verdict: string;
  status: "changed";
  baseUs: number | null;
  expUs: number | null;
}

// The largest per-step time changes of a diff table (kernels or ops), largest |Δ| first:
// names on both sides only. A name on one side only is no faster or slower version of
// anything: see oneSidedRows.
export function largestChanges(table: DiffDocument["kernels"] | DiffDocument["ops"] | undefined, limit = 12): ChangeBar[] {
  const rows: ChangeBar[] = [];
  for (const r of table?.changed ?? []) {
    const d = isNum(r.delta_time_us_per_step) ? r.delta_time_us_per_step : r.time_us_per_step?.delta;
    if (!isNum(d) || d === 0) continue;
    rows.push({
      name: r.name,
      deltaUs: d,
      verdict: r.time_us_per_step?.verdict ?? "within noise",
      status: "changed",
      baseUs: isNum(r.time_us_per_step?.base) ? (r.time_us_per_step?.base as number) : null,
      expUs: isNum(r.time_us_per_step?.exp) ? (r.time_us_per_step?.exp as number) : null,
    });
  }
  rows.sort((a, b) => Math.abs(b.deltaUs) - Math.abs(a.deltaUs) || a.name.localeCompare(b.name));
  return rows.slice(0, limit);
}

// What the tab calls a one-sided row's status (the diff's row.status).
export const ONE_SIDED_LABELS: Record<string, string> = { added: "added", removed: "removed", moved_out: "moved out" };

export interface OneSidedRow {
  name: string;
  status: "added" | "removed" | "moved_out";
  label: string; // "added", "removed", "moved out"
  perStepUs: number | null; // time /step on the side that has it
  note: string | null;
}

// Names only one side has (added, removed, moved out of the traced threads), largest
// time /step first; no verdict.
export function oneSidedRows(table: DiffDocument["kernels"] | DiffDocument["ops"] | undefined, limit = 12): OneSidedRow[] {
  const rows: OneSidedRow[] = [];
  const add = (list: DiffRow[] | undefined, fallback: "added" | "removed") => {
    for (const r of list ?? []) {
      const status = r.status === "added" || r.status === "removed" || r.status === "moved_out" ? r.status : fallback;
      const t = r.time_us_per_step;
      const v = status === "added" ? t?.exp : t?.base;
      rows.push({ name: r.name, status, label: ONE_SIDED_LABELS[status], perStepUs: isNum(v) ? v : null, note: r.note ?? null });
    }
  };
  add(table?.added, "added");
  add(table?.removed, "removed");
  rows.sort((a, b) => (b.perStepUs ?? 0) - (a.perStepUs ?? 0) || a.name.localeCompare(b.name));
  return rows.slice(0, limit);
}

export interface VerdictCounts {
  improved: number;
  regressed: number;
  changed: number;
  "within noise": number;
  negligible: number;
  unchanged: number;
  "not judged": number;
}

export function verdictCounts(doc: DiffDocument | null | undefined): VerdictCounts {
  const out: VerdictCounts = { improved: 0, regressed: 0, changed: 0, "within noise": 0, negligible: 0, unchanged: 0, "not judged": 0 };
  for (const m of doc?.metrics ?? []) {
    const v = m.verdict as keyof VerdictCounts;
    if (v in out) out[v] += 1;
  }
  return out;
}

// The headline sentence parts: "114.53 ms → 42.23 ms per step".
export function headlineParts(doc: DiffDocument | null | undefined): {
  base: string;
  exp: string;
  speedup: number | null;
  change: number | null;
  verdict: string;
  text: string | null;
  gained: { id: string; severity: string; title: string }[];
} | null {
  const h = doc?.headline;
  if (!h) return null;
  return {
    base: fmtDuration(h.base_step_us),
    exp: fmtDuration(h.exp_step_us),
    speedup: isNum(h.speedup) ? h.speedup : null,
    change: isNum(h.change_fraction) ? h.change_fraction : null,
    verdict: h.verdict ?? "within noise",
    text: typeof h.text === "string" && h.text ? h.text : null,
    gained: h.gained ?? [],
  };
}

// The colour class of the diff's "1.15× faster": green or red only when the verdict says
// the step time moved beyond its noise (a within-noise "faster" was green).
export function speedupTone(verdict: string, speedup: number | null): "faster" | "slower" | "within-noise" {
  if (verdict === "improved" && speedup !== null && speedup > 1) return "faster";
  if (verdict === "regressed" && speedup !== null && speedup < 1) return "slower";
  return "within-noise";
}

// The note under a diff's bar chart of changes: what each colour means, the grey named by
// the verdicts it stands for here ("within noise", "moved partly"…), as the bars colour
// every verdict other than improved and regressed grey.
export function changesNote(rows: ChangeBar[], unchanged: number): string {
  const grey = [...new Set(rows.map((r) => r.verdict).filter((v) => v !== "improved" && v !== "regressed"))];
  const greyText = grey.length ? grey.join(" or ") : "within noise";
  return `${unchanged} more unchanged. Green: faster beyond noise, red: slower beyond noise, grey: ${greyText}.`;
}

// Top rows of a {name: count} object, largest first.
export function countRows(counts: Record<string, Num> | null | undefined): [string, number][] {
  return Object.entries(counts ?? {})
    .filter((e): e is [string, number] => isNum(e[1]))
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
}


// ------------------------------------------------------------------ across ranks

export type RankPart = "wait" | "transfer" | "exposed_wait" | "exposed_transfer";

// A rank's value per step: the run view's own `<part>_us_per_step` when present; for the
// wait, the total `wait_us_total` ÷ the rank's steps.
export function rankPerStep(r: RankRow | null | undefined, part: RankPart): number | null {
  if (!r) return null;
  const own = r[`${part}_us_per_step`];
  if (isNum(own)) return own;
  const total = r.wait_us_total;
  if (part === "wait" && isNum(total) && isNum(r.step_count) && r.step_count > 0) return total / r.step_count;
  return null;
}

// A rank's lateness per collective (this rank's start − the earliest start, mean over
// matched collectives). (A cached view of an older shape never reaches the page: the
// cache drops entries that do not fit the schema.)
export function latenessPerCollective(r: RankRow | null | undefined): number | null {
  if (!r) return null;
  return isNum(r.lateness_us_per_collective) ? r.lateness_us_per_collective : null;
}

// Bandwidth basis in words: what the busbw was computed from.
export function busbwBasisText(basis: string | null | undefined): string {
  if (basis === "matched_transfer") return "from the matched transfer across ranks (waiting left out)";
  if (basis === "least_wait_estimate")
    return "a lower bound estimated on this rank from its collectives with the least waiting (a rank that waits in every collective looks slower; the view across ranks measures it)";
  if (basis === "kernel_time" || !basis) return "from this rank's kernel time, which includes waiting for the other ranks";
  return basis.replace(/_/g, " ");
}

// The straggler in one explained breakdown: what the other ranks wait for it (hidden
// behind their compute + exposed), what it costs them (how much earlier all could
// start), and why it is late (the cause class against the median rank). Null without a
// straggler or without the others' wait.
export function stragglerStory(s: Straggler | null | undefined): string | null {
  if (!s || !isNum(s.others_wait_us_per_step)) return null;
  const cause = s.cause;
  const why =
    cause && cause.class
      ? ` Why it is late: ${cause.label}, +${fmtDuration(cause.us_per_step)}/step against the median rank${cause.top?.length ? `, most in ${cause.top[0].name}` : ""}${cause.frames?.length ? `, in Python ${shortFrame(cause.frames[0].frame)} (+${fmtDuration(cause.frames[0].us_per_step)}/step)` : ""}.`
      : "";
  return (
    `The other ranks wait ${fmtDuration(s.others_wait_us_per_step)}/step in their collectives for rank ${s.rank}: ` +
    `${fmtDuration(s.others_hidden_wait_us_per_step)} of it hidden behind their own compute, ${fmtDuration(s.others_exposed_wait_us_per_step)} exposed. ` +
    `Without it they could all start ${fmtDuration(s.delay_us_per_step)}/step earlier (its cost, ${fmtPercent(s.share_of_step, 0)} of their step).` +
    why
  );
}

// ------------------------------------------------------------------ many ranks

// Above this many ranks the all-ranks view shows distributions and the worst ranks
// instead of one bar per rank, and the per-rank table shows its first rows only.
export const MANY_RANKS = 32;
export const WORST_RANKS = 10;
export const RANK_TABLE_LIMIT = 50;

// Ranks per value bin: `bins` equal-width bins from the smallest to the largest value
// (the last bin holds the largest value); ranks without a value are counted in `missing`.
// `flagged[i]`: bin i holds `flagRank` (the straggler); `standsOut[i]`: it does and holds
// at most a tenth of the ranks (the straggler is apart from the crowd in this value);
// `ranks[i]`: the first few ranks of bin i (rank order), for the tooltip.
export interface RankDistribution {
  labels: string[];
  ranges: string[];
  counts: number[];
  flagged: boolean[];
  standsOut: boolean[];
  ranks: number[][];
  missing: number;
  total: number;
}

export const RANKS_NAMED_PER_BIN = 5;

export function rankDistribution(
  rows: RankRow[],
  value: (r: RankRow) => number | null,
  flagRank: number | null = null,
  bins = 20,
): RankDistribution {
  const valued: [RankRow, number][] = [];
  let missing = 0;
  for (const r of rows) {
    const v = value(r);
    if (isNum(v)) valued.push([r, v]);
    else missing += 1;
  }
  const empty = { labels: [], ranges: [], counts: [], flagged: [], standsOut: [], ranks: [], missing, total: rows.length };
  if (!valued.length) return empty;
  let lo = Infinity;
  let hi = -Infinity;
  for (const [, v] of valued) {
    lo = Math.min(lo, v);
    hi = Math.max(hi, v);
  }
  // as many bins as have distinct labels: ranks that differ by less than the labels
  // show (step times equal to 0.1 ms) share one bin instead of twenty alike labels
  let n = hi > lo ? Math.max(1, Math.floor(bins)) : 1;
  while (n > 1 && new Set(Array.from({ length: n }, (_, i) => fmtDuration(lo + (i * (hi - lo)) / n))).size < n) {
    n = Math.max(1, Math.floor(n / 2));
  }
  const width = hi > lo && n > 1 ? (hi - lo) / n : 0;
  const counts = new Array<number>(n).fill(0);
  const flagged = new Array<boolean>(n).fill(false);
  const named: number[][] = Array.from({ length: n }, () => []);
  const sorted = [...valued].sort((a, b) => a[0].rank - b[0].rank);
  for (const [r, v] of sorted) {
    const i = width > 0 ? Math.min(n - 1, Math.floor((v - lo) / width)) : 0;
    counts[i] += 1;
    if (r.rank === flagRank) flagged[i] = true;
    if (named[i].length < RANKS_NAMED_PER_BIN) named[i].push(r.rank);
  }
  const edge = (i: number) => lo + i * width;
  return {
    labels: counts.map((_, i) => fmtDuration(edge(i))),
    ranges: counts.map((_, i) =>
      width > 0
        ? `${fmtDuration(edge(i))} ≤ value ${i === n - 1 ? "≤" : "<"} ${fmtDuration(i === n - 1 ? hi : edge(i + 1))}`
        : hi > lo
          ? `${fmtDuration(lo)} ≤ value ≤ ${fmtDuration(hi)}`
          : `value = ${fmtDuration(lo)}`,
    ),
    counts,
    flagged,
    standsOut: flagged.map((f, i) => f && counts[i] <= valued.length / 10),
    ranks: named,
    missing,
    total: rows.length,
  };
}

// The ranks that hold the others back most: by delay caused per step (the median over
// steps of the largest delay the rank causes as last arrival), then by lateness per
// collective, then rank order; at most `n`, ranks with neither left out.
export function worstRanks(rows: RankRow[], n = WORST_RANKS): RankRow[] {
  const delay = (r: RankRow) => (isNum(r.delay_caused_us_per_step) ? r.delay_caused_us_per_step : 0);
  const late = (r: RankRow) => latenessPerCollective(r) ?? 0;
  return rows
    .filter((r) => delay(r) > 0 || late(r) > 0)
    .sort((a, b) => delay(b) - delay(a) || late(b) - late(a) || a.rank - b.rank)
    .slice(0, n);
}

// The spans a view across ranks compared, in words: the first `limit` as
// "worker / span", then how many more.
export const SPANS_NAMED = 8;

export function spansComparedText(spans: { worker: string; span: string }[], limit = SPANS_NAMED): string {
  const named = spans.slice(0, limit).map((x) => `${x.worker} / ${x.span}`).join(", ");
  const more = spans.length - Math.min(spans.length, limit);
  return more > 0 ? `${named} and ${fmtCount(more)} more (${fmtCount(spans.length)} in all)` : named;
}
