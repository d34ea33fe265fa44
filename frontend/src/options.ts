// ECharts options for each chart of the page: shaped data + palette → option object.
// Pure (tooltips build DOM only when shown), so the options are unit-tested in Node.
// Every axis is named with its unit; every tooltip value carries its unit.

import type { BarSeriesOption, CustomSeriesOption, LineSeriesOption, ScatterSeriesOption } from "echarts/charts";
import type {
  DataZoomComponentOption,
  GridComponentOption,
  LegendComponentOption,
  MarkLineComponentOption,
  TooltipComponentOption,
} from "echarts/components";
import type { ComposeOption } from "echarts/core";

import { byteAxisUnit, durationAxisUnit, fmtBytes, fmtCount, fmtDuration, fmtPercent, fmtSignedDuration, isNum } from "./format";
import { rankPerStep } from "./shape";
import type { BreakdownChart, ChangeBar, CommChart, HistogramChart, IdlePerStepChart, MemoryChart, CauseRow, RankDistribution } from "./shape";
import type { Palette } from "./theme";
import { type TipRow, tipNode } from "./tooltip";
import type { RankRow } from "./types";

export type ChartOption = ComposeOption<
  | BarSeriesOption
  | CustomSeriesOption
  | LineSeriesOption
  | ScatterSeriesOption
  | GridComponentOption
  | TooltipComponentOption
  | LegendComponentOption
  | DataZoomComponentOption
  | MarkLineComponentOption
>;

type AnyParams = { seriesName?: string; name?: string; value?: unknown; color?: unknown; dataIndex?: number; axisValueLabel?: string; seriesIndex?: number; data?: unknown };

const FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';

function asList(params: unknown): AnyParams[] {
  return (Array.isArray(params) ? params : [params]) as AnyParams[];
}

function colorOf(p: AnyParams): string | undefined {
  return typeof p.color === "string" ? p.color : undefined;
}

function valueOf(p: AnyParams): number | null {
  const v = Array.isArray(p.value) ? p.value[p.value.length - 1] : p.value;
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}

function tooltip(p: Palette, trigger: "axis" | "item", formatter: (params: unknown) => HTMLElement): TooltipComponentOption {
  return {
    trigger,
    confine: true,
    backgroundColor: p.tooltipBackground,
    borderColor: p.tooltipBorder,
    textStyle: { color: p.text, fontFamily: FONT, fontSize: 12 },
    axisPointer: { type: trigger === "axis" ? "shadow" : "line" },
    // ECharts' formatter type predates HTMLElement results; the runtime accepts them.
    formatter: formatter as unknown as TooltipComponentOption["formatter"],
  };
}

function axisStyle(p: Palette) {
  return {
    axisLine: { lineStyle: { color: p.axis } },
    axisTick: { lineStyle: { color: p.axis } },
    axisLabel: { color: p.muted, fontFamily: FONT },
    nameTextStyle: { color: p.muted, fontFamily: FONT },
    splitLine: { lineStyle: { color: p.split } },
  };
}

// A plain legend wraps onto more rows instead of paging ("1/2" hid entries); fitLegend
// makes room for its rows above the plot.
function legend(p: Palette, names?: string[]): LegendComponentOption {
  return {
    type: "plain",
    top: 0,
    left: 0,
    data: names,
    textStyle: { color: p.text, fontFamily: FONT },
    pageTextStyle: { color: p.muted },
    itemWidth: 14,
    itemHeight: 10,
  };
}

// The grid's box is the outer bound of the plot *with* its axis labels and names
// (ECharts 6 outerBounds), so nothing is clipped; `legend` leaves room for it on top.
function grid(legendOnTop: boolean, extra: Partial<GridComponentOption> = {}): GridComponentOption {
  return {
    left: 4,
    right: 12,
    top: legendOnTop ? 30 : 6,
    bottom: 4,
    outerBoundsMode: "same",
    outerBoundsContain: "all",
    ...extra,
  };
}

