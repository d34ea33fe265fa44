import assert from "node:assert/strict";
import { test } from "node:test";

import {
  breakdownChart,
  changesNote,
  memoryDeviceChoice,
  speedupTone,
  breakdownShares,
  commPerStep,
  defaultMemoryDevice,
  evidenceItems,
  formatByKey,
  headlineParts,
  histogramChart,
  idleCauses,
  idlePerStep,
  largestChanges,
  loadText,
  oneSidedRows,
  memoryChart,
  panelForDiagnosis,
  pythonFrameRows,
  shortFrame,
  sortDiagnoses,
  spanLabel,
  stepBoundariesMs,
  stragglerStory,
  busbwBasisText,
  latenessPerCollective,
  rankPerStep,
  verdictCounts,
} from "../src/shape";
import type {
  CommunicationPanel,
  Diagnosis,
  DiffDocument,
  HistogramBin,
  IdleDevice,
  MemoryDevice,
  RankRow,
  StepsPanel,
  Straggler,
} from "../src/types";
import { partial } from "./fixture";

const STEPS = partial<StepsPanel>({
  count: 2,
  has_markers: true,
  breakdown_order: ["kernel", "memcpy", "communication", "cpu_exec", "other"],
  mean_breakdown_us: { kernel: 3000, memcpy: 0, communication: 0, cpu_exec: 1000, other: 0 },
  steps: [
    { number: 2, start_us: 0, duration_us: 4000, breakdown_us: { kernel: 2500, memcpy: 0, cpu_exec: 1500 }, gpu_utilization_fraction: 0.625 },
    { number: 3, start_us: 4000, duration_us: 4000, breakdown_us: { kernel: 3500, memcpy: 0, cpu_exec: 500 }, gpu_utilization_fraction: 0.875 },
  ],
});

test("diagnoses: most severe first, then by impact, stable otherwise", () => {
  const sorted = sortDiagnoses(
    partial<Diagnosis[]>([
    { id: "a", severity: "low", title: "" },
    { id: "b", severity: "high", title: "", impact_fraction: 0.1 },
    { id: "c", severity: "medium", title: "" },
    { id: "d", severity: "high", title: "", impact_fraction: 0.9 },
    { id: "e", severity: "info", title: "" },
    { id: "f", severity: "weird", title: "" },
    ]),
  );
  assert.deepEqual(sorted.map((d) => d.id), ["d", "b", "c", "a", "e", "f"]);
  assert.deepEqual(sortDiagnoses(undefined), []);
});

test("a diagnosis's panel maps to the page's panel", () => {
  assert.equal(panelForDiagnosis("steps"), "overview");
  assert.equal(panelForDiagnosis("kernels"), "kernels");
  assert.equal(panelForDiagnosis("memory"), "memory");
  assert.equal(panelForDiagnosis("run"), "communication");
  assert.equal(panelForDiagnosis("run", true), "ranks");
  assert.equal(panelForDiagnosis("nonsense"), "overview");
});

test("evidence is formatted by the unit its key names, with a definition", () => {
  const items = evidenceItems({
    short_count_fraction: 0.914616497829233,
    kernels_per_step: 691.0,
    mean_launch_us: 8.10376468885673,
    bytes_per_step: 16777216,
    step_end_bytes: [256933888, 273711104],
    exposed_us_per_step: 168491.5,
    top_kind_busbw_gbps: null,
    largest_idle_cause: "optimizer_step",
    worker: "sampled_rank-1",
    r2: 1.0,
    nested: { ignored: true },
  });
  const byKey = Object.fromEntries(items.map((i) => [i.key, i]));
  assert.equal(byKey.short_count_fraction.text, "91.5 %");
  assert.match(byKey.short_count_fraction.definition, /÷/);
  assert.equal(byKey.kernels_per_step.text, "691/step");
  assert.equal(byKey.mean_launch_us.text, "8.1 µs");
  assert.equal(byKey.bytes_per_step.text, "16.00 MiB/step");
  assert.equal(byKey.step_end_bytes.text, "245.03 MiB, 261.03 MiB");
  assert.equal(byKey.exposed_us_per_step.text, "168.49 ms/step");
  assert.equal(byKey.largest_idle_cause.text, "optimizer step");
  assert.equal(byKey.worker.text, "sampled_rank-1", "names keep their underscores");
  assert.equal(byKey.r2.text, "1.00");
  assert.ok(!("top_kind_busbw_gbps" in byKey), "null evidence is left out");
  assert.equal(byKey.nested.text, "Ignored: yes", "objects are shown as their pairs");
  assert.equal(formatByKey("steps_to_capacity", 8915.87), "8,916 steps");
});

