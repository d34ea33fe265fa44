import assert from "node:assert/strict";
import { test } from "node:test";

import {
  binLabel,
  durationAxisUnit,
  fmtBandwidth,
  fmtBytes,
  fmtCount,
  fmtDeltaInUnit,
  fmtDuration,
  fmtInUnit,
  fmtMs,
  fmtPercent,
  fmtSignedDuration,
  fmtSignedPercent,
  fmtSpeedup,
  humanize,
  scaleDuration,
  NAME_MAX,
  shortenNames,
} from "../src/format";

test("durations pick a readable unit and always carry it", () => {
  assert.equal(fmtDuration(0), "0 µs");
  assert.equal(fmtDuration(0.25), "250 ns");
  assert.equal(fmtDuration(8.10376), "8.1 µs");
  assert.equal(fmtDuration(15.117), "15.1 µs");
  assert.equal(fmtDuration(450), "450 µs");
  assert.equal(fmtDuration(2345.58), "2.35 ms");
  assert.equal(fmtDuration(32161.012), "32.2 ms");
  assert.equal(fmtDuration(114532.2), "115 ms");
  assert.equal(fmtDuration(1_230_240), "1.23 s");
  assert.equal(fmtDuration(-350), "-350 µs");
  assert.deepEqual(scaleDuration(1000), { value: "1", unit: "ms" });
});

test("missing and non-finite numbers read n/a, never NaN", () => {
  for (const v of [null, undefined, Number.NaN, Number.POSITIVE_INFINITY]) {
    assert.equal(fmtDuration(v), "n/a");
    assert.equal(fmtBytes(v), "n/a");
    assert.equal(fmtPercent(v), "n/a");
    assert.equal(fmtCount(v), "n/a");
    assert.equal(fmtBandwidth(v), "n/a");
    assert.equal(fmtSpeedup(v), "n/a");
  }
});

test("bytes use binary units", () => {
  assert.equal(fmtBytes(0), "0 B");
  assert.equal(fmtBytes(64), "64 B");
  assert.equal(fmtBytes(16 * 1024 * 1024), "16 MiB");
  assert.equal(fmtBytes(278738432), "266 MiB");
  assert.equal(fmtBytes(150109880320), "140 GiB");
  assert.equal(fmtBytes(-20158976), "-19.2 MiB");
});

test("fractions become percentages; tiny shares do not read as zero", () => {
  assert.equal(fmtPercent(0.0737895747807936), "7.4 %");
  assert.equal(fmtPercent(1), "100.0 %");
  assert.equal(fmtPercent(0), "0.0 %");
  assert.equal(fmtPercent(0.00004), "<0.1 %");
  assert.equal(fmtPercent(0.5, 0), "50 %");
});

test("signed changes use a true minus sign and keep small changes visible", () => {
  assert.equal(fmtSignedDuration(-72302.46), "\u221272.3 ms");
  assert.equal(fmtSignedDuration(313.9), "+314 µs");
  assert.equal(fmtSignedDuration(0), "±0 µs");
  assert.equal(fmtSignedPercent(-0.6312849), "\u221263.1 %");
  assert.equal(fmtSignedPercent(1.5395), "+154.0 %");
  assert.equal(fmtSignedPercent(-0.00026), "\u22120.03 %");
  assert.equal(fmtSignedPercent(0), "±0 %");
});

test("speedup reads as x-fold faster or slower", () => {
  assert.equal(fmtSpeedup(2.7121212803626253), "2.71× faster");
  assert.equal(fmtSpeedup(0.8), "1.25× slower");
  assert.equal(fmtSpeedup(1.001), "same speed (1.00×)");
  assert.equal(fmtSpeedup(0), "n/a");
});

test("diff metric values follow the metric's unit", () => {
  assert.equal(fmtInUnit(114532.2172, "µs"), "115 ms");
  assert.equal(fmtInUnit(0.3506712063378514, "fraction"), "35.1 %");
  assert.equal(fmtInUnit(4011749888, "bytes"), "3.74 GiB");
  assert.equal(fmtInUnit(0, "bytes/step"), "0 B/step");
  assert.equal(fmtInUnit(387, "count"), "387");
  assert.equal(fmtInUnit(12.5, "GB/s"), "12.5 GB/s");
  assert.equal(fmtDeltaInUnit(0.5398580557861217, "fraction"), "+54.0 pp");
  assert.equal(fmtDeltaInUnit(-72302.4622, "µs"), "\u221272.3 ms");
  assert.equal(fmtDeltaInUnit(0, "count"), "±0");
});

test("histogram bins and axes are labelled with units", () => {
  assert.equal(binLabel(0, 1), "<1 µs");
  assert.equal(binLabel(1, 2), "1–2 µs");
  assert.equal(binLabel(500, 1000), "500 µs–1 ms");
  assert.equal(binLabel(10000, null), "≥10 ms");
  assert.deepEqual(durationAxisUnit(20), { unit: "µs", divisor: 1 });
  assert.deepEqual(durationAxisUnit(72994), { unit: "ms", divisor: 1000 });
  assert.equal(fmtMs(32360.647), "32.36 ms");
});

test("keys become labels", () => {
  assert.equal(humanize("cpu_ops"), "CPU ops");
  assert.equal(humanize("data_loading"), "Data loading");
  assert.equal(humanize("all_to_all"), "All to all");
});

test("long names are shortened in the middle, alike names stay apart", () => {
  const a = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas";
  const b = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas";
  const c = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas";
  const short = "at::native::vectorized_elementwise_kernel<…>";
  const out = shortenNames([a, b, c, short]);
  assert.equal(out[3], short, "a name that fits is kept");
  assert.equal(new Set(out).size, 4, "no two shortened names are alike");
  for (const s of out.slice(0, 3)) {
    assert.ok(s.length <= NAME_MAX, s);
    assert.ok(s.startsWith("sm80_xmma_gemm"), s);
  }
  assert.equal(out[0], "sm80_xmma_gemm…f32_nn_n_tilesize64x64x8_stage3_…");
  assert.match(out[1], /size32x32/);
  assert.match(out[2], /size64x64/);
  // a long name with nothing like it keeps its tail
  const lone = "void some::very::long::namespace::kernel_name_that_goes_on_and_on_until_the_end(float*)";
  const [s] = shortenNames([lone]);
  assert.equal(s.length, NAME_MAX);
  assert.ok(s.startsWith("void some::ver…") && s.endsWith("until_the_end(float*)"), s);
});

test("names cut alike are cut again where they differ from each other", () => {
  const tail = "_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas";
  const nn32 = `sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8${tail}`;
  const tn32 = `sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8${tail}`;
  const tn64 = `sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8${tail}`;
  const nn64 = `sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8${tail}`;
  const out = shortenNames([nn32, tn32, tn64, nn64]);
  assert.equal(new Set(out).size, 4, out.join("\n"));
  assert.ok(out.every((s) => s.length <= NAME_MAX));
});