function base(p: Palette): ChartOption {
  return {
    animation: false,
    backgroundColor: "transparent",
    textStyle: { color: p.text, fontFamily: FONT },
  };
}

// Overview: exclusive step-time breakdown per step (stacked bars, ms) and GPU
// utilization (line, %, right axis; neither line nor axis for a run without GPU, whose
// utilization is null in every step: an empty "GPU util." axis was kept).
export function overviewOption(data: BreakdownChart, p: Palette): ChartOption {
  const hasGpu = data.utilizationPct.some(isNum);
  const series: (BarSeriesOption | LineSeriesOption)[] = data.series.map((s) => ({
    type: "bar",
    name: s.label,
    stack: "step",
    barMaxWidth: 56,
    itemStyle: { color: p.breakdown[s.key] ?? p.neutral },
    emphasis: { focus: "series" },
    data: s.valuesMs,
  }));
  if (hasGpu) series.push({
    type: "line",
    name: "GPU utilization",
    yAxisIndex: 1,
    symbol: "circle",
    symbolSize: 6,
    lineStyle: { width: 2, color: p.text },
    itemStyle: { color: p.text },
    data: data.utilizationPct,
  });
  return {
    ...base(p),
    legend: legend(p),
    grid: grid(true),
    tooltip: tooltip(p, "axis", (params) => {
      const list = asList(params);
      const i = list[0]?.dataIndex ?? 0;
      const stepMs = data.stepMs[i];
      const rows: TipRow[] = list
        .filter((x) => x.seriesName !== "GPU utilization")
        .map((x) => {
          const v = valueOf(x) ?? 0;
          const share = isNum(stepMs) && stepMs > 0 ? ` (${fmtPercent(v / stepMs)})` : "";
          return { color: colorOf(x), label: x.seriesName ?? "", value: `${fmtDuration(v * 1000)}${share}` };
        })
        .reverse();
      rows.unshift({ label: "Step time", value: fmtDuration(isNum(stepMs) ? stepMs * 1000 : null), strong: true });
      const util = data.utilizationPct[i];
      if (hasGpu) rows.push({ color: p.text, label: "GPU utilization", value: isNum(util) ? `${util.toFixed(1)} %` : "n/a", strong: true });
      return tipNode(`Step ${list[0]?.axisValueLabel ?? ""}`, rows, "Shares are of this step's time.");
    }),
    xAxis: { type: "category", name: "step", nameLocation: "middle", nameGap: 26, data: data.steps, ...axisStyle(p) },
    yAxis: [
      { type: "value", name: "step time (ms)", ...axisStyle(p) },
      ...(hasGpu
        ? [
            {
              type: "value" as const,
              name: "GPU util. (%)",
              min: 0,
              max: 100,
              ...axisStyle(p),
              splitLine: { show: false },
            },
          ]
        : []),
    ],
    series,
  };
}