test("step breakdown becomes stacked series in ms, empty categories dropped", () => {
  const chart = breakdownChart(STEPS);
  assert.deepEqual(chart.steps, ["#2", "#3"]);
  assert.deepEqual(chart.series.map((s) => s.key), ["kernel", "cpu_exec"]);
  assert.deepEqual(chart.series[0].valuesMs, [2.5, 3.5]);
  assert.deepEqual(chart.utilizationPct, [62.5, 87.5]);
  assert.deepEqual(chart.stepMs, [4, 4]);
  const shares = breakdownShares(STEPS);
  assert.deepEqual(shares.map((s) => [s.key, s.fraction]), [["kernel", 0.75], ["cpu_exec", 0.25]]);
  assert.deepEqual(breakdownChart(undefined).series, []);
});

test("step boundaries mark each start and the end of the last step", () => {
  assert.deepEqual(stepBoundariesMs(STEPS), [
    { xMs: 0, label: "#2" },
    { xMs: 4, label: "#3" },
    { xMs: 8, label: "end" },
  ]);
});

test("histograms drop empty bins at the ends and flag short bins", () => {
  const h = histogramChart(
    partial<HistogramBin[]>([
      { lo_us: 0, hi_us: 1, count: 0 },
      { lo_us: 1, hi_us: 2, count: 5, time_us: 7 },
      { lo_us: 2, hi_us: 5, count: 0 },
      { lo_us: 5, hi_us: 10, count: 3, time_us: 20 },
      { lo_us: 10, hi_us: 20, count: 1, time_us: 12 },
      { lo_us: 20, hi_us: null, count: 0 },
    ]),
    10,
  );
  assert.deepEqual(h.labels, ["1–2 µs", "2–5 µs", "5–10 µs", "10–20 µs"]);
  assert.deepEqual(h.counts, [5, 0, 3, 1]);
  assert.deepEqual(h.short, [true, true, true, false]);
  assert.equal(histogramChart([], 10).labels.length, 0);
});

const IDLE = partial<IdleDevice>({
  device: 0,
  causes: {
    data_loading: { us: 8000, fraction_of_idle: 0.8, fraction_of_step_time: 0.4 },
    host_sync: { us: 2000, fraction_of_idle: 0.2, fraction_of_step_time: 0.1 },
    launching: { us: 0, fraction_of_idle: 0, fraction_of_step_time: 0 },
  },
  per_step: [
    { number: 2, causes_us: { data_loading: 5000, host_sync: 1000, launching: 0 } },
    { number: 3, causes_us: { data_loading: 3000, host_sync: 1000, launching: 0 } },
  ],
});

test("idle causes keep the backend's order and per-step series skip empty causes", () => {
  const rows = idleCauses(IDLE, ["data_loading", "host_sync", "launching"]);
  assert.deepEqual(rows.map((r) => [r.key, r.label, r.us]), [
    ["data_loading", "Data loading", 8000],
    ["host_sync", "Host sync", 2000],
    ["launching", "Kernel launching", 0],
  ]);
  const per = idlePerStep(IDLE, ["data_loading", "host_sync", "launching"]);
  assert.deepEqual(per.series.map((s) => [s.key, s.valuesMs]), [
    ["data_loading", [5, 3]],
    ["host_sync", [1, 1]],
  ]);
});

test("communication per step in ms with the exposed share in %", () => {
  const c = commPerStep(partial<CommunicationPanel>({ steps: [{ number: 551, exposed_us: 172259, overlapped_us: 23068, exposed_fraction: 0.25 }] }));
  assert.deepEqual(c, { steps: ["#551"], exposedMs: [172.259], overlappedMs: [23.068], exposedPct: [25] });
});

