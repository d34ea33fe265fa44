import assert from "node:assert/strict";
import { test } from "node:test";

import { hasPages, lostText, orderText, pageText } from "../src/panels/across";
import type { AcrossRunsPage, AcrossRunsRow } from "../src/types";
import { paramsFromState, stateFromParams } from "../src/urlstate";
import { partial } from "./fixture";

function page(extra: Partial<AcrossRunsPage>): AcrossRunsPage {
  return partial<AcrossRunsPage>({ query: "", total: 2000, matched: 2000, offset: 0, limit: 50, loading: 0, rows: [], sort: "worst", reverse: false, severity: "", ...extra });
}

test("the view across runs says which rows it shows, of how many, in which order", () => {
  const rows = new Array(50).fill({});
  assert.equal(pageText(page({ rows })), "Runs 1–50 of 2,000 runs, worst first.");
  assert.equal(pageText(page({ rows: rows.slice(0, 7), offset: 1950, matched: 1957 })), "Runs 1,951–1,957 of 1,957 matching (of 2,000 runs), worst first.");
  assert.equal(pageText(page({ query: "leak", matched: 0 })), "No run matches (of 2,000 runs).");
  assert.equal(pageText(page({ severity: "high", matched: 0 })), "No run matches (of 2,000 runs).");
  assert.equal(pageText(page({ total: 0, matched: 0 })), "No runs.");
  assert.equal(pageText(page({ rows: rows.slice(0, 1), total: 1, matched: 1, sort: "lost" })), "Runs 1–1 of 1 run, most time lost per step first.");
  assert.equal(orderText("step", true), "shortest step first");
  assert.equal(orderText("util", false), "lowest GPU utilization first");
});

test("the pager is there only when the runs fill more than a page", () => {
  assert.equal(hasPages(page({ matched: 70 })), true);
  assert.equal(hasPages(page({ matched: 50 })), false); // one page: "‹ previous next ›" looked live
  assert.equal(hasPages(page({ matched: 3, total: 70, query: "x" })), false);
  assert.equal(hasPages(page({ matched: 60, offset: 50 })), true);
});

test("time lost per step with its share of the step", () => {
  const row = (extra: Partial<AcrossRunsRow>) => partial<AcrossRunsRow>({ state: "ready", time_lost_fraction: null, time_lost_us_per_step: null, ...extra });
  assert.equal(lostText(row({ time_lost_fraction: 0.644, time_lost_us_per_step: 73077.36 })), "73.1 ms (64 %)");
  assert.equal(lostText(row({})), "none");
  assert.equal(lostText(row({ state: "loading" })), "–");
});

test("the order and the severity filter ride in the address bar", () => {
  const state = stateFromParams([
    ["ki_mode", "runs"],
    ["ki_sort", "lost"],
    ["ki_reverse", "1"],
    ["ki_severity", "high"],
  ]);
  assert.deepEqual(state.list, { q: undefined, offset: undefined, sort: "lost", reverse: true, severity: "high" });
  assert.deepEqual(paramsFromState(state), [
    ["ki_mode", "runs"],
    ["ki_sort", "lost"],
    ["ki_reverse", "1"],
    ["ki_severity", "high"],
  ]);
  // unknown values are dropped, the ranking is the default
  const odd = stateFromParams([["ki_mode", "runs"], ["ki_sort", "name"], ["ki_severity", "loud"], ["ki_reverse", "yes"]]);
  assert.deepEqual(odd.list, { q: undefined, offset: undefined, sort: undefined, reverse: undefined, severity: undefined });
});
