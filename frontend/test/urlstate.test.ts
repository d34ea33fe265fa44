import assert from "node:assert/strict";
import { test } from "node:test";

import {
  emptyState,
  formatHash,
  formatRange,
  mergeHash,
  missingFromLink,
  paramsFromState,
  parseHash,
  parseRange,
  sameState,
  stateFromHash,
} from "../src/urlstate";

test("TensorBoard's hash format: the tab first, then encoded key=value pairs", () => {
  const parsed = parseHash("#kineto_insights&ki_run=a%2Fb&tagFilter=loss");
  assert.equal(parsed.tab, "kineto_insights");
  assert.deepEqual(parsed.params, [
    ["ki_run", "a/b"],
    ["tagFilter", "loss"],
  ]);
  assert.equal(formatHash(parsed), "kineto_insights&ki_run=a%2Fb&tagFilter=loss");
  assert.deepEqual(parseHash(""), { tab: null, params: [] });
  assert.deepEqual(parseHash("#ki_run=%E0%A4%A"), { tab: null, params: [["ki_run", "%E0%A4%A"]] });
});

test("merging keeps the tab and foreign keys and replaces ours", () => {
  const state = emptyState();
  state.run = { run: "transformer_eager", worker: "worker0", span: "1795950453055964941" };
  const hash = mergeHash("#kineto_insights&ki_run=old&ki_mode=diff&smoothing=0.6", state);
  assert.equal(
    hash,
    "kineto_insights&smoothing=0.6&ki_run=transformer_eager&ki_worker=worker0&ki_span=1795950453055964941",
  );
  assert.deepEqual(stateFromHash(`#${hash}`).run, state.run);
});

test("names with &, =, spaces, < and > survive the round trip", () => {
  const state = emptyState();
  state.run = { run: "name/run & more=1", worker: "host <1>_42", span: "7" };
  const back = stateFromHash(`#${mergeHash("#kineto_insights", state)}`);
  assert.deepEqual(back.run, state.run);
});

test("all ranks and diff sides", () => {
  const state = emptyState();
  state.mode = "diff";
  state.run = { run: "ddp", allRanks: true, spanIndex: 0 };
  state.base = { run: "dataloader_workers0" };
  state.exp = { run: "dataloader_workers4", worker: "worker0", span: "1795951038997337053" };
  // Compare mode: only the two sides, no stale single-run keys
  assert.deepEqual(paramsFromState(state), [
    ["ki_mode", "diff"],
    ["ki_base_run", "dataloader_workers0"],
    ["ki_exp_run", "dataloader_workers4"],
    ["ki_exp_worker", "worker0"],
    ["ki_exp_span", "1795951038997337053"],
  ]);
  const back = stateFromHash(`#x&${formatHash({ tab: null, params: paramsFromState(state) })}`);
  assert.equal(back.mode, "diff");
  assert.deepEqual(back.run, { run: undefined, worker: undefined, span: undefined });
  assert.deepEqual(back.base, { run: "dataloader_workers0", worker: undefined, span: undefined });
  assert.deepEqual(back.exp, state.exp);
  state.mode = "run";
  assert.deepEqual(paramsFromState(state), [
    ["ki_run", "ddp"],
    ["ki_ranks", "all"],
    ["ki_span_index", "0"],
  ]);
  const ranks = stateFromHash(`#x&${formatHash({ tab: null, params: paramsFromState(state) })}`);
  assert.deepEqual(ranks.run, { run: "ddp", worker: undefined, span: undefined, allRanks: true, spanIndex: 0 });
});

