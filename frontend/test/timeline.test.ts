import assert from "node:assert/strict";
import { test } from "node:test";

import { criticalPathUs, gapView, idleTotals, kernelCount, laneLabelWidth, launchingOp, launchShapes, medianStep, momentOf, momentView, nsDecimal, shapesOf, slowestStep, stackSteps, subRows, visibleRows, windowQuery, worstGap } from "../src/timeline";
import type { Diagnosis, IdleGap, Summary, TimelineStep } from "../src/types";
import { partial } from "./fixture";

const CLASSES = ["compute", "communication", "memcpy", "memset", "data_loading", "host_sync", "optimizer_step", "launching", "cpu_ops", "idle:data_loading", "idle:host_untraced"];

function lane(kind: string, label: string, events: [number, number, number, number, number, number, number][], extra = {}) {
  // [name, offset, dur, class, count, correlation, depth]
  return {
    kind,
    label,
    name: events.map((e) => e[0]),
    offset_us: events.map((e) => e[1]),
    dur_us: events.map((e) => e[2]),
    event_class: events.map((e) => e[3]),
    count: events.map((e) => e[4]),
    correlation: events.map((e) => e[5]),
    depth: events.map((e) => e[6]),
    ...extra,
  };
}

const DOC = partial<TimelineStep>({
  step: 3,
  start_us: 0,
  end_us: 100,
  duration_us: 100,
  kernel_count: 5,
  names: ["K", "nccl", "Memcpy", "aten::mm", "cudaLaunchKernel", "forward", "data_loading", "host_untraced"],
  classes: CLASSES,
  block_us: 0,
  lanes: [
    lane("gpu_stream", "GPU 0 stream 7", [
      [0, 10, 5, 0, 1, 11, 0],
      [0, 16, 0.1, 0, 3, -1, 0], // a stored block of 3
      [2, 20, 5, 2, 1, 12, 0],
    ]),
    lane("gpu_stream", "GPU 0 stream 9", [[1, 30, 20, 1, 1, 13, 0]]),
    lane("host_thread", "thread 1", [
      [5, 0, 60, 8, 1, -1, 0],
      [3, 2, 10, 8, 1, -1, 1],
      [4, 3, 1, 7, 1, 11, 2],
      [4, 25, 1, 7, 1, 13, 2],
    ]),
    lane("idle", "GPU 0 idle", [
      [6, 0, 10, 9, 1, -1, 0],
      [7, 50, 40.5, 10, 1, -1, 0],
      [7, 95, 5, 10, 1, -1, 0],
    ], { device: 0 }),
  ],
});

test("kernels drawn equal the per-step count: blocks count their events, copies do not", () => {
  assert.equal(kernelCount(DOC), 5);
});

test("the idle band's totals per device and cause", () => {
  const totals = idleTotals(DOC);
  assert.deepEqual([...totals.keys()], [0]);
  assert.equal(totals.get(0)?.total, 55.5);
  assert.deepEqual([...(totals.get(0)?.causes ?? new Map()).entries()], [
    ["data_loading", 10],
    ["host_untraced", 45.5],
  ]);
});

test("a kernel's launching call and the ops around it, by correlation", () => {
  const launch = launchingOp(DOC, 11);
  assert.deepEqual(launch, { lane: 2, index: 2, call: "cudaLaunchKernel", ops: ["forward", "aten::mm"], opIndices: [0, 1] });
  assert.deepEqual(launchingOp(DOC, 13)?.ops, ["forward"]);
  assert.equal(launchingOp(DOC, 99), null);
  assert.equal(launchingOp(DOC, -1), null);
});