test("memory series pick one unit for the axis and become [ms, value] pairs", () => {
  const device = partial<MemoryDevice>({
    device: "CUDA:0",
    series: {
      allocated: { t_us: [0, 1000, 2000], bytes: [128 * 2 ** 20, 256 * 2 ** 20, 128 * 2 ** 20] },
      reserved: { t_us: [0, 2000], bytes: [512 * 2 ** 20, 512 * 2 ** 20] },
    },
  });
  const m = memoryChart(device);
  assert.equal(m.unit, "MiB");
  assert.deepEqual(m.allocated, [[0, 128], [1, 256], [2, 128]]);
  assert.deepEqual(m.reserved, [[0, 512], [2, 512]]);
  assert.deepEqual(memoryChart(partial<MemoryDevice>({ device: "CPU", series: { allocated: null } })).allocated, []);
});

test("the memory panel opens on the main device, else a GPU", () => {
  const cpu = partial<MemoryDevice>({ device: "CPU", device_type: 0 });
  const gpu = partial<MemoryDevice>({ device: "CUDA:0", device_type: 1 });
  assert.equal(defaultMemoryDevice([cpu, gpu], "CUDA:0"), gpu);
  assert.equal(defaultMemoryDevice([cpu, gpu], null), gpu);
  assert.equal(defaultMemoryDevice([cpu], null), cpu);
});

test("span states read as words with progress", () => {
  assert.equal(loadText({ state: "loading", progress: { estimated_fraction: 0.42 } }), "reading 42 %");
  assert.equal(loadText({ state: "loading", progress: null }), "reading");
  assert.equal(loadText({ state: "queued" }), "queued");
  assert.equal(loadText({ state: "ready" }), "");
  assert.equal(spanLabel({ span: "17", size_bytes: 2048, state: "ready" }), "17 (2 KiB)");
  assert.equal(spanLabel({ span: "17", state: "error" }), "17 — error");
});

const DIFF = partial<DiffDocument>({
  headline: { base_step_us: 114532.2, exp_step_us: 42229.8, speedup: 2.712, change_fraction: -0.631, verdict: "improved" },
  metrics: [
    { key: "step_time_us", label: "step time", unit: "µs", verdict: "improved" },
    { key: "a", label: "a", unit: "µs", verdict: "regressed" },
    { key: "b", label: "b", unit: "µs", verdict: "within noise" },
    { key: "c", label: "c", unit: "µs", verdict: "unchanged" },
    { key: "d", label: "d", unit: "µs", verdict: "improved" },
  ],
  kernels: {
    changed: [
      { name: "small<…>", delta_time_us_per_step: -0.02, time_us_per_step: { base: 1.14, exp: 1.12, verdict: "improved" } },
      { name: "big", delta_time_us_per_step: 500, time_us_per_step: { base: 100, exp: 600, verdict: "regressed" } },
      { name: "same", delta_time_us_per_step: 0, time_us_per_step: { verdict: "unchanged" } },
    ],
    added: [{ name: "new", status: "added", delta_time_us_per_step: 50, time_us_per_step: { base: 0, exp: 50, verdict: "added" } }],
    removed: [{ name: "gone", status: "removed", delta_time_us_per_step: -800, time_us_per_step: { base: 800, exp: 0, verdict: "removed" } }],
  },
});

test("largest changes: names on both sides only, by |Δ|, zero changes left out", () => {
  const rows = largestChanges(DIFF.kernels, 3);
  assert.deepEqual(rows.map((r) => [r.name, r.deltaUs, r.status, r.verdict]), [
    ["big", 500, "changed", "regressed"],
    ["small<…>", -0.02, "changed", "improved"],
  ]);
  assert.deepEqual(largestChanges(undefined), []);
});

test("one-sided rows: added / removed / moved out, no verdict, by time /step on the side that has them", () => {
  const rows = oneSidedRows(DIFF.kernels);
  assert.deepEqual(rows.map((r) => [r.name, r.status, r.label, r.perStepUs]), [
    ["gone", "removed", "removed", 800],
    ["new", "added", "added", 50],
  ]);
  const moved = oneSidedRows(
    partial<DiffDocument["ops"]>({
      removed: [{ name: "aten::stack", status: "moved_out", note: "n", time_us_per_step: { base: 11450, exp: 0, delta: -11450, verdict: "moved out" } }],
    }),
  );
  assert.deepEqual(moved.map((r) => [r.name, r.status, r.label, r.perStepUs, r.note]), [["aten::stack", "moved_out", "moved out", 11450, "n"]]);
  assert.deepEqual(oneSidedRows(undefined), []);
});