// A histogram of durations on a category axis of bins; short bins highlighted.
// A histogram by duration. bars "count" (kernels): bars = how many per bin, line = share
// of the time. bars "time" (idle gaps): bars = time per step in each bin, so the bins
// that hold the time are the biggest bars (5 gaps of ≥ 10 ms can be 98 % of the idle
// time and invisible on a count axis); line = how many per bin (right axis).
export function histogramOption(
  data: HistogramChart,
  p: Palette,
  what: { noun: string; axis: string; shortLabel?: string; scope: string; bars?: "count" | "time"; steps?: number },
): ChartOption {
  const totalCount = data.counts.reduce((a, b) => a + b, 0);
  const totalTime = data.timesUs.reduce((a, b) => a + b, 0);
  const byTime = what.bars === "time";
  const steps = isNum(what.steps) && what.steps > 0 ? what.steps : 1;
  const perStep = data.timesUs.map((t) => t / steps);
  const unit = durationAxisUnit(Math.max(0, ...perStep));
  const timeName = `${what.noun === "gaps" ? "idle time" : "time"} per step (${unit.unit})`;
  // counts are over every profiled step: the axis says so (the cards say per step)
  const countName = isNum(what.steps) && what.steps > 0 ? `${what.noun}, total (${fmtCount(what.steps)} steps)` : `${what.noun}, total`;
  return {
    ...base(p),
    grid: grid(false, { top: 10 }),
    tooltip: tooltip(p, "axis", (params) => {
      const i = asList(params)[0]?.dataIndex ?? 0;
      const timeRows = byTime
        ? [
            { label: "time per step", value: fmtDuration(perStep[i]) },
            { label: `time, total over ${fmtCount(steps)} steps`, value: `${fmtDuration(data.timesUs[i])} (${fmtPercent(totalTime ? data.timesUs[i] / totalTime : null)} of time)` },
          ]
        : [{ label: "time, total", value: `${fmtDuration(data.timesUs[i])} (${fmtPercent(totalTime ? data.timesUs[i] / totalTime : null)} of time)` }];
      return tipNode(
        data.ranges[i] ?? "",
        [{ label: `${what.noun}, total`, value: `${fmtCount(data.counts[i])} (${fmtPercent(totalCount ? data.counts[i] / totalCount : null)} of count)` }, ...timeRows],
        what.scope,
      );
    }),
    xAxis: {
      type: "category",
      name: what.axis,
      nameLocation: "middle",
      nameGap: 28,
      data: data.labels,
      ...axisStyle(p),
      axisLabel: { color: p.muted, rotate: data.labels.length > 8 ? 30 : 0, fontFamily: FONT, interval: 0 },
    },
    yAxis: byTime
      ? [
          { type: "value", name: timeName, ...axisStyle(p) },
          { type: "value", name: countName, minInterval: 1, ...axisStyle(p), splitLine: { show: false } },
        ]
      : [
          { type: "value", name: countName, ...axisStyle(p) },
          { type: "value", name: "share of time (%)", min: 0, max: 100, ...axisStyle(p), splitLine: { show: false } },
        ],
    series: [
      {
        type: "bar",
        name: byTime ? timeName : countName,
        barCategoryGap: "12%",
        data: (byTime ? perStep.map((t) => t / unit.divisor) : data.counts).map((v, i) => ({
          value: v,
          itemStyle: { color: data.short[i] ? p.short : p.accent },
        })),
      },
      {
        // Count bars: few long items can hold most of the time, the line shows where
        // the time is. Time bars: the line says how many items made each bar.
        type: "line",
        name: byTime ? countName : "share of time",
        yAxisIndex: 1,
        symbol: "circle",
        symbolSize: 5,
        lineStyle: { width: 2, color: p.text },
        itemStyle: { color: p.text },
        data: byTime ? data.counts : data.timesUs.map((t) => (totalTime > 0 ? (100 * t) / totalTime : 0)),
      },
    ],
  };
}

// Kernels per step: short and other kernels stacked.
export function kernelsPerStepOption(
  rows: { number: number; count?: number | null; short_count?: number | null }[],
  p: Palette,
  shortLabel: string,
): ChartOption {
  const steps = rows.map((r) => `#${r.number}`);
  const short = rows.map((r) => (isNum(r.short_count) ? r.short_count : 0));
  const other = rows.map((r, i) => Math.max(0, (isNum(r.count) ? r.count : 0) - short[i]));
  return {
    ...base(p),
    legend: legend(p),
    grid: grid(true),
    tooltip: tooltip(p, "axis", (params) => {
      const list = asList(params);
      const i = list[0]?.dataIndex ?? 0;
      const total = short[i] + other[i];
      return tipNode(`Step ${steps[i]}`, [
        { label: "Kernels", value: fmtCount(total), strong: true },
        { color: p.short, label: shortLabel, value: `${fmtCount(short[i])} (${fmtPercent(total ? short[i] / total : null)})` },
        { color: p.accent, label: "Other kernels", value: fmtCount(other[i]) },
      ]);
    }),
    xAxis: { type: "category", name: "step", nameLocation: "middle", nameGap: 26, data: steps, ...axisStyle(p) },
    yAxis: { type: "value", name: "kernels in the step", ...axisStyle(p) },
    series: [
      { type: "bar", name: shortLabel, stack: "k", barMaxWidth: 56, itemStyle: { color: p.short }, data: short },
      { type: "bar", name: "Other kernels", stack: "k", barMaxWidth: 56, itemStyle: { color: p.accent }, data: other },
    ],
  };
}

