import assert from "node:assert/strict";
import { test } from "node:test";

import { historyGroups, historyOption, historyPoints, plural, seriesHeading } from "../src/panels/history";
import { palette } from "../src/theme";
import type { HistoryDocument, HistorySeries } from "../src/types";
import { paramsFromState, stateFromParams } from "../src/urlstate";
import { partial } from "./fixture";

const light = palette(false);
const T0 = 1_795_000_000_000_000_000; // ns

function run(name: string, i: number, medianUs: number, extra: object = {}) {
  return { run: name, start_ns: T0 + i * 3.6e12, start_time: "", median_step_us: medianUs, std_step_us: 500, outlier: [], change: [], ...extra };
}

const SERIES = partial<HistorySeries>({
  name: "exp",
  runs: [run("exp_0", 0, 10_000), run("exp_1", 1, 10_000), run("exp_2", 2, 30_000, { outlier: ["step_time"] }), run("exp_3", 3, 12_000), run("exp_4", 4, 12_000)],
  changes: [
    { run: "exp_2", metric: "step_time", verdict: "outlier", confirmed: true, change_fraction: 2 },
    { run: "exp_3", metric: "step_time", verdict: "regressed", confirmed: true, change_fraction: 0.2 },
    { run: "exp_4", metric: "gpu_utilization", verdict: "improved", confirmed: false, change_fraction: 0.3 },
  ],
});

test("history points: time in ms, median and a band of ± std in ms", () => {
  const pts = historyPoints(SERIES);
  assert.deepEqual(pts.medianMs[0], [T0 / 1e6, 10]);
  assert.deepEqual(pts.lowMs[0], [T0 / 1e6, 9.5]);
  assert.deepEqual(pts.bandMs[0], [T0 / 1e6, 1]);
  assert.equal(pts.medianMs[3][0] - pts.medianMs[0][0], 3 * 3.6e6);
});

test("history chart: a line at each step-time level change, none at an outlier, axes with units", () => {
  const option = historyOption(SERIES, light) as Record<string, any>;
  const median = option.series[2];
  const lines = median.markLine.data;
  assert.equal(lines.length, 1); // the outlier and the GPU-utilization change are not step-time level changes
  assert.equal(lines[0].xAxis, (T0 + 3 * 3.6e12) / 1e6);
  assert.equal(lines[0].lineStyle.color, light.bad);
  assert.equal(lines[0].lineStyle.type, "solid");
  assert.match(lines[0].name, /regressed \+20\.0 %/);
  assert.equal(median.symbol, "none"); // the points are the scatter series below
  const [points, outliers] = [option.series[3], option.series[4]];
  assert.equal(points.type, "scatter");
  assert.equal(points.name, median.name); // a click on a point opens its run
  assert.equal(points.large, true);
  assert.equal(points.largeThreshold, 200); // large mode (one path) from 200 runs on
  assert.equal(points.itemStyle.color, light.accent);
  assert.equal(points.data.length, 5);
  // one entry per run, so that dataIndex is the run's index; only exp_2 is drawn
  assert.deepEqual(
    outliers.data.map((d: [number, number | null]) => d[1]),
    [null, null, 30, null, null],
  );
  assert.equal(outliers.itemStyle.color, light.warn);
  assert.equal(option.yAxis.name, "step time (ms)");
  assert.equal(option.xAxis.type, "time");
});

test("the History mode survives the URL", () => {
  const state = stateFromParams([["ki_mode", "history"]]);
  assert.equal(state.mode, "history");
  assert.deepEqual(paramsFromState(state), [["ki_mode", "history"]]);
  assert.equal(stateFromParams([["ki_mode", "nonsense"]]).mode, "runs");
  assert.equal(stateFromParams([["ki_mode", "nonsense"], ["ki_run", "a"]]).mode, "run");
});

test("series of one run are folded into one list; the filter matches series and run names", () => {
  const one = (name: string) => partial<HistorySeries>({ name, runs: [run(name, 0, 1000)], changes: [] });
  const doc = partial<HistoryDocument>({ series: [SERIES, one("toy_a"), one("dataloader_workers0")], skipped: {} });
  const all = historyGroups(doc, "");
  assert.deepEqual(all.series.map((s) => s.name), ["exp"]);
  assert.deepEqual(all.alone.map((r) => r.run), ["toy_a", "dataloader_workers0"]);
  assert.deepEqual(historyGroups(doc, "LOADER").alone.map((r) => r.run), ["dataloader_workers0"]);
  assert.deepEqual(historyGroups(doc, "exp_3").series.map((s) => s.name), ["exp"]); // a run's name
  assert.deepEqual(historyGroups(doc, "nothing"), { series: [], alone: [] });
});

test("counts say 1 run, 2 runs", () => {
  assert.equal(plural(1, "run"), "1 run");
  assert.equal(plural(49, "run"), "49 runs");
  assert.equal(plural(2, "series", "series"), "2 series");
  assert.equal(seriesHeading(SERIES), "exp — 5 runs, 2 change points, 1 outlier");
  assert.equal(seriesHeading(partial<HistorySeries>({ name: "a", runs: [run("a", 0, 1)], changes: [SERIES.changes[1]] })), "a — 1 run, 1 change point, 0 outliers");
});
