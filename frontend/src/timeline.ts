// The step timeline's data, shaped for drawing (pure: unit-tested in Node): which step
// to show first, the rows of the custom series with level of detail, the idle band's
// totals, and the op that launched a kernel (correlation id).

import type { Diagnosis, IdleGap, Moment, Summary, TimelineLane, TimelineStep } from "./types";

export type Range = [number, number];

// One drawn rectangle: [lane, start µs, end µs, sub-row (host depth), class index,
// event index in its lane (-1: a block of several events), count of events].
export type TimelineRow = [number, number, number, number, number, number, number];

export const KERNEL_CLASSES = new Set(["compute", "communication"]);

// The step whose duration is closest to the median (the lower median for an even
// count), the first such step on a tie; null when the summary has no steps.
export function medianStep(summary: Summary): number | null {
  const steps = summary.steps?.steps ?? [];
  if (!steps.length) return null;
  const sorted = steps.map((s) => s.duration_us).sort((a, b) => a - b);
  const median = sorted[Math.floor((sorted.length - 1) / 2)];
  let best = steps[0];
  for (const s of steps) if (Math.abs(s.duration_us - median) < Math.abs(best.duration_us - median)) best = s;
  return best.number;
}

export function slowestStep(summary: Summary): number | null {
  const steps = summary.steps?.steps ?? [];
  if (!steps.length) return null;
  return steps.reduce((a, b) => (b.duration_us > a.duration_us ? b : a)).number;
}

// The longest idle gap of the main device (the Idle panel's first "Largest gaps" row).
export function worstGap(summary: Summary): IdleGap | null {
  const idle = summary.idle;
  const device = idle?.devices?.find((d) => d.device === idle.main_device) ?? idle?.devices?.[0];
  const gap = device?.largest_gaps?.[0];
  return gap && typeof gap.step === "number" && typeof gap.offset_us === "number" ? gap : null;
}

// A diagnosis's moment on the timeline (``Diagnosis.moment``, set by the analysis for
// every diagnosis with a place in time): null for one without.
export function momentOf(d: Diagnosis): Moment | null {
  return d.moment ?? null;
}

// The view range for a moment: as for a gap (below), the moment itself highlighted.
export function momentView(m: Moment): { window: Range; mark: Range } {
  return gapView({ offset_us: m.offset_us, length_us: m.length_us } as IdleGap);
}

// The view range for a gap: the gap with half its length (at least 10 µs) on each side,
// and the gap itself as the highlighted mark.
export function gapView(gap: IdleGap): { window: Range; mark: Range } {
  const start = gap.offset_us ?? 0;
  const end = start + gap.length_us;
  const pad = Math.max(gap.length_us / 2, 10);
  return { window: [start - pad, end + pad], mark: [start, end] };
}

// µs as a decimal rounded to the ns (3 decimals, trailing zeros dropped, never an
// exponent): the one rounding of a window's bounds on the page. The server rounds what it
// is given to the ns once more, which leaves this unchanged; a float's own text
// (`766.7589999999999`) was once sent as it was.
export function nsDecimal(us: number): string {
  const ns = Math.round(us * 1000);
  const sign = ns < 0 ? "-" : "";
  const abs = Math.abs(ns);
  const whole = Math.floor(abs / 1000);
  const frac = String(abs % 1000).padStart(3, "0").replace(/0+$/, "");
  return `${sign}${whole}${frac ? `.${frac}` : ""}`;
}

// The `start_us`/`end_us` of /window and /window_ranks for a zoomed range (µs after the
// step window's start), rounded to the ns; none for the server's default (the step ±10 %).
export function windowQuery(window: Range | null): { start_us?: string; end_us?: string } {
  return window ? { start_us: nsDecimal(window[0]), end_us: nsDecimal(window[1]) } : {};
}

// The left margin of the timeline (px) that shows its lane labels in full: about 7 px a
// character of 12 px text and 16 px to spare, at least 170, at most 360 (a longer label is
// cut with "…" and whole in the tooltip). A fixed 170 px cut "thread 453 (pt_autograd_0)".
export const LANE_LABEL_CHAR_PX = 7;
export function laneLabelWidth(labels: string[]): number {
  const longest = Math.max(0, ...labels.map((l) => l.length));
  return Math.min(360, Math.max(170, Math.ceil(longest * LANE_LABEL_CHAR_PX) + 16));
}

// Kernels drawn in the GPU stream lanes (a merged block counts its events): equals
// `kernels.per_step[].count` of the summary for this step.
export function kernelCount(doc: TimelineStep): number {
  let n = 0;
  for (const lane of doc.lanes) {
    if (lane.kind !== "gpu_stream") continue;
    lane.event_class.forEach((c, i) => {
      if (KERNEL_CLASSES.has(doc.classes[c])) n += lane.count[i];
    });
  }
  return n;
}

// Idle time (µs) per device, and per cause, of the idle band: equals the Idle panel's
// per-step figures.
export function idleTotals(doc: TimelineStep): Map<number, { total: number; causes: Map<string, number> }> {
  const out = new Map<number, { total: number; causes: Map<string, number> }>();
  for (const lane of doc.lanes) {
    if (lane.kind !== "idle") continue;
    const device = lane.device ?? -1;
    const entry = out.get(device) ?? { total: 0, causes: new Map<string, number>() };
    lane.dur_us.forEach((d, i) => {
      const cause = doc.classes[lane.event_class[i]].replace(/^idle:/, "");
      entry.total += d;
      entry.causes.set(cause, (entry.causes.get(cause) ?? 0) + d);
    });
    out.set(device, entry);
  }
  for (const entry of out.values()) entry.total = Math.round(entry.total * 1000) / 1000;
  return out;
}

