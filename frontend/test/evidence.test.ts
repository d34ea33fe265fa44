import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { fixed, formatEvidence, unitOf } from "../src/evidence";

// [key, value, text]: written by tb_kineto_insights/analysis/evidence_units.py; the
// Python tests (tests/test_evidence_units.py) check the same file.
const CASES = JSON.parse(readFileSync(new URL("../../test/evidence_cases.json", import.meta.url), "utf8")) as [string, unknown, string][];

test("every evidence case reads as the Python side writes it", () => {
  assert.ok(CASES.length > 200);
  const wrong = CASES.filter(([key, value, text]) => formatEvidence(key, value) !== text).map(([key, value, text]) => [key, value, text, formatEvidence(key, value)]);
  assert.deepEqual(wrong, []);
});

test("units come from the key: conventions, per step, exceptions, named things counted", () => {
  assert.deepEqual(unitOf("idle_us_per_step"), { unit: "us", perStep: true });
  assert.deepEqual(unitOf("kernels_per_step"), { unit: "count", perStep: true });
  assert.deepEqual(unitOf("kernels"), { unit: "name", perStep: false });
  assert.deepEqual(unitOf("classes"), { unit: "us", perStep: true });
  assert.deepEqual(unitOf("cost_fraction_of_step_time"), { unit: "fraction", perStep: false });
  assert.deepEqual(unitOf("estimated_step_speedup_bf16"), { unit: "times", perStep: false });
  assert.deepEqual(unitOf("fp32_peak_flops_per_s"), { unit: "flop_rate", perStep: false });
  // a key a later rule adds, named by the convention, needs no change here
  assert.deepEqual(unitOf("new_rule_wait_us_per_step"), { unit: "us", perStep: true });
  assert.deepEqual(unitOf("new_rule_saving_fraction"), { unit: "fraction", perStep: false });
});

test("fixed rounds as Python's format: ties to even, the exact binary value otherwise", () => {
  assert.equal((0.125).toFixed(2), "0.13"); // JavaScript: ties up
  assert.equal(fixed(0.125, 2), "0.12");
  assert.equal(fixed(0.375, 2), "0.38");
  assert.equal(fixed(2.5, 0), "2");
  assert.equal(fixed(3.5, 0), "4");
  assert.equal(fixed(0.35, 1), "0.3"); // 0.34999…
  assert.equal(fixed(-0.04, 1), "-0.0");
  assert.equal(fixed(1234.5678, 1), "1234.6");
});
