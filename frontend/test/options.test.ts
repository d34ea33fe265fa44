import assert from "node:assert/strict";
import { test } from "node:test";

import {
  changesOption,
  commOption,
  histogramOption,
  idleCausesOption,
  idlePerStepOption,
  memoryOption,
  fitLegend,
  legendRows,
  overviewOption,
  verdictColor,
} from "../src/options";
import { breakdownChart, histogramChart, memoryChart, stepBoundariesMs } from "../src/shape";
import { palette } from "../src/theme";
import type { HistogramBin, MemoryDevice, StepsPanel } from "../src/types";
import { partial } from "./fixture";

const light = palette(false);
const dark = palette(true);

type Axis = { name?: string; type?: string; min?: unknown; max?: unknown };
function axes(a: unknown): Axis[] {
  return (Array.isArray(a) ? a : [a]) as Axis[];
}

const STEPS = partial<StepsPanel>({
  steps: [
    { number: 2, start_us: 0, duration_us: 4000, breakdown_us: { kernel: 2500, cpu_exec: 1500 }, gpu_utilization_fraction: 0.6 },
    { number: 3, start_us: 4000, duration_us: 4000, breakdown_us: { kernel: 3000, cpu_exec: 1000 }, gpu_utilization_fraction: 0.7 },
  ],
});

test("every value axis is named with its unit", () => {
  const options = [
    overviewOption(breakdownChart(STEPS), light),
    histogramOption(histogramChart(partial<HistogramBin[]>([{ lo_us: 1, hi_us: 2, count: 3 }]), 10), light, { noun: "kernels", axis: "kernel duration", scope: "" }),
    commOption({ steps: ["#1"], exposedMs: [1], overlappedMs: [2], exposedPct: [10] }, light),
    idleCausesOption([{ key: "host_sync", label: "Host sync", us: 10, fractionOfIdle: 1, fractionOfStep: 0.1 }], 1, light),
  ];
  for (const option of options) {
    for (const axis of [...axes(option.xAxis), ...axes(option.yAxis)]) {
      if (axis.type === "value") assert.match(axis.name ?? "", /\((ms|%|count|µs|MiB)\)|(ms|µs) per step|, total \(\d+ steps\)|, total$|in the step$/, JSON.stringify(axis.name));
    }
  }
});

test("overview: one stacked bar series per category, utilization on the right axis", () => {
  const option = overviewOption(breakdownChart(STEPS), light);
  const series = option.series as { type: string; stack?: string; yAxisIndex?: number; itemStyle?: { color?: string } }[];
  assert.deepEqual(series.map((s) => s.type), ["bar", "bar", "line"]);
  assert.ok(series.slice(0, 2).every((s) => s.stack === "step"));
  assert.equal(series[2].yAxisIndex, 1);
  assert.equal(series[0].itemStyle?.color, light.breakdown.kernel);
  assert.equal(option.animation, false);
});

test("issue 48 §10: a run without GPU has no GPU utilization line nor its empty axis", () => {
  const cpuOnly = partial<StepsPanel>({
    steps: STEPS.steps.map((s) => ({ ...s, gpu_utilization_fraction: null })),
  });
  const option = overviewOption(breakdownChart(cpuOnly), light);
  assert.deepEqual(axes(option.yAxis).map((a) => a.name), ["step time (ms)"]);
  const series = option.series as { type: string; name?: string }[];
  assert.ok(series.every((s) => s.type === "bar" && s.name !== "GPU utilization"));
  assert.equal(axes(overviewOption(breakdownChart(STEPS), light).yAxis).length, 2);
});

test("memory: LTTB sampling, zoom, step boundaries as markLines, axis covering every boundary", () => {
  const data = memoryChart(
    partial<MemoryDevice>({
      device: "CUDA:0",
      series: { allocated: { t_us: [500, 7000], bytes: [1, 2 ** 30] }, reserved: { t_us: [500, 7000], bytes: [2 ** 30, 2 ** 30] } },
    }),
  );
  const option = memoryOption(data, stepBoundariesMs(STEPS), dark);
  const series = option.series as { sampling?: string; markLine?: { data?: { xAxis: number; name: string }[] } }[];
  assert.ok(series.every((s) => s.sampling === "lttb"));
  assert.deepEqual(series[0].markLine?.data?.map((d) => d.name), ["#2", "#3", "end"]);
  assert.equal((option.dataZoom as unknown[]).length, 2);
  const x = axes(option.xAxis)[0];
  assert.equal(x.min, 0);
  assert.equal(x.max, 8);
  assert.equal(axes(option.yAxis)[0].name, "memory (GiB)");
});

test("diff changes: largest at the top, coloured by verdict, unit fits the values", () => {
  const rows = [
    { name: "a<float>", deltaUs: -800, verdict: "improved", status: "changed" as const, baseUs: 900, expUs: 100 },
    { name: "b", deltaUs: 20, verdict: "within noise", status: "changed" as const, baseUs: 100, expUs: 120 },
  ];
  const option = changesOption(rows, light, "Kernel");
  const y = axes(option.yAxis)[0] as Axis & { data: string[] };
  assert.deepEqual(y.data, ["b", "a<float>"]);
  const bars = (option.series as { data: { value: number; itemStyle: { color: string } }[] }[])[0].data;
  assert.deepEqual(bars.map((b) => b.value), [20, -800]);
  assert.equal(bars[1].itemStyle.color, light.good);
  assert.equal(bars[0].itemStyle.color, light.neutral);
  assert.equal(axes(option.xAxis)[0].name, "Δ time per step (µs)");
  const ms = changesOption([{ ...rows[0], deltaUs: -33248.9 }], light, "Op");
  assert.equal(axes(ms.xAxis)[0].name, "Δ time per step (ms)");
});

