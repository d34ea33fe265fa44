import assert from "node:assert/strict";
import { test } from "node:test";

import { fmtRate, rooflineOption } from "../src/panels/efficiency";
import { palette } from "../src/theme";
import type { EfficiencyPanel, EfficiencyRow } from "../src/types";
import { partial } from "./fixture";

const PEAK = {
  device_name: "NVIDIA H200",
  model: "H200 SXM",
  source: "datasheet",
  fp64_flops_per_s: 34e12,
  fp64_tensor_flops_per_s: 67e12,
  fp32_flops_per_s: 67e12,
  tf32_tensor_flops_per_s: 494.5e12,
  bf16_tensor_flops_per_s: 989e12,
  fp16_tensor_flops_per_s: 989e12,
  fp8_tensor_flops_per_s: 1979e12,
  memory_bytes_per_s: 4.8e12,
};

function rowOf(over: Partial<EfficiencyRow>): EfficiencyRow {
  return partial<EfficiencyRow>({
    op: "aten::mm",
    shapes: "[[4096, 4096], [4096, 4096]]",
    dtype: "bf16",
    category: "matmul",
    unit: "bf16_tensor",
    kernels: ["nvjet"],
    calls_per_step: 10,
    time_us_per_step: 1800,
    arithmetic_intensity: 1365.3,
    achieved_flops_per_s: 755e12,
    achieved_bytes_per_s: 0.55e12,
    roof_fraction: 0.76,
    bound: "compute",
    cuda_cores: false,
    reason: null,
    ...over,
  });
}

test("roofline: roofs per unit bend at the ridge, points in TFLOP/s sized by time", () => {
  const e = partial<EfficiencyPanel>({
    peak: PEAK,
    rows: [rowOf({}), rowOf({ op: "aten::add", category: "memory", unit: "memory", arithmetic_intensity: null, achieved_flops_per_s: null })],
  });
  const opt = rooflineOption(e, palette(false)) as { series: { name: string; data: unknown[] }[]; xAxis: { type: string }; yAxis: { type: string } };
  assert.equal(opt.xAxis.type, "log");
  assert.equal(opt.yAxis.type, "log");
  const names = opt.series.map((s) => s.name);
  assert.deepEqual(names, ["BF16 tensor roof", "FP32 (CUDA cores) roof", "op groups"]);
  const bf16 = opt.series[0].data as [number, number][];
  assert.equal(bf16[1][0], 989e12 / 4.8e12); // the ridge point
  assert.equal(bf16[2][1], 989); // flat at the peak, TFLOP/s
  const points = opt.series[2].data as { value: [number, number] }[];
  assert.equal(points.length, 1); // the memory op has no FLOPs: not on the chart
  assert.deepEqual(points[0].value, [1365.3, 755]);
});

test("roofline: no chart without peaks or FLOPs", () => {
  assert.equal(rooflineOption(partial<EfficiencyPanel>({ peak: null, rows: [rowOf({})] }), palette(false)), null);
  assert.equal(rooflineOption(partial<EfficiencyPanel>({ peak: PEAK, rows: [] }), palette(false)), null);
});

test("rates carry SI prefixes and units", () => {
  assert.equal(fmtRate(755e12, "FLOP/s"), "755 TFLOP/s");
  assert.equal(fmtRate(4.8e12, "B/s"), "4.8 TB/s");
  assert.equal(fmtRate(null, "B/s"), "–");
});