// Idle time per step, stacked by cause (ms).
export function idlePerStepOption(data: IdlePerStepChart, p: Palette): ChartOption {
  const totalsUs = data.steps.map((_, i) => data.series.reduce((a, s) => a + s.valuesMs[i] * 1000, 0));
  const axis = durationAxisUnit(Math.max(0, ...totalsUs));
  const scale = 1000 / axis.divisor; // ms → axis unit
  return {
    ...base(p),
    legend: legend(p),
    grid: grid(true),
    tooltip: tooltip(p, "axis", (params) => {
      const list = asList(params);
      const total = list.reduce((a, x) => a + (valueOf(x) ?? 0), 0);
      return tipNode(
        `Step ${list[0]?.axisValueLabel ?? ""}`,
        [
          { label: "GPU idle", value: fmtDuration(total * axis.divisor), strong: true },
          ...list
            .map((x) => ({
              color: colorOf(x),
              label: x.seriesName ?? "",
              value: `${fmtDuration((valueOf(x) ?? 0) * axis.divisor)} (${fmtPercent(total ? (valueOf(x) ?? 0) / total : null)} of idle)`,
            }))
            .reverse(),
        ],
      );
    }),
    xAxis: { type: "category", name: "step", nameLocation: "middle", nameGap: 26, data: data.steps, ...axisStyle(p) },
    yAxis: { type: "value", name: `GPU idle (${axis.unit})`, ...axisStyle(p) },
    series: data.series.map((s) => ({
      type: "bar",
      name: s.label,
      stack: "idle",
      barMaxWidth: 56,
      itemStyle: { color: p.idle[s.key] ?? p.neutral },
      data: s.valuesMs.map((v) => v * scale),
    })),
  };
}

// Idle by cause over all steps: horizontal bars, ms per step, largest at the top.
export function idleCausesOption(rows: CauseRow[], steps: number, p: Palette): ChartOption {
  const sorted = [...rows].sort((a, b) => a.us - b.us); // ECharts draws the last at the top
  const perStep = (us: number) => (steps > 0 ? us / steps : us);
  const axis = durationAxisUnit(Math.max(0, ...sorted.map((r) => perStep(r.us))));
  return {
    ...base(p),
    grid: grid(false, { right: 48 }),
    tooltip: tooltip(p, "axis", (params) => {
      const i = asList(params)[0]?.dataIndex ?? 0;
      const r = sorted[i];
      return tipNode(r.label, [
        { label: "per step", value: fmtDuration(perStep(r.us)) },
        { label: "all steps", value: fmtDuration(r.us) },
        { label: "of GPU idle time", value: fmtPercent(r.fractionOfIdle) },
        { label: "of step time", value: fmtPercent(r.fractionOfStep) },
      ]);
    }),
    xAxis: { type: "value", name: `${axis.unit} per step`, nameLocation: "middle", nameGap: 26, ...axisStyle(p) },
    yAxis: { type: "category", data: sorted.map((r) => r.label), ...axisStyle(p), splitLine: { show: false } },
    series: [
      {
        type: "bar",
        name: "GPU idle",
        barMaxWidth: 22,
        label: {
          show: true,
          position: "right",
          color: p.text,
          fontFamily: FONT,
          formatter: (x: { dataIndex: number }) => fmtPercent(sorted[x.dataIndex].fractionOfIdle, 0),
        },
        data: sorted.map((r) => ({ value: perStep(r.us) / axis.divisor, itemStyle: { color: p.idle[r.key] ?? p.neutral } })),
      },
    ],
  };
}