test("verdict colours differ between improved and regressed in both themes", () => {
  for (const p of [light, dark]) {
    assert.notEqual(verdictColor("improved", p), verdictColor("regressed", p));
    assert.equal(verdictColor("within noise", p), verdictColor("unchanged", p));
  }
  assert.notEqual(light.text, dark.text);
});

test("idle charts switch to µs when the idle time is under a millisecond", () => {
  const rows = [{ key: "host_sync", label: "Host sync", us: 1740, fractionOfIdle: 0.6, fractionOfStep: 0.1 }];
  const small = idleCausesOption(rows, 5, light);
  assert.equal(axes(small.xAxis)[0].name, "µs per step");
  const bars = (small.series as { data: { value: number }[] }[])[0].data;
  assert.deepEqual(bars.map((b) => b.value), [348]);
  const big = idleCausesOption([{ ...rows[0], us: 365_000 }], 5, light);
  assert.equal(axes(big.xAxis)[0].name, "ms per step");
  const perStep = idlePerStepOption({ steps: ["#2"], series: [{ key: "host_sync", label: "Host sync", valuesMs: [0.35] }] }, dark);
  assert.equal(axes(perStep.yAxis)[0].name, "GPU idle (µs)");
  assert.deepEqual((perStep.series as { data: number[] }[])[0].data, [350]);
});

test("idle-gap histogram: bars are idle time per step, so the few long gaps that hold the time are the biggest bars", () => {
  // dataloader_workers0-like: 400 gaps of 1-10 µs (2 ms in total), 5 gaps >= 10 ms (360 ms in total), 5 steps
  const hist = histogramChart([
    { lo_us: 1, hi_us: 10, count: 400, time_us: 2000 },
    { lo_us: 10, hi_us: 10000, count: 0, time_us: 0 },
    { lo_us: 10000, hi_us: null, count: 5, time_us: 360000 },
  ]);
  const option = histogramOption(hist, light, { noun: "gaps", axis: "gap length", scope: "", bars: "time", steps: 5 });
  const series = option.series as { type: string; name: string; yAxisIndex?: number; data: ({ value: number } | number)[] }[];
  const bars = series[0].data.map((b) => (typeof b === "number" ? b : b.value));
  // 2000 µs / 5 steps = 0.4 ms; 360000 µs / 5 = 72 ms: the >= 10 ms bin is the biggest bar
  assert.deepEqual(bars, [0.4, 0, 72]);
  assert.equal(series[0].name, "idle time per step (ms)");
  assert.equal(axes(option.yAxis)[0].name, "idle time per step (ms)");
  // the count is still there, as the line on the right axis
  assert.deepEqual(series[1].data, [400, 0, 5]);
  assert.equal(series[1].yAxisIndex, 1);
  assert.equal(axes(option.yAxis)[1].name, "gaps, total (5 steps)");
  // the kernel histogram keeps count bars
  const kernels = histogramOption(hist, light, { noun: "kernels", axis: "kernel duration", scope: "" });
  assert.deepEqual((kernels.series as { data: { value: number }[] }[])[0].data.map((b) => b.value), [400, 0, 5]);
});

test("memory chart: step labels start at their line and run right, clear of the y-axis labels", () => {
  const chart = memoryChart(
    partial<MemoryDevice>({ device: "CUDA:0", series: { allocated: { t_us: [0, 5000], bytes: [1024, 2048] }, reserved: { t_us: [0, 5000], bytes: [2048, 4096] } } }),
  );
  const option = memoryOption(chart, [{ xMs: 0, label: "#2" }, { xMs: 4, label: "#3" }], light);
  const series = option.series as { markLine?: { label?: { align?: string; position?: string }; data?: { xAxis: number; name: string }[] } }[];
  const mark = series.find((x) => x.markLine)?.markLine;
  assert.ok(mark);
  assert.equal(mark.label?.align, "left");
  assert.equal(mark.label?.position, "end");
  assert.deepEqual(mark.data?.map((d) => d.name), ["#2", "#3"]);
});

test("legends wrap instead of paging, and the plot moves down for their rows", () => {
  assert.equal(legendRows([], 500), 0);
  assert.equal(legendRows(["a", "b"], 500), 1);
  // 7 idle causes do not fit one row of 500 px: two rows, nothing hidden behind "1/2"
  const causes = ["Data loading", "Host sync", "Optimizer step", "Kernel launching", "Other CPU ops", "Host busy, untraced", "Nothing recorded"];
  assert.equal(legendRows(causes, 500), 2);
  assert.equal(legendRows(causes, 2000), 1);
  const option = idlePerStepOption(
    { steps: ["#1"], series: causes.map((label, i) => ({ key: `k${i}`, label, valuesMs: [1] })) },
    light,
  );
  assert.equal((option.legend as { type?: string }).type, "plain");
  const wide = fitLegend(option, 2000);
  assert.equal(wide, option, "one row: unchanged");
  const narrow = fitLegend(option, 500);
  assert.equal((narrow.grid as { top: number }).top, (option.grid as { top: number }).top + 22);
});