test("evidence totals say so: 'total over N steps' beside the per-step value", () => {
  // gpu_idle_dataloader on dataloader_workers0: 365 ms idle over 5 steps, 73 ms per step
  const items = evidenceItems({ idle_us: 365386.796, idle_us_per_step: 73077.36, steps: 5 });
  assert.deepEqual(items.map((i) => [i.label, i.text]), [
    ["Idle, total over 5 steps", "365.39 ms"],
    ["Idle per step", "73.08 ms/step"],
    ["Steps", "5"],
  ]);
  // no `steps` in the evidence: the span's step count, else just "total"
  assert.equal(evidenceItems({ launch_bound_idle_us: 37906 }, 5)[0].label, "Launch bound idle, total over 5 steps");
  assert.equal(evidenceItems({ launch_bound_idle_us: 37906 })[0].label, "Launch bound idle, total");
});

test("diff headline and verdict counts", () => {
  const h = headlineParts(DIFF);
  assert.ok(h);
  assert.equal(h.base, "115 ms");
  assert.equal(h.exp, "42.2 ms");
  assert.equal(h.verdict, "improved");
  assert.deepEqual(verdictCounts(DIFF), { improved: 2, regressed: 1, changed: 0, "within noise": 1, negligible: 0, unchanged: 1, "not judged": 0 });
  const comm = partial<DiffDocument>({ metrics: [{ key: "a", label: "a", unit: "count", verdict: "changed" }, { key: "b", label: "b", unit: "GB/s", verdict: "not judged" }] });
  assert.deepEqual(verdictCounts(comm), { improved: 0, regressed: 0, changed: 1, "within noise": 0, negligible: 0, unchanged: 0, "not judged": 1 });
  assert.equal(headlineParts(partial<DiffDocument>({})), null);
  assert.equal(h.text, null);
  assert.deepEqual(h.gained, []);
  const gained = { id: "memory_growth", severity: "high", title: "Allocated memory grows 16 MiB per step" };
  const told = headlineParts(partial<DiffDocument>({ headline: { ...DIFF.headline, text: "1.10x faster, but memory_growth (high) appeared", gained: [gained] } }));
  assert.ok(told);
  assert.equal(told.text, "1.10x faster, but memory_growth (high) appeared");
  assert.deepEqual(told.gained, [gained]);
});

test("a rank's value per step: its own key, else the wait total ÷ steps (waited only)", () => {
  const row = (r: Partial<RankRow>) => partial<RankRow>({ rank: 0, worker: "r0", ...r });
  // the run view's own per-step keys win
  assert.equal(rankPerStep(row({ wait_us_per_step: 29100, wait_us_total: 1, step_count: 5 }), "wait"), 29100);
  // 145.55 ms waited in total over 5 steps → 29.11 ms /step
  assert.equal(rankPerStep(row({ wait_us_total: 145550, step_count: 5 }), "wait"), 29110);
  assert.equal(rankPerStep(row({ wait_us_total: 145550, step_count: 0 }), "wait"), null);
  assert.equal(rankPerStep(row({ wait_us_total: 145550, step_count: 5 }), "transfer"), null);
  assert.equal(rankPerStep(row({ transfer_us_per_step: 800 }), "transfer"), 800);
  assert.equal(rankPerStep(undefined, "wait"), null);
  assert.equal(rankPerStep(row({ wait_us_total: 1000, step_count: 4 }), "wait"), 250);
});

test("lateness per collective", () => {
  assert.equal(latenessPerCollective(partial<RankRow>({ rank: 1, worker: "r1", lateness_us_per_collective: 2240 })), 2240);
  assert.equal(latenessPerCollective(partial<RankRow>({ rank: 1, worker: "r1", lateness_us_per_collective: null })), null);
  assert.equal(latenessPerCollective(partial<RankRow>({ rank: 1, worker: "r1" })), null);
});

test("bandwidth basis in words", () => {
  assert.match(busbwBasisText("matched_transfer"), /waiting left out/);
  assert.match(busbwBasisText("least_wait_estimate"), /least waiting/);
  assert.match(busbwBasisText(undefined), /includes waiting/);
  assert.match(busbwBasisText("kernel_time"), /includes waiting/);
});