// Communication per step: exposed and overlapped (stacked, ms).
export function commOption(data: CommChart, p: Palette): ChartOption {
  return {
    ...base(p),
    legend: legend(p),
    grid: grid(true),
    tooltip: tooltip(p, "axis", (params) => {
      const i = asList(params)[0]?.dataIndex ?? 0;
      return tipNode(
        `Step ${data.steps[i]}`,
        [
          { color: p.bad, label: "Exposed", value: `${fmtDuration(data.exposedMs[i] * 1000)} (${fmtPercent(isNum(data.exposedPct[i]) ? (data.exposedPct[i] as number) / 100 : null)} of step)` },
          { color: p.breakdown.communication, label: "Overlapped", value: fmtDuration(data.overlappedMs[i] * 1000) },
        ],
        "Exposed: communication with no compute kernel on the same device.",
      );
    }),
    xAxis: { type: "category", name: "step", nameLocation: "middle", nameGap: 26, data: data.steps, ...axisStyle(p) },
    yAxis: { type: "value", name: "communication (ms)", ...axisStyle(p) },
    series: [
      { type: "bar", name: "Exposed", stack: "c", barMaxWidth: 56, itemStyle: { color: p.bad }, data: data.exposedMs },
      { type: "bar", name: "Overlapped with compute", stack: "c", barMaxWidth: 56, itemStyle: { color: p.breakdown.communication }, data: data.overlappedMs },
    ],
  };
}

// Memory over time: allocated and reserved lines (LTTB-sampled), step boundaries as
// vertical lines, zoomable.
export function memoryOption(data: MemoryChart, boundaries: { xMs: number; label: string }[], p: Palette): ChartOption {
  const markLine: MarkLineComponentOption = {
    silent: true,
    symbol: "none",
    lineStyle: { color: p.stepLine, type: "dashed", width: 1 },
    // Each step's label starts at its line and runs right, into the plot: a label
    // centred on the first line (at the axis start) would cover the y-axis labels.
    label: { show: true, position: "end", align: "left", padding: [0, 0, 0, 3], color: p.muted, fontFamily: FONT, formatter: (x: { name?: string }) => x.name ?? "" },
    data: boundaries.map((b) => ({ xAxis: b.xMs, name: b.label })),
  };
  // The axis spans the data and every step boundary, so each step's line shows.
  const xs = [...boundaries.map((b) => b.xMs), data.allocated[0]?.[0], data.allocated[data.allocated.length - 1]?.[0]].filter(isNum);
  const xMin = xs.length ? Math.min(...xs) : undefined;
  const xMax = xs.length ? Math.max(...xs) : undefined;
  const series: LineSeriesOption[] = [
    {
      type: "line",
      name: "Allocated",
      showSymbol: false,
      sampling: "lttb",
      step: "end",
      lineStyle: { width: 1.5, color: p.accent },
      itemStyle: { color: p.accent },
      areaStyle: { color: p.accent, opacity: 0.12 },
      data: data.allocated,
      markLine,
    },
  ];
  if (data.reserved.length) {
    series.push({
      type: "line",
      name: "Reserved",
      showSymbol: false,
      sampling: "lttb",
      step: "end",
      lineStyle: { width: 1.5, color: p.accent2 },
      itemStyle: { color: p.accent2 },
      data: data.reserved,
    });
  }
  return {
    ...base(p),
    legend: legend(p),
    grid: grid(true, { top: 44, bottom: 30 }),
    tooltip: {
      ...tooltip(p, "axis", (params) => {
        const list = asList(params);
        const t = Array.isArray(list[0]?.value) ? (list[0].value as number[])[0] : null;
        return tipNode(
          `t = ${isNum(t) ? fmtDuration(t * 1000) : "n/a"}`,
          list.map((x) => ({ color: colorOf(x), label: x.seriesName ?? "", value: fmtBytes((valueOf(x) ?? 0) * data.divisor) })),
          "Time since the first step started.",
        );
      }),
      axisPointer: { type: "line" },
    },
    dataZoom: [
      { type: "inside", xAxisIndex: 0, filterMode: "none" },
      {
        type: "slider",
        xAxisIndex: 0,
        height: 18,
        bottom: 4,
        filterMode: "none",
        textStyle: { color: p.muted },
        borderColor: p.split,
        labelFormatter: (v: number) => `${v.toFixed(0)} ms`,
      },
    ],
    xAxis: {
      type: "value",
      name: "time since the first step started (ms)",
      nameLocation: "middle",
      nameGap: 24,
      min: xMin,
      max: xMax,
      ...axisStyle(p),
      axisLabel: { color: p.muted, fontFamily: FONT, formatter: (v: number) => String(Math.round(v * 10) / 10) },
      splitLine: { show: false },
    },
    yAxis: { type: "value", name: `memory (${data.unit})`, min: 0, ...axisStyle(p), nameLocation: "middle", nameRotate: 90, nameGap: 44 },
    series,
  };
}