test("the timeline's step, window and mark ride in the hash", () => {
  const state = emptyState();
  state.run = { run: "r", worker: "w", span: "1", step: 7, window: [-12.5, 1040.1234], mark: [100, 200.25] };
  const params = paramsFromState(state);
  assert.deepEqual(params.slice(3), [
    ["ki_step", "7"],
    ["ki_window", "-12.5~1040.123"],
    ["ki_mark", "100~200.25"],
  ]);
  const back = stateFromHash(`#kineto_insights&${formatHash({ tab: null, params })}`);
  assert.deepEqual(back.run, { ...state.run, window: [-12.5, 1040.123] });
  assert.ok(sameState(back, state));
  // junk or empty ranges are dropped; no step, no window
  assert.equal(parseRange("5~5"), null);
  assert.equal(parseRange("a~b"), null);
  assert.equal(parseRange("3-4"), null);
  assert.deepEqual(parseRange("3~4"), [3, 4]);
  const junk = stateFromHash("#k&ki_run=r&ki_step=x&ki_window=1~2");
  assert.equal(junk.run.step, undefined);
  assert.equal(junk.run.window, undefined);
  assert.equal(formatRange([1 / 3, 2]), "0.333~2");
  // another step is another state
  assert.ok(!sameState(back, { ...state, run: { ...state.run, step: 8 } }));
});

test("an empty or foreign hash gives the default view: the runs ranked", () => {
  const s = stateFromHash("#scalars&run=x");
  assert.equal(s.mode, "runs");
  assert.deepEqual(s.base, {});
  assert.equal(s.run.run, undefined);
});

test("a link naming a run that is not there is said, not silently replaced", () => {
  const runs = [{ run: "dataloader_workers0", workers: [{ worker: "worker0", spans: [{ span: "1795951036842854127" }] }] }];
  assert.equal(
    missingFromLink(stateFromHash("#kineto_insights&ki_run=nope"), runs),
    'The run "nope" is not (or no longer) in the log directory.',
  );
  assert.equal(
    missingFromLink(stateFromHash("#kineto_insights&ki_run=dataloader_workers0&ki_worker=gone"), runs),
    'Worker "gone" of the run "dataloader_workers0" is not (or no longer) there.',
  );
  assert.equal(missingFromLink(stateFromHash("#kineto_insights&ki_run=dataloader_workers0&ki_worker=worker0&ki_span=1795951036842854127"), runs), null);
  // no run in the link: nothing to say
  assert.equal(missingFromLink(stateFromHash("#kineto_insights"), runs), null);
  // diff sides too
  assert.match(missingFromLink(stateFromHash("#kineto_insights&ki_mode=diff&ki_run=dataloader_workers0&ki_base_run=dataloader_workers0&ki_exp_run=old"), runs) ?? "", /[Tt]he experiment run "old" is not \(or no longer\)/);
});

test("the view across runs keeps its filter and page in the URL", () => {
  const s = stateFromHash("#kineto_insights&ki_mode=runs&ki_q=memory%20leak&ki_offset=50");
  assert.equal(s.mode, "runs");
  assert.deepEqual(s.list, { q: "memory leak", offset: 50, sort: undefined, reverse: undefined, severity: undefined });
  assert.deepEqual(paramsFromState(s), [
    ["ki_mode", "runs"],
    ["ki_q", "memory leak"],
    ["ki_offset", "50"],
  ]);
  // a run named without a mode is that run; a junk offset is the first page
  assert.equal(stateFromHash("#kineto_insights&ki_run=a").mode, "run");
  assert.equal(stateFromHash("#kineto_insights&ki_mode=runs&ki_offset=-3").list.offset, undefined);
  // the filter is not kept when another view is shown
  s.mode = "history";
  assert.deepEqual(paramsFromState(s), [["ki_mode", "history"]]);
});

test("the stacked rank lives in the address bar: a worker, or none; absent means the tab's choice", () => {
  const state = emptyState();
  state.run = { run: "ddp", worker: "rank0", step: 3, stack: "rank1" };
  const hash = mergeHash("#kineto_insights", state);
  assert.ok(hash.includes("ki_stack=rank1"));
  assert.equal(stateFromHash(hash).run.stack, "rank1");
  state.run.stack = "none";
  assert.equal(stateFromHash(mergeHash("#kineto_insights", state)).run.stack, "none");
  state.run.stack = undefined;
  assert.equal(stateFromHash(mergeHash("#kineto_insights", state)).run.stack, undefined);
  assert.ok(!mergeHash("#kineto_insights", state).includes("ki_stack"));
});