test("level of detail: narrow neighbours merge below a pixel and part when zoomed in", () => {
  // 1 µs per pixel: the 0.1 µs block right after [10, 15) is narrow, but its neighbour
  // is wide: nothing merges
  const fine = visibleRows(DOC, 0, 100, 1);
  assert.equal(fine.filter((r) => r[0] === 0).length, 3);
  // 10 µs per pixel: [10,15), [16,16.1), [20,25) are each under a pixel and under a
  // pixel apart: one block of 1 + 3 + 1 events
  const coarse = visibleRows(DOC, 0, 100, 10);
  const stream7 = coarse.filter((r) => r[0] === 0);
  assert.deepEqual(stream7, [[0, 10, 25, 0, 0, -1, 5]]);
  // out of the window: left out
  assert.equal(visibleRows(DOC, 60, 100, 1).filter((r) => r[0] === 0).length, 0);
  // host sub-rows by depth
  assert.deepEqual(fine.filter((r) => r[0] === 2).map((r) => r[3]), [0, 1, 2, 2]);
});

test("a Python frames lane: one sub-row, its frames drawn as they are, not a launching op", () => {
  const frames = lane("python_frames", "thread 1 Python", [
    [8, 0, 40, 11, 1, -1, 0],
    [9, 40, 20, 11, 1, -1, 0],
  ], { pid: 1, tid: 1 });
  const doc = { ...DOC, names: [...DOC.names, "train.py(20): train_step", "train.py(40): log_metrics"], classes: [...CLASSES, "python_frame"], lanes: [...DOC.lanes, frames] } as TimelineStep;
  assert.equal(subRows(frames as TimelineStep["lanes"][number]), 1);
  const rows = visibleRows(doc, 0, 100, 1).filter((r) => r[0] === 4);
  assert.deepEqual(rows, [[4, 0, 40, 0, 11, 0, 1], [4, 40, 60, 0, 11, 1, 1]]);
  assert.equal(kernelCount(doc), kernelCount(DOC));
});

const SUMMARY = partial<Summary>({
  steps: {
    steps: [
      { number: 1, duration_us: 900 },
      { number: 2, duration_us: 100 },
      { number: 3, duration_us: 110 },
      { number: 4, duration_us: 130 },
    ],
  },
  idle: {
    main_device: 1,
    devices: [
      { device: 0, largest_gaps: [{ step: 1, offset_us: 5, length_us: 400 }] },
      { device: 1, largest_gaps: [{ step: 4, offset_us: 20, length_us: 8 }] },
    ],
  },
});

test("step shortcuts: the median, the slowest, the main GPU's worst gap", () => {
  assert.equal(medianStep(SUMMARY), 3); // lower median of 100, 110, 130, 900 is 110
  assert.equal(slowestStep(SUMMARY), 1);
  const gap = worstGap(SUMMARY);
  assert.equal(gap?.step, 4);
  assert.deepEqual(gapView(gap!), { window: [10, 38], mark: [20, 28] });
  assert.equal(medianStep(partial<Summary>({ steps: { steps: [] } })), null);
});

test("a diagnosis's moment: the one the analysis set (none without a place in time), shown with a margin", () => {
  const summary = partial<Summary>({
    idle: {
      main_device: 0,
      devices: [
        {
          device: 0,
          largest_gaps: [
            { step: 2, offset_us: 0, length_us: 50, cause: "host_sync" },
            { step: 3, offset_us: 5, length_us: 30, cause: "data_loading" },
            { step: 1, offset_us: 9, length_us: 40, cause: "data_loading" },
            { step: null, offset_us: null, length_us: 90, cause: "data_loading" },
          ],
        },
      ],
    },
  });
  assert.ok(summary);
  const moment = { step: 4, offset_us: 100, length_us: 40, what: "the longest pageable copy" };
  assert.deepEqual(momentOf(partial<Diagnosis>({ id: "pageable_memcpy", moment })), moment);
  assert.equal(momentOf(partial<Diagnosis>({ id: "matmul_without_tensor_cores" })), null); // none
  assert.deepEqual(momentView(moment), { window: [80, 160], mark: [100, 140] });
});