test("straggler evidence: cost /step, share of step, a p-value that stays readable", () => {
  assert.equal(formatByKey("delay_us_per_step", 20100), "20.10 ms/step");
  assert.equal(formatByKey("share_of_step", 0.52), "52.0 %");
  // a probability, as a share: no exponent on the card
  assert.equal(formatByKey("p_value", 2.7e-20), "<0.1 %");
  assert.equal(formatByKey("p_value", 0.31), "31.0 %");
  assert.equal(formatByKey("p_value", 0), "0.0 %");
});

test("python frames: backend order, short names, the main cause and the call paths", () => {
  const device = partial<IdleDevice>({
    device: 0,
    python_frames: [
      {
        frame: "/home/u/train.py(40): log_metrics",
        idle_us: 24000,
        idle_us_per_step: 12000,
        fraction_of_idle: 0.8,
        fraction_of_step_time: 0.6,
        causes_us: { host_sync: 23000, host_untraced: 1000 },
        after_sync_us: 22000,
        per_step_us: [12500, 11500],
        callers: [{ callers: ["train.py(20): step", "train.py(5): main"], idle_us: 24000 }],
      },
      {
        frame: "<built-in function sleep>",
        idle_us: 10,
        idle_us_per_step: 5,
        fraction_of_idle: 0.0005,
        fraction_of_step_time: 0.0002,
        causes_us: {},
        after_sync_us: 0,
        per_step_us: [5, 5],
        callers: [],
      },
    ],
  });
  const rows = pythonFrameRows(device);
  assert.deepEqual(
    rows.map((r) => [r.short, r.perStepUs, r.mainCause, r.afterSyncUs, r.perStepUsList]),
    [
      ["train.py(40): log_metrics", 12000, "host_sync", 22000, [12500, 11500]],
      ["<built-in function sleep>", 5, null, 0, [5, 5]],
    ],
  );
  assert.deepEqual(rows[0].callers, [{ path: ["train.py(20): step", "train.py(5): main"], us: 24000 }]);
  assert.equal(shortFrame("C:\\work\\train.py(7): step"), "train.py(7): step");
  assert.deepEqual(pythonFrameRows(partial<IdleDevice>({ device: 0 })), []);
});

test("the straggler in one explained breakdown, with why it is late", () => {
  // ddp2_straggler: rank 0 waits 29.11 ms/step for rank 1 (16.27 hidden, 12.84 exposed);
  // the cost is 19.56 ms/step; rank 1 spends 18.63 ms/step more outside traced ops
  const s = partial<Straggler>({
    rank: 1,
    delay_us_per_step: 19_560,
    share_of_step: 0.51,
    others_wait_us_per_step: 29_110,
    others_hidden_wait_us_per_step: 16_270,
    others_exposed_wait_us_per_step: 12_840,
    cause: {
      class: "host_untraced",
      label: "host time outside traced ops",
      us_per_step: 18_630,
      straggler_us_per_step: 18_730,
      median_rank_us_per_step: 100,
      share_of_delay: 0.95,
      top: [],
      classes: {},
      launches_per_step_excess: 0,
      reference_ranks: 1,
    },
  });
  assert.equal(
    stragglerStory(s),
    "The other ranks wait 29.1 ms/step in their collectives for rank 1: 16.3 ms of it hidden behind their own compute, 12.8 ms exposed. " +
      "Without it they could all start 19.6 ms/step earlier (its cost, 51 % of their step). " +
      "Why it is late: host time outside traced ops, +18.6 ms/step against the median rank.",
  );
  const gpu = { ...s, cause: { ...s.cause!, class: "gpu_compute", label: "GPU compute", us_per_step: 400, top: [{ kind: "kernel", name: "extra_gemm", us_per_step: 400 }] } };
  assert.match(stragglerStory(gpu) ?? "", /Why it is late: GPU compute, \+400(\.0)? µs\/step against the median rank, most in extra_gemm\.$/);
  // with Python stacks: the frame with the largest excess, its folder dropped
  const framed = { ...s, cause: { ...s.cause!, frames: [{ frame: "/home/u/train.py(40): log_metrics", us_per_step: 18_300, straggler_us_per_step: 18_400 }] } };
  assert.ok(stragglerStory(framed)?.endsWith("against the median rank, in Python train.py(40): log_metrics (+18.3 ms/step)."));
  // no traced class explains it: the breakdown alone
  const unexplained = { ...s, cause: { ...s.cause!, class: null, label: null } };
  assert.ok(stragglerStory(unexplained)?.endsWith("of their step)."));
  assert.equal(stragglerStory(null), null);
  assert.equal(stragglerStory({ ...s, others_wait_us_per_step: null }), null);
});