// Per-step start, peak and end allocated memory (grouped bars).
export function memoryPerStepOption(
  rows: { number: number; start_bytes?: number | null; peak_bytes?: number | null; end_bytes?: number | null }[],
  p: Palette,
): ChartOption {
  let max = 0;
  for (const r of rows) for (const v of [r.start_bytes, r.peak_bytes, r.end_bytes]) if (isNum(v) && v > max) max = v;
  const { unit, divisor } = byteAxisUnit(max);
  const pick = (k: "start_bytes" | "peak_bytes" | "end_bytes") => rows.map((r) => (isNum(r[k]) ? (r[k] as number) / divisor : null));
  const steps = rows.map((r) => `#${r.number}`);
  return {
    ...base(p),
    legend: legend(p),
    grid: grid(true),
    tooltip: tooltip(p, "axis", (params) =>
      tipNode(
        `Step ${asList(params)[0]?.axisValueLabel ?? ""}`,
        asList(params).map((x) => ({ color: colorOf(x), label: x.seriesName ?? "", value: fmtBytes((valueOf(x) ?? 0) * divisor) })),
        "Allocated memory at the step's start, its peak inside the step, and at its end.",
      ),
    ),
    xAxis: { type: "category", name: "step", nameLocation: "middle", nameGap: 26, data: steps, ...axisStyle(p) },
    yAxis: { type: "value", name: `allocated (${unit})`, ...axisStyle(p) },
    series: [
      { type: "bar", name: "Start", barMaxWidth: 28, itemStyle: { color: p.neutral }, data: pick("start_bytes") },
      { type: "bar", name: "Peak", barMaxWidth: 28, itemStyle: { color: p.accent2 }, data: pick("peak_bytes") },
      { type: "bar", name: "End", barMaxWidth: 28, itemStyle: { color: p.accent }, data: pick("end_bytes") },
    ],
  };
}

// Across ranks: mean step, communication, exposed communication and waited, all /step.
export function ranksOption(ranks: RankRow[], p: Palette, stragglerRank: number | null): ChartOption {
  const names = ranks.map((r) => `rank ${r.rank}${r.rank === stragglerRank ? " ⚑" : ""}`);
  const ms = (v: number | null | undefined) => (isNum(v) ? v / 1000 : null);
  return {
    ...base(p),
    legend: legend(p),
    grid: grid(true),
    tooltip: tooltip(p, "axis", (params) => {
      const list = asList(params);
      const i = list[0]?.dataIndex ?? 0;
      return tipNode(
        `${names[i]} — ${ranks[i]?.worker ?? ""}`,
        list.map((x) => ({ color: colorOf(x), label: x.seriesName ?? "", value: fmtDuration((valueOf(x) ?? 0) * 1000) })),
        "All /step. Waited: latest start − this rank's start, summed over the matched collectives of a step.",
      );
    }),
    xAxis: { type: "category", data: names, ...axisStyle(p) },
    yAxis: { type: "value", name: "ms /step", ...axisStyle(p) },
    series: [
      { type: "bar", name: "Step time", barMaxWidth: 28, itemStyle: { color: p.neutral }, data: ranks.map((r) => ms(r.mean_step_us)) },
      { type: "bar", name: "Communication /step", barMaxWidth: 28, itemStyle: { color: p.breakdown.communication }, data: ranks.map((r) => ms(r.mean_comm_us)) },
      { type: "bar", name: "Exposed communication /step", barMaxWidth: 28, itemStyle: { color: p.bad }, data: ranks.map((r) => ms(r.mean_exposed_us)) },
      {
        type: "bar",
        name: "Waited /step",
        barMaxWidth: 28,
        itemStyle: { color: p.warn },
        data: ranks.map((r) => ms(rankPerStep(r, "wait"))),
      },
    ],
  };
}