test("two ranks' steps stacked: lanes of both, names shifted, the first side's counts", () => {
  const other = partial<TimelineStep>({
    ...DOC,
    step: 3,
    duration_us: 150,
    names: ["X"],
    lanes: [lane("gpu_stream", "GPU 1 stream 7", [[0, 5, 5, 0, 1, 1, 0], [-1, 20, 1, 0, 4, -1, 0]])],
  });
  const both = stackSteps(DOC, "rank0", other, "rank1");
  assert.equal(both.lanes.length, DOC.lanes.length + 1);
  assert.equal(both.lanes[0].label, "rank0: GPU 0 stream 7");
  const last = both.lanes[both.lanes.length - 1];
  assert.equal(last.label, "rank1: GPU 1 stream 7");
  assert.deepEqual(last.name, [DOC.names.length, -1]); // "X" after DOC's names; a block stays -1
  assert.equal(both.names[last.name[0]], "X");
  assert.equal(both.duration_us, 150);
  assert.equal(kernelCount(both), kernelCount(DOC) + 5); // both sides drawn
  assert.equal(both.kernel_count, DOC.kernel_count);
});

test("input shapes on hover: a host op's own, a kernel's from the op that launched it", () => {
  const host = DOC.lanes[2];
  const doc = partial<TimelineStep>({ ...DOC, shapes: ["[[16, 512], [512, 512]]", "[[8]]"], lanes: [DOC.lanes[0], DOC.lanes[1], { ...host, shape: [-1, 0, -1, -1] }, DOC.lanes[3]] });
  assert.equal(shapesOf(doc, doc.lanes[2], 1), "[[16, 512], [512, 512]]"); // aten::mm
  assert.equal(shapesOf(doc, doc.lanes[2], 0), null); // forward: none recorded
  assert.equal(shapesOf(DOC, DOC.lanes[2], 1), null); // a trace without shapes
  const launch = launchingOp(doc, 11);
  assert.ok(launch);
  assert.equal(launchShapes(doc, launch), "[[16, 512], [512, 512]]"); // the innermost op with shapes
  // stacked: the second side's shape indices are shifted past the first's
  const b = partial<TimelineStep>({ ...doc, shapes: ["[[1]]"], lanes: [{ ...host, shape: [0, -1, -1, -1] }] });
  const both = stackSteps(doc, "rank0", b, "rank1");
  assert.deepEqual(both.shapes, ["[[16, 512], [512, 512]]", "[[8]]", "[[1]]"]);
  assert.equal(shapesOf(both, both.lanes[4], 0), "[[1]]");
});

test("criticalPathUs sums the critical-path lane, null without one", () => {
  assert.equal(criticalPathUs(DOC), null);
  const withPath = { ...DOC, lanes: [...DOC.lanes, lane("critical_path", "critical path", [[-1, 0, 5, 0, 1, -1, 0], [-1, 5, 5, 0, 1, -1, 0], [0, 10, 80.0004, 0, 1, -1, 0]])] } as TimelineStep;
  assert.equal(criticalPathUs(withPath), 90);
});

test("window bounds go to the server rounded to the ns, as plain decimals", () => {
  // a Largest-gaps row's window: the float's own text was sent (HTTP 400)
  assert.equal(String(766.7589999999999), "766.7589999999999");
  assert.deepEqual(windowQuery([766.7589999999999, 75180.70300000001]), { start_us: "766.759", end_us: "75180.703" });
  assert.equal(nsDecimal(-12.3456), "-12.346");
  assert.equal(nsDecimal(0.0001), "0");
  assert.equal(nsDecimal(-0.0004), "0");
  assert.equal(nsDecimal(5), "5");
  assert.equal(nsDecimal(1e-7), "0");
  assert.equal(nsDecimal(123456789.0125), "123456789.013");
  assert.deepEqual(windowQuery(null), {});
  // gapView of a real gap, through to the query
  const view = gapView(partial<IdleGap>({ offset_us: 866.759, length_us: 200.0000000001 }));
  assert.deepEqual(windowQuery(view.window), { start_us: "766.759", end_us: "1166.759" });
});

test("issue 48 §10: the lane labels' margin fits the longest label (it cut 'thread 453 (pt_autogra…')", () => {
  const label = "thread 453 (pt_autograd_0)";
  assert.ok(laneLabelWidth(["stream 7", label]) - 12 >= label.length * 7);
  assert.equal(laneLabelWidth(["stream 7"]), 170);
  assert.equal(laneLabelWidth(["x".repeat(200)]), 360);
});