test("a straggler's cause as evidence items, the numbers as the title writes them", () => {
  // ddp2_straggler's cause (run_view): the title says "host time outside traced ops,
  // +18.56 ms/step against the median rank before the collectives it is late to"
  const title =
    "Rank 1 holds the other ranks back 19.56 ms/step (51 % of their step): host time outside traced ops, +18.56 ms/step against the median rank before the collectives it is late to";
  const items = evidenceItems({
    rank: 1,
    cause: {
      class: "host_untraced",
      label: "host time outside traced ops",
      basis: "before_late_collectives",
      late_collectives: 5,
      us_per_step: 18562.7476,
      straggler_us_per_step: 18662.5286,
      median_rank_us_per_step: 99.781,
      share_of_delay: 0.9489,
      top: [],
      frames: [],
      classes: { gpu_compute: -13.4354, host_untraced: 18562.7476 },
      launches_per_step_excess: -1,
      reference_ranks: 1,
    },
  });
  const byKey = Object.fromEntries(items.map((i) => [i.key, i]));
  assert.equal(byKey.cause.label, "Why it is late");
  assert.equal(byKey.cause.text, "host time outside traced ops");
  assert.equal(byKey.cause_us_per_step.text, "+18.56 ms/step");
  assert.ok(title.includes(`${byKey.cause.text}, ${byKey.cause_us_per_step.text} against the median rank`));
  assert.equal(byKey.cause_straggler_us_per_step.text, "18.66 ms/step");
  assert.equal(byKey.cause_median_rank_us_per_step.text, "99.8 µs/step");
  assert.equal(byKey.cause_share_of_delay.text, "94.9 %");
  assert.equal(byKey.cause_basis.text, "the time before the 5 collectives it is late to");
  // one kernel fewer than the median rank is no cause: not said
  assert.ok(!("cause_launches_per_step_excess" in byKey));
  // the classes that matter; the others in one phrase
  assert.equal(byKey.cause_classes.text, "Host untraced: +18.56 ms/step, 1 other class within ±928.1 µs/step");
  assert.equal(byKey.cause_classes.detail, true);
  assert.ok(!items.some((i) => i.text.includes("[object Object]")));
  assert.ok(byKey.cause.definition.startsWith("Why it is late"));
  // a GPU-compute cause: its kernels as a table, the excess in µs
  const gpu = evidenceItems({
    cause: {
      class: "gpu_compute",
      label: "GPU compute",
      basis: "whole_step",
      us_per_step: 400,
      top: [{ kind: "kernel", name: "extra_gemm", us_per_step: 400 }],
    },
  });
  const g = Object.fromEntries(gpu.map((i) => [i.key, i]));
  assert.equal(g.cause_us_per_step.text, "+400.0 µs/step");
  assert.equal(g.cause_basis.text, "whole steps");
  assert.deepEqual(g.cause_top.table?.rows, [["kernel", "extra_gemm", "400.0 µs/step"]]);
  // no class explains it
  assert.equal(evidenceItems({ cause: { class: null, label: null, us_per_step: 40 } })[0].text, "not in its traced time");
});