// Many ranks: how many ranks fall in each value bin (one chart per quantity) instead of
// one bar per rank; the straggler's bin is drawn in the "bad" colour where it stands out.
export function rankDistributionOption(d: RankDistribution, p: Palette, what: { axis: string; scope: string }): ChartOption {
  return {
    ...base(p),
    grid: grid(false, { top: 10 }),
    tooltip: tooltip(p, "axis", (params) => {
      const i = asList(params)[0]?.dataIndex ?? 0;
      const named = d.ranks[i] ?? [];
      const more = (d.counts[i] ?? 0) - named.length;
      return tipNode(
        d.ranges[i] ?? "",
        [
          { label: "ranks", value: `${fmtCount(d.counts[i])} (${fmtPercent(d.total ? d.counts[i] / d.total : null)})`, strong: true },
          { label: "for example", value: named.map((r) => `rank ${r}`).join(", ") + (more > 0 ? ` and ${fmtCount(more)} more` : "") },
          ...(d.flagged[i] ? [{ color: p.bad, label: "straggler", value: "in this bin" }] : []),
        ],
        what.scope,
      );
    }),
    xAxis: {
      type: "category",
      name: what.axis,
      nameLocation: "middle",
      nameGap: 28,
      data: d.labels,
      ...axisStyle(p),
      axisLabel: { color: p.muted, rotate: d.labels.length > 8 ? 30 : 0, fontFamily: FONT, interval: 0 },
    },
    yAxis: { type: "value", name: "ranks (count)", minInterval: 1, ...axisStyle(p) },
    series: [
      {
        type: "bar",
        name: "ranks",
        barCategoryGap: "12%",
        // a bin of one rank among a thousand must stay visible; empty bins draw nothing
        barMinHeight: 4,
        data: d.counts.map((c, i) => ({ value: c > 0 ? c : null, itemStyle: { color: d.standsOut[i] ? p.bad : p.accent } })),
      },
    ],
  };
}

export function verdictColor(verdict: string, p: Palette): string {
  if (verdict === "improved") return p.good;
  if (verdict === "regressed") return p.bad;
  return p.neutral;
}

// Diff: the largest per-step time changes, horizontal bars coloured by verdict.
export function changesOption(rows: ChangeBar[], p: Palette, noun: string): ChartOption {
  const sorted = [...rows].reverse(); // largest at the top
  const axis = durationAxisUnit(Math.max(0, ...rows.map((r) => Math.abs(r.deltaUs))));
  return {
    ...base(p),
    grid: grid(false, { right: 24 }),
    tooltip: tooltip(p, "axis", (params) => {
      const r = sorted[asList(params)[0]?.dataIndex ?? 0];
      return tipNode(r.name, [
        { label: "change per step", value: fmtSignedDuration(r.deltaUs), strong: true },
        { label: "base", value: fmtDuration(r.baseUs) },
        { label: "experiment", value: fmtDuration(r.expUs) },
        { color: verdictColor(r.verdict, p), label: "verdict", value: r.verdict },
      ], `${noun} time per step, experiment − base.`);
    }),
    xAxis: {
      type: "value",
      name: `Δ time per step (${axis.unit})`,
      nameLocation: "middle",
      nameGap: 26,
      ...axisStyle(p),
    },
    yAxis: {
      type: "category",
      data: sorted.map((r) => r.name),
      ...axisStyle(p),
      splitLine: { show: false },
      axisLabel: { color: p.text, width: 260, overflow: "truncate", fontFamily: FONT },
    },
    series: [
      {
        type: "bar",
        name: "Δ time per step",
        barMaxWidth: 18,
        data: sorted.map((r) => ({ value: r.deltaUs / axis.divisor, itemStyle: { color: verdictColor(r.verdict, p) } })),
      },
    ],
  };
}