// The time on the step's critical-path lane (µs, three decimals), null without one
// (a step left out of the steady steps, or a trace without a step graph): equals
// ``summary.critical_path.steps[].length_us`` of the step.
export function criticalPathUs(doc: TimelineStep): number | null {
  const lane = doc.lanes.find((l) => l.kind === "critical_path");
  if (!lane) return null;
  return Math.round(lane.dur_us.reduce((a, b) => a + b, 0) * 1000) / 1000;
}

export interface Launch {
  lane: number;
  index: number; // the runtime call's event index in its lane
  call: string;
  ops: string[]; // the ops around it, outermost first (depth 0, 1)
  opIndices: number[];
}

// The runtime call that launched the events with correlation id `correlation`, and the
// ops open around it on its thread; null when the step holds none (launched earlier).
export function launchingOp(doc: TimelineStep, correlation: number): Launch | null {
  if (correlation < 0) return null;
  for (let l = 0; l < doc.lanes.length; l += 1) {
    const lane = doc.lanes[l];
    if (lane.kind !== "host_thread") continue;
    for (let i = 0; i < lane.correlation.length; i += 1) {
      if (lane.correlation[i] !== correlation || lane.depth[i] !== 2) continue;
      const t = lane.offset_us[i];
      const ops: string[] = [];
      const opIndices: number[] = [];
      for (let j = 0; j < lane.offset_us.length; j += 1) {
        if (lane.depth[j] < 2 && lane.offset_us[j] <= t && t < lane.offset_us[j] + lane.dur_us[j]) {
          ops.push(lane.name[j] >= 0 ? doc.names[lane.name[j]] : "(several ops)");
          opIndices.push(j);
        }
      }
      return { lane: l, index: i, call: doc.names[lane.name[i]] ?? "", ops, opIndices };
    }
  }
  return null;
}

// Sub-row of an event inside its lane's band: host ranges by depth (0, 1; runtime calls
// 2), everything else 0.
export function subRows(lane: TimelineLane): number {
  return lane.kind === "host_thread" || lane.kind === "dataloader_thread" ? 3 : 1;
}

// The rows to draw for the visible range [lo, hi) at `usPerPx` µs per pixel: events
// outside the range are left out; in each lane and sub-row, a run of consecutive events
// each narrower than a pixel and less than a pixel apart is one block (event index -1,
// its count the events it stands for), so 100,000 tiny kernels draw as a few hundred
// rectangles and come apart as the user zooms in.
export function visibleRows(doc: TimelineStep, lo: number, hi: number, usPerPx: number): TimelineRow[] {
  const rows: TimelineRow[] = [];
  doc.lanes.forEach((lane, l) => {
    const open = new Map<number, TimelineRow>();
    for (let i = 0; i < lane.offset_us.length; i += 1) {
      const start = lane.offset_us[i];
      const end = start + lane.dur_us[i];
      if (end < lo || start > hi) continue;
      const sub = lane.kind === "host_thread" || lane.kind === "dataloader_thread" ? Math.min(lane.depth[i], 2) : 0;
      const narrow = end - start < usPerPx;
      const last = open.get(sub);
      if (narrow && last && last[2] - last[1] < usPerPx * 4 && start - last[2] < usPerPx && (last[5] === -1 || lane.dur_us[last[5]] < usPerPx)) {
        last[2] = Math.max(last[2], end);
        last[5] = -1;
        last[6] += lane.count[i];
        continue;
      }
      const row: TimelineRow = [l, start, end, sub, lane.event_class[i], i, lane.count[i]];
      rows.push(row);
      open.set(sub, row);
    }
  });
  return rows;
}

// Two steps' timelines stacked, aligned on their step windows' starts (offsets are µs
// after each window's start already): `a`'s lanes, then `b`'s, each label prefixed with
// its side's name; `b`'s name indices shifted past `a`'s names. The counts (kernels,
// idle) stay `a`'s: the stacked side is for comparison.
export function stackSteps(a: TimelineStep, aName: string, b: TimelineStep, bName: string): TimelineStep {
  const shift = a.names.length;
  const shapeShift = (a.shapes ?? []).length;
  const relabel = (lane: TimelineLane, name: string, offset: number, shapeOffset: number): TimelineLane => ({
    ...lane,
    label: `${name}: ${lane.label}`,
    name: offset ? lane.name.map((n) => (n >= 0 ? n + offset : n)) : lane.name,
    shape: shapeOffset && lane.shape ? lane.shape.map((k) => (k >= 0 ? k + shapeOffset : k)) : lane.shape,
  });
  return {
    ...a,
    duration_us: Math.max(a.duration_us, b.duration_us),
    names: [...a.names, ...b.names],
    shapes: [...(a.shapes ?? []), ...(b.shapes ?? [])],
    lanes: [...a.lanes.map((l) => relabel(l, aName, 0, 0)), ...b.lanes.map((l) => relabel(l, bName, shift, shapeShift))],
  };
}

// The input shapes of event `i` of a lane (host ops of a trace recorded with
// record_shapes=True), or null.
export function shapesOf(doc: TimelineStep, lane: TimelineLane, i: number): string | null {
  const k = lane.shape?.[i] ?? -1;
  return k >= 0 ? doc.shapes?.[k] ?? null : null;
}

// The input shapes of the op that launched a kernel: the innermost op around its
// runtime call that has some.
export function launchShapes(doc: TimelineStep, launch: Launch): string | null {
  const lane = doc.lanes[launch.lane];
  for (let j = launch.opIndices.length - 1; j >= 0; j -= 1) {
    const found = shapesOf(doc, lane, launch.opIndices[j]);
    if (found) return found;
  }
  return null;
}