test("every evidence shape renders: records as a table, objects as pairs, no [object Object]", () => {
  const items = evidenceItems({
    largest: [
      { t_us: 42738.432, step: 6, requested_bytes: 142606336, op: "aten::empty" },
      { t_us: 40000, step: 5, requested_bytes: 1048576, op: null, extra_fraction: 0.5 },
    ],
    damage: [{ offset: 109296, bytes: 321, events: 1, problem: "JSON is malformed: expected ',' or '}'" }],
    events_per_step: { "2": 3, "3": 4 },
    busbw_gbps: { all_reduce: 241.586 },
    explained_fraction_by_diagnosis: { gpu_idle_host_untraced: 0.25 },
    kineto_errors: [],
    quarantined_by_kind: {},
    deep: { a: { b: 1 } },
  });
  const byKey = Object.fromEntries(items.map((i) => [i.key, i]));
  const largest = byKey.largest.table;
  assert.ok(largest);
  assert.deepEqual(
    largest.columns.map((c) => c.key),
    ["t_us", "step", "requested_bytes", "op", "extra_fraction"],
  );
  assert.deepEqual(largest.rows[0], ["42.74 ms", "#6", "136.00 MiB", "aten::empty", "n/a"]);
  assert.deepEqual(largest.rows[1], ["40.00 ms", "#5", "1.00 MiB", "n/a", "50.0 %"]);
  assert.equal(byKey.largest.text, "2 rows");
  assert.equal(largest.columns[2].numeric, true);
  assert.equal(largest.columns[3].numeric, false);
  assert.deepEqual(byKey.damage.table?.rows[0], ["109,296", "321 B", "1", "JSON is malformed: expected ',' or '}'"]);
  assert.equal(byKey.events_per_step.text, "#2: 3, #3: 4");
  assert.equal(byKey.busbw_gbps.text, "All reduce: 241.6 GB/s");
  assert.equal(byKey.explained_fraction_by_diagnosis.text, "GPU idle host untraced: 25.0 %");
  assert.ok(!("kineto_errors" in byKey) && !("quarantined_by_kind" in byKey), "empty values are left out");
  for (const item of items) {
    const all = [item.text, ...(item.table?.rows.flat() ?? [])].join(" ");
    assert.doesNotMatch(all, /\[object Object\]|undefined|NaN/, item.key);
  }
  assert.equal(formatByKey("x", { a: { b: 1 } }), "A: B: 1");
});

test("thresholds that ride in the evidence are labelled as thresholds", () => {
  const items = evidenceItems({ high_steps_to_capacity: 10000, steps_to_capacity: 280.4, short_threshold_us: 10 });
  const byKey = Object.fromEntries(items.map((i) => [i.key, i]));
  assert.match(byKey.high_steps_to_capacity.label, /^Threshold/);
  assert.equal(byKey.high_steps_to_capacity.text, "10,000 steps");
  assert.match(byKey.short_threshold_us.label, /^Threshold/);
  assert.equal(byKey.steps_to_capacity.text, "280 steps");
  assert.doesNotMatch(byKey.steps_to_capacity.label, /Threshold/);
});

test("issue 48 §10: a within-noise speed-up is not coloured as faster", () => {
  assert.equal(speedupTone("within noise", 1.15), "within-noise");
  assert.equal(speedupTone("improved", 1.15), "faster");
  assert.equal(speedupTone("regressed", 0.8), "slower");
  assert.equal(speedupTone("changed", 0.8), "within-noise");
});

test("issue 48 §10: the change chart's note names every verdict it greys", () => {
  const bar = (verdict: string) => ({ name: verdict, deltaUs: -1, verdict, status: "changed" as const, baseUs: 2, expUs: 1 });
  const note = changesNote([bar("improved"), bar("moved partly"), bar("within noise")], 3);
  assert.match(note, /^3 more unchanged\./);
  assert.match(note, /grey: moved partly or within noise\.$/);
  assert.match(changesNote([bar("regressed")], 0), /grey: within noise\.$/);
});

test("issue 48 §10: the memory device list leaves out a device of a few bytes ('CPU — peak 8 B')", () => {
  const cuda = partial<MemoryDevice>({ device: "CUDA:0", device_type: 1, peak_allocated_bytes: 3e9 });
  const cpu = partial<MemoryDevice>({ device: "CPU", device_type: 0, peak_allocated_bytes: 8 });
  const cuda1 = partial<MemoryDevice>({ device: "CUDA:1", device_type: 1, peak_allocated_bytes: 2e9 });
  assert.deepEqual(memoryDeviceChoice([cpu, cuda, cuda1], cuda), { offered: [cuda, cuda1], tooSmall: [cpu] });
  // asked for by name (the URL), or the only one: offered
  assert.deepEqual(memoryDeviceChoice([cpu, cuda], cpu).offered, [cpu, cuda]);
  assert.deepEqual(memoryDeviceChoice([cpu], cpu), { offered: [cpu], tooSmall: [] });
});

test("issue 48: an evidence object of nulls is left out, not shown as an empty row", () => {
  const items = evidenceItems({ busbw_gbps: { all_gather: null, all_reduce: null }, exposed_us_per_step: 10 });
  assert.deepEqual(items.map((i) => i.key), ["exposed_us_per_step"]);
  const some = evidenceItems({ busbw_gbps: { all_gather: null, all_reduce: 241.586429922509 } });
  assert.equal(some[0].text, "All reduce: 241.6 GB/s");
});