// Legend layout estimate (px): a 14 px swatch, 5 px to the text, about 7 px per character
// of 12 px text, 10 px between items; one row is 22 px tall.
const LEGEND_CHAR_PX = 7;
const LEGEND_ITEM_PX = 14 + 5 + 10;
const LEGEND_ROW_PX = 22;

// Rows a plain legend of these entries takes in `widthPx` (greedy, as ECharts lays it out).
export function legendRows(names: string[], widthPx: number): number {
  if (!names.length) return 0;
  let rows = 1;
  let x = 0;
  for (const name of names) {
    const w = LEGEND_ITEM_PX + name.length * LEGEND_CHAR_PX;
    if (x > 0 && x + w > widthPx) {
      rows += 1;
      x = 0;
    }
    x += w;
  }
  return rows;
}

// The option with its grid moved down by the legend's extra rows at this width, so that
// a wrapped legend never covers the plot. Options without a legend are returned as they are.
export function fitLegend(option: ChartOption, widthPx: number): ChartOption {
  const legendOpt = option.legend as LegendComponentOption | undefined;
  const gridOpt = option.grid as GridComponentOption | undefined;
  if (!legendOpt || Array.isArray(legendOpt) || !gridOpt || Array.isArray(gridOpt) || !(widthPx > 0)) return option;
  const series = (Array.isArray(option.series) ? option.series : option.series ? [option.series] : []) as { name?: unknown }[];
  const names = (legendOpt.data as string[] | undefined) ?? series.map((s) => (typeof s.name === "string" ? s.name : "")).filter(Boolean);
  const rows = legendRows(names, widthPx);
  if (rows <= 1) return option;
  const top = typeof gridOpt.top === "number" ? gridOpt.top : 30;
  return { ...option, grid: { ...gridOpt, top: top + (rows - 1) * LEGEND_ROW_PX } };
}

// What if: the step time now, with each recommended fix, and with the top fixes
// together (horizontal bars, ms, the current step at the top, the combined fix last).
export interface WhatIfBar {
  label: string;
  us: number;
  kind: "now" | "fix" | "combined";
  speedup: number | null;
  method: string;
}

export function whatIfOption(rows: WhatIfBar[], p: Palette): ChartOption {
  const sorted = [...rows].reverse(); // the first row at the top
  const axis = durationAxisUnit(Math.max(0, ...rows.map((r) => r.us)));
  const color = (r: WhatIfBar) => (r.kind === "now" ? p.neutral : r.kind === "combined" ? p.accent : p.good);
  return {
    ...base(p),
    grid: grid(false, { right: 24 }),
    tooltip: tooltip(p, "axis", (params) => {
      const r = sorted[asList(params)[0]?.dataIndex ?? 0];
      return tipNode(r.label, [
        { color: color(r), label: "step time", value: fmtDuration(r.us), strong: true },
        ...(r.speedup ? [{ label: "speed-up", value: `${r.speedup.toFixed(2)}×` }] : []),
        { label: "how", value: r.kind === "now" ? "measured (steady-state steps)" : r.method === "replay" ? "replayed on the step's graph" : "the rule's estimate" },
      ]);
    }),
    xAxis: { type: "value", name: `step time (${axis.unit})`, nameLocation: "middle", nameGap: 26, ...axisStyle(p) },
    yAxis: {
      type: "category",
      data: sorted.map((r) => r.label),
      ...axisStyle(p),
      splitLine: { show: false },
      axisLabel: { color: p.text, width: 260, overflow: "truncate", fontFamily: FONT },
    },
    series: [
      {
        type: "bar",
        name: "step time",
        barMaxWidth: 18,
        data: sorted.map((r) => ({ value: r.us / axis.divisor, itemStyle: { color: color(r) } })),
      },
    ],
  };
}
